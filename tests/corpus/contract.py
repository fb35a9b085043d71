"""Broken kernels that are wrong only where the suite used to look away (issue 10: "a pass must mean checked";
issue 19: "draw the whole input contract"): a fault hidden by the capability probe, a gradient wrong only where
the bound was infinite, shapes and sizes never drawn, views into larger buffers, reused output buffers.

Each is the textbook float32 implementation (:func:`tests.corpus.statistics._normalize`, correct statistics) with
one defect; each docstring says the defect, the claim that must catch it and with which status (``failed`` for a
wrong answer, ``error`` for a fault that leaves the claim unchecked).
"""

from __future__ import annotations

import torch

from core.registry import Kernel
from corpus.groupnorm import refuse_invalid_groups
from corpus.memory import read_rows_by_the_last_row_stride
from corpus.statistics import FLOAT32_ARITHMETIC, _layernorm_statistics, _normalize, _rmsnorm_statistics

SPEC = "tests/corpus/contract.py:"


def _layernorm(x, weight, bias, eps):
    return _normalize(x, weight, bias, eps, _layernorm_statistics)


def _rmsnorm(x, weight, eps):
    return _normalize(x, weight, None, eps, _rmsnorm_statistics)


def layernorm_float64_in_float32(x, weight, bias, eps):
    """The float32 implementation, taking float64 x as well (``x.float()``, ``.to(x.dtype)``: Hugging Face's norm
    modules, patrick-kidger/equinox#723): float64 x normalized in float32 and returned in float64, ~1e-8 off. Must
    fail ln.forward (its float64 draw)."""
    return _layernorm(x, weight, bias, eps)


def rmsnorm_float64_in_float32(x, weight, eps):
    """RMSNorm's float32 implementation, taking float64 x as well. Must fail rms.forward (its float64 draw)."""
    return _rmsnorm(x, weight, eps)


def add_rmsnorm_float64_in_float32(x, residual, weight, eps):
    """Fused add + RMSNorm written as vLLM's RMSNorm.forward_native / Hugging Face's LlamaRMSNorm (``h.to(
    torch.float32)``, normalize, cast back): residual_out = x + residual is right, float64 x and residual normalized
    in float32 (patrick-kidger/equinox#723's class, which ln/rms.forward's float64 draw catches for the plain kinds;
    the fused kinds drew no float64). Must fail add_rms.forward and add_rms.jacobian (their float64 draws)."""
    h = x + residual
    return _rmsnorm(h, weight, eps), h


def add_layernorm_float64_in_float32(x, residual, weight, bias, eps):
    """Fused add + LayerNorm as apex's and Megatron's MixedFusedLayerNorm fallbacks write it, ``F.layer_norm(
    h.float(), ...).to(h.dtype)``: float64 x and residual normalized in float32 (equinox#723's class). Must fail
    add_ln.forward and add_ln.jacobian (their float64 draws)."""
    h = x + residual
    return _layernorm(h, weight, bias, eps), h


class _Float32Backward(torch.autograd.Function):
    """LayerNorm whose forward computes in promote(x, float32) (float64 x in float64) and whose backward's buffers
    are float32 whatever x: :func:`_correct_backward` of the float32-rounded xhat, rstd, dy."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        h = x.to(torch.promote_types(x.dtype, torch.float32))
        mean, rstd = _layernorm_statistics(h, eps, x.dtype)
        xhat = (h - mean) * rstd
        ctx.save_for_backward(x, weight, xhat, rstd)
        ctx.bias_dtype = None if bias is None else bias.dtype
        y = xhat if weight is None else xhat * weight.to(h.dtype)
        return (y if bias is None else y + bias.to(h.dtype)).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, weight, xhat, rstd = ctx.saved_tensors
        dx, dweight, dbias = _correct_backward(x, weight, dy.float(), xhat.float(), rstd.float())
        return (dx.to(x.dtype), None if weight is None else dweight.to(weight.dtype),
                None if ctx.bias_dtype is None else dbias.to(ctx.bias_dtype), None)


def layernorm_backward_float32_for_float64(x, weight, bias, eps):
    """LayerNorm (autograd.Function) whose forward computes float64 x in float64 (ln.forward's float64 draw passes it)
    and whose backward's buffers are hard-coded float32 (a Triton/CUDA backward's tl.float32 accumulators and saved
    statistics, as Liger-Kernel's and the Triton tutorial's): dx, dweight, dbias of float64 inputs are float32 values,
    ~1e-7 relative, and torch.autograd.gradcheck fails on it (equinox#723's class in the backward;
    pytorch/pytorch#141425: LayerNorm gradients agree with a manual VJP only in float64). Gradients were drawn in the
    storage dtypes only. Must fail ln.jacobian (its float64 draw)."""
    return _Float32Backward.apply(x, weight, bias, eps)


def rmsnorm_float32_output(x, weight, eps):
    """Returns float32 for float16/bfloat16 input (the cast back forgotten). The capability probe used to file this
    as "does not compute in float16/bfloat16", drop both dtypes and pass. Must be an error of rms.forward (the
    output's dtype is wrong: the claim cannot be checked)."""
    x32 = x.float()
    y = x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True) + eps)
    return y if weight is None else y * weight.float()


def layernorm_nan_in_float16(x, weight, bias, eps):
    """All-NaN output in float16 (an overflowing float16 intermediate). The probe used to drop float16 because of
    the NaN, and ln.forward passed. Must fail ln.forward (NaN on finite input)."""
    y = _layernorm(x, weight, bias, eps)
    return y * float("nan") if x.dtype == torch.float16 else y


class _RaisingBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        with torch.no_grad():
            return _layernorm(x, weight, bias, eps)

    @staticmethod
    def backward(ctx, dy):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")


def layernorm_backward_raises(x, weight, bias, eps):
    """A backward that exists (the output has a grad_fn) but raises. It used to be taken for "no backward": 2
    passed, 4 skipped, exit 0. Must be an error of ln.jacobian."""
    return _RaisingBackward.apply(x, weight, bias, eps)


class _Backward(torch.autograd.Function):
    """LayerNorm whose backward is ``backward(x, weight, dy, xhat, rstd) -> (dx, dweight, dbias)`` in float32."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps, backward):
        x32 = x.float()
        mean, rstd = _layernorm_statistics(x32, eps, x.dtype)
        xhat = (x32 - mean) * rstd
        ctx.save_for_backward(x, weight, xhat, rstd)
        ctx.backward, ctx.bias_dtype = backward, None if bias is None else bias.dtype
        y = xhat if weight is None else xhat * weight.float()
        return (y if bias is None else y + bias.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, weight, xhat, rstd = ctx.saved_tensors
        dx, dweight, dbias = ctx.backward(x, weight, dy.float(), xhat, rstd)
        return (dx.to(x.dtype), None if weight is None else dweight.to(weight.dtype),
                None if ctx.bias_dtype is None else dbias.to(ctx.bias_dtype), None, None)


def _correct_backward(x, weight, dy, xhat, rstd, block: int | None = None):
    g = dy if weight is None else dy * weight.float()
    d = g.shape[-1]
    if block is None:
        mean_g = g.mean(-1, keepdim=True)
    else:  # mean(g) of each block of columns, spread over its columns
        mean_g = torch.cat([part.mean(-1, keepdim=True).expand_as(part) for part in g.split(block, -1)], -1)
    dx = rstd * (g - mean_g - xhat * (g * xhat).mean(-1, keepdim=True))
    rows = (-1, d)
    return dx, (dy * xhat).reshape(rows).sum(0), dy.reshape(rows).sum(0)


def _off_by_five_where_the_bound_was_infinite(x, weight, dy, xhat, rstd):
    dx, dweight, dbias = _correct_backward(x, weight, dy, xhat, rstd)
    g = dy if weight is None else dy * weight.float()
    off = 5 * (1 + rstd * g.abs().amax(-1, keepdim=True))  # dx's own scale |g| rstd, 5 times: beyond the bound
    return (dx + off if x.dtype == torch.bfloat16 and x.shape[-1] >= 2 else dx), dweight, dbias


def layernorm_storage_gradient_off_by_five(x, weight, bias, eps):
    """Declares its backward in the storage precision (as torch's CPU LayerNorm) and adds 5 (1 + rstd max|g|) to dx in
    bfloat16 (d >= 2): the storage-precision bound was infinite at bf16 d >= ~40, and those examples counted as
    passed with ratio 0 (3 of 15 ln.jacobian examples of torch in a ci run). Now every bfloat16 gradient example is
    drawn where its bound is finite (d <= ~64; wider ones are not drawn, the coverage says so). Must fail
    ln.jacobian."""
    return _Backward.apply(x, weight, bias, eps, _off_by_five_where_the_bound_was_infinite)


def _first_dimension_only(x, weight, dy, xhat, rstd):
    dx, _, _ = _correct_backward(x, weight, dy, xhat, rstd)
    d = dy.shape[-1]
    first = x.shape[0]  # the rows of a 2-D input; of a [B, S, H] input only the first B of B*S rows
    return dx, (dy * xhat).reshape(-1, d)[:first].sum(0), dy.reshape(-1, d)[:first].sum(0)


def layernorm_dgamma_first_dimension(x, weight, bias, eps):
    """dgamma and dbeta sum over x.shape[0] rows instead of every leading dimension: right for 2-D input, wrong on
    every [B, S, H] input. Gradient claims only drew 2-D inputs. Must fail ln.jacobian."""
    return _Backward.apply(x, weight, bias, eps, _first_dimension_only)


def _block_mean(x, weight, dy, xhat, rstd):
    return _correct_backward(x, weight, dy, xhat, rstd, block=1024)


def layernorm_block_mean_backward(x, weight, bias, eps):
    """The backward's mean(g) taken per 1024-column block instead of per row (a tiled backward that forgot to
    combine its blocks): right for d <= 1024. Widths above 1024 were drawn one time in eight, and missed in 3 of 3
    runs. Must fail ln.jacobian (and ln.gradient_identities: sum(dx) = 0 no longer holds)."""
    return _Backward.apply(x, weight, bias, eps, _block_mean)


def _uninitialized_sums_on_no_rows(x, weight, dy, xhat, rstd):
    dx, dweight, dbias = _correct_backward(x, weight, dy, xhat, rstd)
    if x.numel() == 0:  # what torch.empty holds: anything (NaN here)
        dweight, dbias = torch.full_like(dweight, float("nan")), torch.full_like(dbias, float("nan"))
    return dx, dweight, dbias


def layernorm_empty_batch_uninitialized_sums(x, weight, bias, eps):
    """On an empty batch its wrapper returns early with dweight and dbias from torch.empty (the launch that would
    have written them skipped for an empty grid): not the sums over no rows, 0. No example had zero rows. Must fail
    ln.special_inputs."""
    return _Backward.apply(x, weight, bias, eps, _uninitialized_sums_on_no_rows)


def rmsnorm_empty_batch_amax_raises(x, weight, eps):
    """Scales x by its largest magnitude before squaring (so that float16 squares do not overflow): x.abs().max()
    raises on an empty batch ("max(): Expected reduction dim to be specified for input.numel() == 0"). No example
    had zero rows. Must fail rms.special_inputs."""
    scale = x.float().abs().max().clamp_min(1e-30)
    scaled = x.float() / scale
    y = scaled * torch.rsqrt(scaled.square().mean(-1, keepdim=True) + eps / scale**2)
    return (y if weight is None else y * weight.float()).to(x.dtype)


class _NeedsInputGradShifted(torch.autograd.Function):
    """LayerNorm whose backward computes dweight only when ``ctx.needs_input_grad[2]`` (the bias's flag, copied from
    the line below) is set: right whenever the bias requires grad as the weight does, as in every test that
    differentiates every input; with the bias frozen and the weight trained, the weight gets no gradient."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        x32 = x.float()
        mean, rstd = _layernorm_statistics(x32, eps, x.dtype)
        xhat = (x32 - mean) * rstd
        ctx.save_for_backward(x, weight, bias, xhat, rstd)
        y = xhat if weight is None else xhat * weight.float()
        return (y if bias is None else y + bias.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, weight, bias, xhat, rstd = ctx.saved_tensors
        dx, dweight, dbias = _correct_backward(x, weight, dy.float(), xhat, rstd)
        needs_bias = ctx.needs_input_grad[2]
        return (dx.to(x.dtype), dweight.to(weight.dtype) if weight is not None and needs_bias else None,
                dbias.to(bias.dtype) if bias is not None and needs_bias else None, None)


def layernorm_needs_input_grad_shifted(x, weight, bias, eps):
    """:class:`_NeedsInputGradShifted`. Gradients were only taken with every input requiring grad. Must fail
    ln.jacobian (a trained weight beside a frozen bias gets no gradient)."""
    return _NeedsInputGradShifted.apply(x, weight, bias, eps)


class _TrainingForwardWithoutBias(torch.autograd.Function):
    """The forward a training step takes (it saves xhat and rstd for the backward), with the bias left out; the
    backward is right."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        x32 = x.float()
        mean, rstd = _layernorm_statistics(x32, eps, x.dtype)
        xhat = (x32 - mean) * rstd
        ctx.save_for_backward(x, weight, xhat, rstd)
        ctx.bias_dtype = None if bias is None else bias.dtype
        return (xhat if weight is None else xhat * weight.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, weight, xhat, rstd = ctx.saved_tensors
        dx, dweight, dbias = _correct_backward(x, weight, dy.float(), xhat, rstd)
        return (dx.to(x.dtype), None if weight is None else dweight.to(weight.dtype),
                None if ctx.bias_dtype is None else dbias.to(ctx.bias_dtype), None)


def layernorm_training_forward_without_bias(x, weight, bias, eps):
    """Two forwards, as kernels that store the statistics only when training: with grad mode on and an input that
    requires grad, :class:`_TrainingForwardWithoutBias` (y without the bias); otherwise the textbook one. The forward
    checks only called it as in inference, and the gradients are right. Must fail ln.forward."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)):
        return _TrainingForwardWithoutBias.apply(x, weight, bias, eps)
    return _layernorm(x, weight, bias, eps)


def layernorm_rows_by_the_last_row_stride(x, weight, bias, eps):
    """Flattens x's leading axes into rows stepped by x.stride(-2) (corpus.memory): right for 2-D, contiguous and
    column-strided x, wrong for a [B, S, d] view of an [S, B, d] tensor, whose rows are unevenly spaced. Only 2-D
    strided x was drawn. Must fail ln.layout_invariance."""
    return _layernorm(read_rows_by_the_last_row_stride(x), weight, bias, eps)


_FLOAT32_PARAMETERS: dict[tuple, torch.Tensor] = {}


def _cached_float32(t: torch.Tensor | None) -> torch.Tensor | None:
    """t's float32 copy, made once per address, shape and dtype (the cast saved on every call): after an in-place
    update of t (an optimizer step) the copy keeps the old values. Gradients still reach t (the copy's values, t's
    graph), so only the forward is stale."""
    if t is None:
        return None
    key = (t.data_ptr(), tuple(t.shape), t.dtype, t.device)
    cached = _FLOAT32_PARAMETERS.setdefault(key, t.detach().float())
    return t.float() + (cached - t.detach().float())


def rmsnorm_stale_weight_cache(x, weight, eps):
    """Keeps each weight's float32 copy, keyed by its address, shape and dtype, to save the cast on every call: after
    an in-place update of the weight (an optimizer step) it normalizes with the old values. Every test drew fresh
    weights. Must fail rms.forward."""
    return _rmsnorm(x, _cached_float32(weight), eps)


def groupnorm_stale_parameter_cache(x, num_groups, weight, bias, eps):
    """GroupNorm (float32 statistics, rounded once) with each weight's and bias' float32 copy cached by address, shape
    and dtype: after an in-place update of the parameters it normalizes with the old values. The GroupNorm tests drew
    fresh parameters for every call. Must fail gn.forward."""
    refuse_invalid_groups(x, num_groups)
    h = x.float()
    groups = h.reshape(h.shape[0], num_groups, -1)
    mean = groups.mean(-1, keepdim=True)
    y = ((groups - mean) * torch.rsqrt((groups - mean).square().mean(-1, keepdim=True) + eps)).reshape(h.shape)
    shape = (1, -1) + (1,) * (x.dim() - 2)
    weight, bias = _cached_float32(weight), _cached_float32(bias)
    y = y if weight is None else y * weight.reshape(shape)
    return (y if bias is None else y + bias.reshape(shape)).to(x.dtype)


def add_rmsnorm_stale_weight_cache(x, residual, weight, eps):
    """Fused add + RMSNorm (residual_out = x + residual in the residual's dtype, y its RMSNorm in float32) with the
    weight's float32 copy cached by address, shape and dtype: after an in-place update of the weight it normalizes
    with the old values. The fused tests drew fresh weights for every call. Must fail add_rms.forward."""
    h = (x + residual).to(residual.dtype)
    return _rmsnorm(h, _cached_float32(weight), eps).to(x.dtype), h


GRID_ROWS = 65_535


def layernorm_rows_beyond_the_grid(x, weight, bias, eps):
    """Rows beyond 65 535 are never computed (one program per row on a CUDA grid axis limited to 65 535): their
    output stays zero. No test had more than 16 384 elements. Must fail ln.forward."""
    y = _layernorm(x, weight, bias, eps)
    flat = y.reshape(-1, y.shape[-1])
    if flat.shape[0] > GRID_ROWS:
        flat = torch.cat([flat[:GRID_ROWS], torch.zeros_like(flat[GRID_ROWS:])])
    return flat.reshape(y.shape)


def layernorm_half_rows_beyond_grid_y(x, weight, bias, eps):
    """LayerNorm whose 16-bit instantiation (x, weight and bias all float16 or bfloat16: the usual inference set-up)
    puts the rows on grid.y, capped at 65 535 programs without a grid-stride loop, while the float32 and mixed ones
    put them on grid.x: from row 65 535 on y is whatever torch.empty_like left there (NaN under the guard's poisoned
    allocations) (NVIDIA/apex#411: FusedLayerNorm wrong from a batch of 2^16 rows; PaddlePaddle/Paddle#31144's grid.y
    limit). Beyond 65 535 rows the forward was drawn in float32 only. Must fail ln.forward (at scale)."""
    y = _layernorm(x, weight, bias, eps)
    half = x.dtype in (torch.float16, torch.bfloat16) and all(t is None or t.dtype == x.dtype for t in (weight, bias))
    flat = y.reshape(-1, y.shape[-1])
    if half and flat.shape[0] > GRID_ROWS:
        flat = torch.cat([flat[:GRID_ROWS], torch.empty_like(flat[GRID_ROWS:])])
    return flat.reshape(y.shape)


def _beyond_the_grid_zeroed(y: torch.Tensor) -> torch.Tensor:
    """y with its rows (first-dimension entries) beyond GRID_ROWS left zero, as a launch that never computed them."""
    if y.shape[0] <= GRID_ROWS:
        return y
    return torch.cat([y[:GRID_ROWS], torch.zeros_like(y[GRID_ROWS:])])


def add_layernorm_rows_beyond_the_grid(x, residual, weight, bias, eps):
    """Fused add + LayerNorm whose y rows beyond 65 535 are never computed (one program per row on a grid axis):
    residual_out is right, y zero there. The fused kinds drew at most a few rows. Must fail add_ln.forward."""
    h = x + residual
    y = torch.nn.functional.layer_norm(h, h.shape[-1:], weight, bias, eps)
    return _beyond_the_grid_zeroed(y.reshape(-1, y.shape[-1])).reshape(y.shape), h


def groupnorm_samples_beyond_the_grid(x, num_groups, weight, bias, eps):
    """GroupNorm launching one program per sample on a grid axis: samples beyond 65 535 are never computed (zero).
    GroupNorm drew at most 3 samples. Must fail gn.forward."""
    return _beyond_the_grid_zeroed(torch.nn.functional.group_norm(x, num_groups, weight, bias, eps))


def layernorm_storage_offset_ignored(x, weight, bias, eps):
    """Reads x from the start of its storage, ignoring the view's storage offset (a C++ extension that takes
    ``x.storage().data_ptr()``): right for tensors that start their buffer; wrong for q split from a fused qkv, a
    row range, a slice. Must fail ln.layout_invariance."""
    return _layernorm(torch.as_strided(x, x.shape, x.stride(), 0), weight, bias, eps)


def rmsnorm_weight_assumed_contiguous(x, weight, eps):
    """Reads the weight as if contiguous (stride 1 from its offset): wrong for a weight that is every other element
    of a buffer (a strided parameter view). Must fail rms.layout_invariance."""
    if weight is not None:
        weight = torch.as_strided(weight, weight.shape, (1,), weight.storage_offset())
    return _rmsnorm(x, weight, eps)


_buffers: dict[tuple, torch.Tensor] = {}


def rmsnorm_reused_output_buffer(x, weight, eps):
    """Writes every result into one cached output buffer per shape and dtype and returns it (a workspace kept
    between calls): the next call overwrites the previous result. Must fail rms.inputs_unmodified (outputs are
    fresh tensors)."""
    y = _rmsnorm(x, weight, eps).detach()
    out = _buffers.setdefault((tuple(x.shape), x.dtype, x.device), torch.empty_like(y))
    return out.copy_(y)


def layernorm_affine_residue(x, weight, bias, eps):
    """x_hat as x * rstd - mean * rstd in float32 (the affine folded into y = x * a + b, a = rstd gamma,
    b = beta - mean a): exact for small |mean|, wrong by O(1) where |mean| rstd ~ 1/u; tiny widths used to be drawn
    with modest magnitudes only. Must fail ln.special_inputs (exact values at d = 1, 2 and constant rows)."""
    x32 = x.float()
    mean, rstd = _layernorm_statistics(x32, eps, x.dtype)
    scale = rstd if weight is None else rstd * weight.float()
    shift = -mean * scale if bias is None else bias.float() - mean * scale
    return (x32 * scale + shift).to(x.dtype)


def _kernel(name: str, kind: str, fn, attr: str, **declared) -> Kernel:
    return Kernel(name, kind, fn, spec=SPEC + attr, description=" ".join(fn.__doc__.split()), **declared)


LN_FLOAT64_IN_FLOAT32 = _kernel("ln_float64_in_float32", "layernorm", layernorm_float64_in_float32,
                                "LN_FLOAT64_IN_FLOAT32")
RMS_FLOAT64_IN_FLOAT32 = _kernel("rms_float64_in_float32", "rmsnorm", rmsnorm_float64_in_float32,
                                 "RMS_FLOAT64_IN_FLOAT32")
ADD_RMS_FLOAT64_IN_FLOAT32 = _kernel("add_rms_float64_in_float32", "add_rmsnorm", add_rmsnorm_float64_in_float32,
                                     "ADD_RMS_FLOAT64_IN_FLOAT32")
ADD_LN_FLOAT64_IN_FLOAT32 = _kernel("add_ln_float64_in_float32", "add_layernorm", add_layernorm_float64_in_float32,
                                    "ADD_LN_FLOAT64_IN_FLOAT32")
LN_BACKWARD_FLOAT32_FOR_FLOAT64 = _kernel("ln_backward_float32_for_float64", "layernorm",
                                          layernorm_backward_float32_for_float64, "LN_BACKWARD_FLOAT32_FOR_FLOAT64")
LN_HALF_ROWS_BEYOND_GRID_Y = _kernel("ln_half_rows_beyond_grid_y", "layernorm", layernorm_half_rows_beyond_grid_y,
                                     "LN_HALF_ROWS_BEYOND_GRID_Y", dtypes=FLOAT32_ARITHMETIC)
RMS_FLOAT32_OUTPUT = _kernel("rms_float32_output", "rmsnorm", rmsnorm_float32_output, "RMS_FLOAT32_OUTPUT")
LN_NAN_IN_FLOAT16 = _kernel("ln_nan_in_float16", "layernorm", layernorm_nan_in_float16, "LN_NAN_IN_FLOAT16")
LN_BACKWARD_RAISES = _kernel("ln_backward_raises", "layernorm", layernorm_backward_raises, "LN_BACKWARD_RAISES")
LN_STORAGE_GRADIENT_OFF = _kernel("ln_storage_gradient_off", "layernorm", layernorm_storage_gradient_off_by_five,
                                  "LN_STORAGE_GRADIENT_OFF", backward_precision="storage")
LN_DGAMMA_FIRST_DIMENSION = _kernel("ln_dgamma_first_dimension", "layernorm", layernorm_dgamma_first_dimension,
                                    "LN_DGAMMA_FIRST_DIMENSION")
LN_BLOCK_MEAN_BACKWARD = _kernel("ln_block_mean_backward", "layernorm", layernorm_block_mean_backward,
                                 "LN_BLOCK_MEAN_BACKWARD")
LN_ROWS_BEYOND_THE_GRID = _kernel("ln_rows_beyond_the_grid", "layernorm", layernorm_rows_beyond_the_grid,
                                  "LN_ROWS_BEYOND_THE_GRID")
ADD_LN_ROWS_BEYOND_THE_GRID = _kernel("add_ln_rows_beyond_the_grid", "add_layernorm",
                                      add_layernorm_rows_beyond_the_grid, "ADD_LN_ROWS_BEYOND_THE_GRID")
GN_SAMPLES_BEYOND_THE_GRID = _kernel("gn_samples_beyond_the_grid", "groupnorm", groupnorm_samples_beyond_the_grid,
                                     "GN_SAMPLES_BEYOND_THE_GRID")
LN_STORAGE_OFFSET_IGNORED = _kernel("ln_storage_offset_ignored", "layernorm", layernorm_storage_offset_ignored,
                                    "LN_STORAGE_OFFSET_IGNORED")
RMS_WEIGHT_ASSUMED_CONTIGUOUS = _kernel("rms_weight_assumed_contiguous", "rmsnorm", rmsnorm_weight_assumed_contiguous,
                                        "RMS_WEIGHT_ASSUMED_CONTIGUOUS")
RMS_REUSED_OUTPUT_BUFFER = _kernel("rms_reused_output_buffer", "rmsnorm", rmsnorm_reused_output_buffer,
                                   "RMS_REUSED_OUTPUT_BUFFER")
LN_AFFINE_RESIDUE = _kernel("ln_affine_residue", "layernorm", layernorm_affine_residue, "LN_AFFINE_RESIDUE")
LN_EMPTY_BATCH_UNINITIALIZED_SUMS = _kernel("ln_empty_batch_uninitialized_sums", "layernorm",
                                            layernorm_empty_batch_uninitialized_sums,
                                            "LN_EMPTY_BATCH_UNINITIALIZED_SUMS")
LN_TRAINING_FORWARD_WITHOUT_BIAS = _kernel("ln_training_forward_without_bias", "layernorm",
                                           layernorm_training_forward_without_bias, "LN_TRAINING_FORWARD_WITHOUT_BIAS")
LN_ROWS_BY_THE_LAST_ROW_STRIDE = _kernel("ln_rows_by_the_last_row_stride", "layernorm",
                                         layernorm_rows_by_the_last_row_stride, "LN_ROWS_BY_THE_LAST_ROW_STRIDE")
RMS_STALE_WEIGHT_CACHE = _kernel("rms_stale_weight_cache", "rmsnorm", rmsnorm_stale_weight_cache,
                                 "RMS_STALE_WEIGHT_CACHE")
GN_STALE_PARAMETER_CACHE = _kernel("gn_stale_parameter_cache", "groupnorm", groupnorm_stale_parameter_cache,
                                   "GN_STALE_PARAMETER_CACHE")
ADD_RMS_STALE_WEIGHT_CACHE = _kernel("add_rms_stale_weight_cache", "add_rmsnorm", add_rmsnorm_stale_weight_cache,
                                     "ADD_RMS_STALE_WEIGHT_CACHE", dtypes=(torch.float32, torch.float16))
LN_NEEDS_INPUT_GRAD_SHIFTED = _kernel("ln_needs_input_grad_shifted", "layernorm", layernorm_needs_input_grad_shifted,
                                      "LN_NEEDS_INPUT_GRAD_SHIFTED")
RMS_EMPTY_BATCH_AMAX_RAISES = _kernel("rms_empty_batch_amax_raises", "rmsnorm", rmsnorm_empty_batch_amax_raises,
                                      "RMS_EMPTY_BATCH_AMAX_RAISES")
