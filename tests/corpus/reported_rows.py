"""Broken kernels modelled on real bug reports against the row kinds (LayerNorm, RMSNorm, fused add + LayerNorm/RMSNorm,
dropout, fused dropout + add + LayerNorm), a red-team session's (2026-11-27), each escaping the draws of its day or
caught there without an equivalent in this corpus: one torch implementation per kind (statistics in float32, rounded
once, autograd backward; residual_out = x + residual in the residual's dtype; the dropout mask from a generator seeded
with the seed) with exactly one thing broken, on the path the real kernel takes by row count, grad mode, eps or rank;
the manifest (tests/corpus/__init__.py) lists the claims that must catch each. Left out: the same session's bugs the
draws catch only by chance (one-pass variance of add + LayerNorm on a multiple of 32 rows, a CUDA-graph input replayed
without its copy) and those this corpus holds already (tests/corpus/reach.py's LN_STALE_CAST_CACHE_IN_INFERENCE,
parameters.py, fused.py's parameter gradients in 16 bits, residual.py's IN_PLACE_STRIDES_IGNORED, dropout.py's
uniforms in 16 bits and seed truncations).

    LN_EVEN_M_32_ONE_PASS     a row count that is a multiple of 32 (an EVEN_M heuristic's unmasked fast path,
                              M % BLOCK_M == 0): the variance in one pass, E[x^2] - E[x]^2 (flash-attention's Triton
                              EVEN_M path, quoted in MAGICS-LAB/DNABERT_2#89; shape-keyed paths as
                              triton-lang/triton#630)
                                                   -> ln.forward, ln.layout_invariance, ln.gradient_identities
    RMS_EVEN_M_32_EPS         a multiple of 32 rows: eps fixed at 1e-6    -> rms.forward, rms.affine, rms.jacobian
    ADD_RMS_EVEN_M_32_FIXED_EPS  the same, fused add + RMSNorm                              -> add_rms.forward
    RMS_SECOND_BLOCK_STALE_RSTD  33 to 64 rows, 32 a program: rows 32.. scaled by the rstd of rows 0.. (a second
                              block reading the first block's statistics, tenstorrent/tt-metal#14222)
                                                                      -> rms.forward, rms.special_inputs
    ADD_RMS_SECOND_BLOCK_STALE_RSTD  the same, fused add + RMSNorm                           -> add_rms.forward
    LN_NONFINITE_MASKED       a row's statistics over its finite elements only (masked loads with other=0, a
                              NaN-ignoring max): a row holding NaN or inf comes back finite  -> ln.special_inputs
    LN_EPS_ZERO_UNSET         eps = 0 read as unset (``eps or 1e-5``)       -> ln.forward, ln.seed_example
    RMS_EPS_ZERO_UNSET        the same (``eps or 1e-6``)                                     -> rms.forward
    LN_EPS_CACHED_PER_WIDTH   eps baked into a compiled kernel cached by (d, dtype): a later call of that width with
                              another eps runs with the first one (a JIT cache key without a constexpr argument)
                                               -> ln.forward, ln.affine, ln.variance_insensitivity
    RMS_MATMUL_STATISTICS     the mean square as (x * x) @ (1/d): exact in float32, in bfloat16 under torch.autocast
                              (an autocast-listed op; huggingface/transformers#33133's mixed-precision RMSNorm)
                                                                                            -> rms.forward
    RMS_SQUARE_IN_STORAGE     x * x in x's 16-bit dtype, then summed in float32: float16 squares overflow from
                              |x| = 256 (skyzh/tiny-llm#18; T5's float16 overflow)
                                 -> rms.forward, rms.jacobian, rms.gradient_identities, rms.special_inputs,
                                    rms.spectral_norm
    ADD_RMS_STATIC_RESIDUAL_BUFFER  grad mode off: residual_out written into a workspace per shape and dtype and
                              returned, overwritten by the next call (CUDA graphs' static outputs,
                              pytorch/pytorch#104435, #148439; vllm-project/vllm#9724)     -> add_rms.inputs_unmodified
    DROPOUT_REUSED_OUTPUT_BUFFER  the same for dropout's output                         -> dropout.inputs_unmodified
    DROP_ADD_REUSED_BUFFERS   the same for y and residual_out                         -> drop_add_ln.inputs_unmodified
    DROPOUT_IN_PLACE_WITHOUT_GRAD  grad mode off: y written into x and x returned (``F.dropout(x, inplace=True)``, the
                              in-place bias-dropout-add of inference paths)                -> dropout.inputs_unmodified
    DROP_ADD_NO_DROPOUT_WITHOUT_GRAD  grad mode off taken for evaluation: p set to 0 although p is an argument (a
                              functional kernel's training flag from torch.is_grad_enabled())
                                                                                            -> drop_add_ln.values
    DROPOUT_BATCH_SHARED_MASK  x of 3 dimensions or more: the mask of the last two indices only, every batch element
                              the same mask (the batch index left out of the Philox offset,
                              flagos-ai/FlagAttention#23; csarofeen/pytorch#1888)        -> dropout.independence
    DROP_ADD_BATCH_SHARED_MASK  the same, fused dropout + add + LayerNorm               -> drop_add_ln.independence
    RMS_FIRST_65536_COLUMNS   rows wider than 65536: the mean square of the first 65536 columns only (Triton's
                              MAX_FUSED_SIZE cap with its raise removed, xlite-dev/LeetCUDA#390)    -> rms.forward
    ADD_RMS_FIRST_65536_COLUMNS  the same, fused add + RMSNorm                                -> add_rms.forward
    ADD_LN_ROWS_ASSUME_3D, ADD_RMS_ROWS_ASSUME_3D  4-D x [A, B, C, d]: normalized over rows of C d (a launcher that
                              flattens the first two dimensions only, as for [B, S, d])  -> add_ln/add_rms.forward
    ADD_RMS_RANK_1_LAST       1-D x [d] (one token) unsqueezed to [d, 1]: each element normalized alone
                              (flagos-ai/FlagGems#5392)                                        -> add_rms.forward

And of red-team round 7 (rows), on the paths of eps's dtype, autocast, a float32 residual stream and an explicit
backward:

    RMS_EPS_IN_X_DTYPE        eps passed as a tensor of x's dtype (1e-12 is 0 in float16: a zero row is 0/0), the
                              class of reported.py's GN_EPS_IN_X_DTYPE
                                           -> rms.special_inputs
    RMS_BACKWARD_RECOMPUTES_WITH_DEFAULT_EPS  an explicit backward recomputing rstd with its own eps = 1e-6, the
                              forward's never passed (linkedin/Liger-Kernel#201)
                                           -> rms.jacobian, rms.gradient_identities, rms.spectral_norm
    RMS_AUTOCAST_BACKWARD_MATMUL_SUMS  the backward (run under the forward's autocast, as custom_bwd does) takes
                              mean(g x_hat) and dweight as matmuls with a ones vector: bfloat16 inputs in a bfloat16
                              autocast step (pytorch/pytorch#87979)                           -> rms.jacobian
    ADD_RMS_FP32_RESIDUAL_WEIGHT_BOUND_AS_X  beside a float32 residual, a float32 weight rounded to x's 16-bit dtype
                              (a <scalar_t, float> instantiation binding the weight as scalar_t)
                                                                        -> add_rms.forward, add_rms.jacobian
    ADD_RMS_Y_FROM_ROUNDED_SUM  beside a float32 residual, y (returned in float32) the norm of residual_out rounded to
                              x's dtype (vLLM's fused_add_rms_norm holding x + residual in scalar_t); the gradients
                              those of the float32 sum                                       -> add_rms.forward

And of red-team round 8 (rows), on the paths of torch's modes and state and of the parameters' values and identity:

    RMS_DWEIGHT_ATOMIC_UNLESS_DETERMINISTIC  outside torch's deterministic-algorithms mode (torch's default) the
                              backward adds each program's dweight partial (4 rows) into a buffer of the weight's
                              dtype with atomics (linkedin/Liger-Kernel#945; TransformerEngine's
                              NVTE_ALLOW_NONDETERMINISTIC_ALGO; kekzl/imp#1574)                 -> rms.jacobian
    ADD_LN_SPLIT_ROW_ONE_PASS_UNLESS_DETERMINISTIC  outside deterministic mode the split-row kernel: sum(h) and
                              sum(h^2) merged, the variance E[h^2] - E[h]^2 (TransformerEngine's multi-CTA LayerNorm;
                              tenstorrent/tt-metal#30538, pytorch/pytorch#49821)               -> add_ln.jacobian
    RMS_NORM_EVAL_FAST_PATH   an nn.Module (RMSNormEvalFastPath) whose eval-mode path calls torch's rms_norm
                              without eps: eps = finfo(x.dtype).eps (linkedin/Liger-Kernel#201;
                              Oneflow-Inc/oneflow#6836)                                         -> rms.forward
    RMS_AUTOCAST_HARDCODED_BFLOAT16  under any autocast the inputs cast to bfloat16, whatever autocast's dtype
                              (facebookresearch/ijepa#30, datawhalechina/happy-llm#195, pytorch/pytorch#87979)
                                                                                                -> rms.forward
    LN_GRAD_MODE_LEAK         torch.set_grad_enabled(False) ... torch.set_grad_enabled(True) around an amax
                              history: the caller's no_grad lost (pytorch/pytorch#113298, #44531)
                                                                                 -> ln.forward (a fault: state)
    RMS_WEIGHT_PROMOTED_THROUGH_DATA_PARAMS_ONLY  a 16-bit weight that is not a view (a parameter) rebound to
                              float32 through ``weight.data = weight.data.float()`` (huggingface/peft's
                              prepare_model_for_kbit_training; apex/Megatron O2's .data rebinding)
                                                                                            -> rms.inputs_unmodified
    LN_IDENTITY_AFFINE_FAST_PATH  weight all ones and bias all zeros (every nn.LayerNorm at initialisation): normalized
                              without them, no gradient for either (huggingface/candle#2168's class)
                                                                      -> ln.spectral_norm (a fault: no gradient)
    RMS_UNIT_WEIGHT_FAST_PATH the same for an RMSNorm weight of all ones (Llama's torch.ones init)
                                                                         -> rms.jacobian (a fault: no gradient)
    RMS_ACCUMULATOR_IN_DEFAULT_DTYPE  the mean square summed in a buffer of torch's default dtype (bfloat16 under a
                              bfloat16 default dtype: huggingface/transformers#29496)  -> rms.forward, rms.jacobian
    RMS_CAST_CACHE_KEYED_BY_VERSION  the weight's float32 cast cached by address and version: stale after an update
                              through .data (pytorch/pytorch#53343)                        -> rms.forward
    LN_CAST_CACHE_KEYED_BY_STORAGE  the weight's float32 cast cached by storage: two layers' views of one flat
                              parameter buffer share it (local-inference-lab/vllm#228)     -> ln.forward
    ADD_RMS_ONES_CACHED_IN_INFERENCE  the unit weight for weight=None made once, an inference tensor when the first call
                              was under inference_mode (sgl-project/sglang#33470)     -> add_rms.jacobian (an error)

Each kernel is correct in every other respect (the corpus runs a broken kernel on the claims of its entry).
"""

from __future__ import annotations

import torch

from core.adapters.modules import kernel_from_module_class
from core.kernel import Kernel

SPEC = "tests/corpus/reported_rows.py:"
# the dtypes red-team round 7's kernels declare: float32 inside, they would normalize float64 in float32 as well, a bug
# of its own that would catch them on their claims whatever their planted bug
FLOAT32_ARITHMETIC = (torch.float32, torch.float16, torch.bfloat16)
EVEN_M = 32  # BLOCK_M of an EVEN_M heuristic: row counts that are a multiple of it take the unmasked path
EVEN_M_EPS = 1e-6  # the eps that path hard-codes
ROWS_PER_PROGRAM = 32  # a multi-row program's block of rows
WIDEST_BLOCK = 65536  # the widest row a one-block kernel takes (Triton tutorial 05's MAX_FUSED_SIZE)
DEFAULT_EPS = {"layernorm": 1e-5, "rmsnorm": 1e-6}  # the defaults ``eps or default`` falls back to
BACKWARD_DEFAULT_EPS = 1e-6  # the eps a backward kernel's default argument holds
ATOMIC_ROWS = 4  # the rows of one program's dweight partial, added into the dweight buffer with an atomic
_AMAX_HISTORY: list[float] = []  # LN_GRAD_MODE_LEAK's monitoring: the latest calls' amax
_BAKED_EPS: dict[tuple, float] = {}  # LN_EPS_CACHED_PER_WIDTH's compiled kernels: (d, dtype, device) -> eps


# --- helpers shared by the kinds ---------------------------------------------------------------------------------


def _serving() -> bool:
    """Grad mode off (torch.no_grad, torch.inference_mode): the path of a serving stack, no gradient to keep."""
    return not torch.is_grad_enabled()


def _static(buffers: dict, t: torch.Tensor, tag: str) -> torch.Tensor:
    """t copied into a kernel's workspace of ``tag``, one per shape, dtype, device (and inference mode, whose tensors
    are its own), and that workspace returned: the next call of that shape overwrites it."""
    key = (tag, tuple(t.shape), t.dtype, t.device, torch.is_inference_mode_enabled())
    if key not in buffers:
        buffers[key] = torch.empty_like(t, requires_grad=False)
    return buffers[key].copy_(t.detach())


def _even_m(h: torch.Tensor) -> bool:
    """A positive row count that is a multiple of :data:`EVEN_M`."""
    rows = _rows(h)
    return rows > 0 and rows % EVEN_M == 0


def _rows(h: torch.Tensor) -> int:
    return h.numel() // h.shape[-1] if h.dim() and h.shape[-1] else 0


def _default_mode() -> bool:
    """torch's deterministic-algorithms mode off (torch's default): the path of a kernel that switches on it."""
    return not torch.are_deterministic_algorithms_enabled()


def _centred_and_variance(h: torch.Tensor, rms: bool, bug: str) -> tuple[torch.Tensor, torch.Tensor]:
    """h - mean (h for RMSNorm) in float32 and the variance (the mean square), [..., 1], with the bug."""
    values = h.float()
    if bug == "nonfinite_masked":  # the non-finite elements neither counted nor normalized
        finite = torch.isfinite(values)
        count = finite.sum(-1, keepdim=True).clamp_min(1)
        mean = 0.0 if rms else torch.where(finite, values, 0.0).sum(-1, keepdim=True) / count
        centred = torch.where(finite, values - mean, 0.0)
        return centred, centred.square().sum(-1, keepdim=True) / count
    if bug == "first_65536_columns" and h.shape[-1] > WIDEST_BLOCK:  # statistics of the first block only
        block = values[..., :WIDEST_BLOCK]
        mean = 0.0 if rms else block.mean(-1, keepdim=True)
        return values - mean, (block - mean).square().mean(-1, keepdim=True)
    if bug == "default_dtype_accumulator":  # the bug: the mean square summed into a buffer of the default dtype
        accumulator = torch.zeros((*values.shape[:-1], 1), device=values.device)
        accumulator += values.square().sum(-1, keepdim=True)
        return values, accumulator.float() / values.shape[-1]
    mean = 0.0 if rms else values.mean(-1, keepdim=True)
    centred = values - mean
    if (bug == "one_pass" and _even_m(h)) or (bug == "one_pass_unless_deterministic" and _default_mode()):
        return centred, (values.square().mean(-1, keepdim=True) - mean * mean).clamp_min(0.0)
    if bug == "matmul_statistics":
        column = torch.full((h.shape[-1], 1), 1.0 / h.shape[-1], dtype=torch.float32, device=h.device)
        return centred, ((centred * centred) @ column).float()
    squares = (h * h).float() if bug == "square_in_storage" else centred.square()
    return centred, squares.mean(-1, keepdim=True)


def _normalize(h: torch.Tensor, weight, bias, eps: float, *, rms: bool, bug: str = "") -> torch.Tensor:
    """N(h) * weight + bias in float32 (not yet rounded), with the bug."""
    if bug == "eps_zero_unset":
        eps = eps or DEFAULT_EPS["rmsnorm" if rms else "layernorm"]
    if bug == "eps_cached_per_width":
        eps = _BAKED_EPS.setdefault((h.shape[-1], h.dtype, h.device), eps)
    if bug == "fixed_eps" and _even_m(h):
        eps = EVEN_M_EPS
    if bug == "eps_in_x_dtype":  # eps a tensor of x's dtype: 1e-12 is 0 in float16, 1e-6 is 1.013e-6
        eps = float(torch.tensor(eps, dtype=h.dtype))
    centred, variance = _centred_and_variance(h, rms, bug)
    rstd = torch.rsqrt(variance + eps)
    rows = _rows(h)
    if bug == "stale_rstd" and ROWS_PER_PROGRAM < rows <= 2 * ROWS_PER_PROGRAM:
        per_row = rstd.reshape(rows, 1)
        rstd = torch.cat([per_row[:ROWS_PER_PROGRAM], per_row[:rows - ROWS_PER_PROGRAM]]).reshape(rstd.shape)
    y = centred * rstd
    y = y if weight is None else y * weight.float()
    return y if bias is None else y + bias.float()


def _normalized_as_rows(h: torch.Tensor, weight, bias, eps: float, rms: bool, bug: str) -> torch.Tensor:
    """N(h) * weight + bias in float32 over the rows the kernel takes: h's own; with ``rows_assume_3d`` a 4-D h's
    [A B, C d] (a launcher flattening the first two dimensions, as for [B, S, d]; the parameters repeated along);
    with ``rank_1_last`` a 1-D h's [d, 1] (one token unsqueezed at the wrong end: each element normalized alone)."""
    if bug == "rows_assume_3d" and h.dim() >= 4:
        repeats = h[0, 0].numel() // h.shape[-1]
        weight, bias = (None if t is None else t.repeat(repeats) for t in (weight, bias))
        return _normalize(h.reshape(h.shape[0] * h.shape[1], -1), weight, bias, eps, rms=rms).reshape(h.shape)
    if bug == "rank_1_last" and h.dim() == 1:
        y = _normalize(h.unsqueeze(-1), None, None, eps, rms=rms).reshape(h.shape)
        y = y if weight is None else y * weight.float()
        return y if bias is None else y + bias.float()
    return _normalize(h, weight, bias, eps, rms=rms, bug=bug)


class _RmsBackward(torch.autograd.Function):
    """RMSNorm (float32 inside, rounded once) with an explicit backward that recomputes rstd from the saved x, as a
    fused backward kernel does, with the bug; ``autocast``: (enabled, dtype) of the forward's autocast on x's device,
    which the backward runs under (torch.amp.custom_bwd's contract)."""

    @staticmethod
    def forward(ctx, x, weight, eps, bug, autocast):
        ctx.save_for_backward(x, weight)
        ctx.eps, ctx.bug, ctx.autocast = eps, bug, autocast
        return _normalize(x, weight, None, eps, rms=True).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        eps = BACKWARD_DEFAULT_EPS if ctx.bug == "backward_default_eps" else ctx.eps  # the bug: its own eps
        h = x.float()
        rstd = torch.rsqrt(h.square().mean(-1, keepdim=True) + eps)
        xhat, dy32, d = h * rstd, dy.float(), x.shape[-1]
        g = dy32 if weight is None else dy32 * weight.float()
        enabled, dtype = ctx.autocast
        with torch.autocast(x.device.type, dtype=dtype, enabled=enabled and ctx.bug == "autocast_matmul_sums"):
            if ctx.bug == "autocast_matmul_sums":  # the bug: row sums as matmuls, in the autocast dtype
                # the ones in float32 whatever torch's default dtype: the bug is autocast's dtype only
                ones = torch.ones(d, 1, dtype=torch.float32, device=x.device)
                mean_gx = ((g * xhat) @ ones).float() / d
                terms = (dy32 * xhat).reshape(-1, d)
                row_ones = torch.ones(1, terms.shape[0], dtype=torch.float32, device=x.device)
                dweight = (row_ones @ terms).float().reshape(d)
            else:
                mean_gx = (g * xhat).mean(-1, keepdim=True)
                dweight = (dy32 * xhat).reshape(-1, d).sum(0)
        if ctx.bug == "atomic_dweight_unless_deterministic" and weight is not None and _default_mode():
            # the bug: each program's partial of ATOMIC_ROWS rows added with an atomic into a buffer of the weight's
            # dtype (a 16-bit weight: every partial rounded into a 16-bit running sum)
            terms = (dy32 * xhat).reshape(-1, d)
            dweight = torch.zeros(d, dtype=weight.dtype, device=x.device)
            for start in range(0, terms.shape[0], ATOMIC_ROWS):
                dweight += terms[start:start + ATOMIC_ROWS].sum(0).to(weight.dtype)
        dx = rstd * (g - xhat * mean_gx)
        return dx.to(x.dtype), None if weight is None else dweight.to(weight.dtype), None, None, None


def _autocast_state(x: torch.Tensor) -> tuple[bool, torch.dtype]:
    return torch.is_autocast_enabled(x.device.type), torch.get_autocast_dtype(x.device.type)


def _value_of_first_gradient_of_second(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """first's value, second's gradient."""
    return first.detach() + (second - second.detach())


def _residual_out(branch: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    """residual + branch in float32, rounded once to the residual's dtype."""
    return (residual.float() + branch.float()).to(residual.dtype)


def _dropped(x: torch.Tensor, p: float, seed: int, bug: str) -> torch.Tensor:
    """x * m / (1 - p) in float32, m_i ~ Bernoulli(1 - p) from a generator seeded with ``seed``; with
    ``batch_shared`` and 3-D x or more, m drawn over the last two dimensions only and repeated over the batch."""
    if p >= 1.0:
        return x.float() * 0.0
    generator = torch.Generator(device=x.device).manual_seed(seed)
    shape = x.shape[-2:] if bug == "batch_shared" and x.dim() >= 3 else x.shape
    keep = (torch.rand(shape, generator=generator, device=x.device) >= p).expand(x.shape)
    return torch.where(keep, x.float() / (1.0 - p), 0.0)


# --- the kinds ----------------------------------------------------------------------------------------------------


def _function(kind: str, bug: str):
    """The kind's function (core.kinds' signature) with the bug; its static buffers its own."""
    buffers: dict[tuple, torch.Tensor] = {}

    def layernorm(x, weight, bias, eps):
        if bug == "grad_mode_leak":  # the bug: grad mode set on afterwards, not restored to the caller's
            torch.set_grad_enabled(False)
            _AMAX_HISTORY.append(float(x.detach().abs().amax()) if x.numel() else 0.0)
            del _AMAX_HISTORY[:-16]
            torch.set_grad_enabled(True)
        if bug == "cast_cache_by_storage" and weight is not None:  # the bug: the float32 weight keyed by storage
            key = ("weight", weight.untyped_storage().data_ptr(), weight.dtype, tuple(weight.shape))
            weight = buffers.setdefault(key, weight.detach().float())
        if (bug == "identity_affine_dropped" and weight is not None and bias is not None
                and bool((weight == 1).all()) and bool((bias == 0).all())):
            weight = bias = None  # the bug: the identity affine map skipped, and its parameters with it
        return _normalize(x, weight, bias, eps, rms=False, bug=bug).to(x.dtype)

    def rmsnorm(x, weight, eps):
        if bug in ("backward_default_eps", "autocast_matmul_sums", "atomic_dweight_unless_deterministic"):
            return _RmsBackward.apply(x, weight, eps, bug, _autocast_state(x))
        if bug == "autocast_bfloat16" and torch.is_autocast_enabled(x.device.type):
            # the bug: cast_inputs=torch.bfloat16 hard-coded, whatever autocast's dtype
            x, weight = x.to(torch.bfloat16), None if weight is None else weight.to(torch.bfloat16)
        if (bug == "weight_promoted_through_data" and weight is not None and weight._base is None
                and weight.dtype in (torch.float16, torch.bfloat16)):
            weight.data = weight.data.float()  # the bug: the caller's parameter rebound to a float32 copy
        if bug == "cast_cache_by_version" and weight is not None:  # the bug: keyed by address and version only
            key = ("weight", weight.data_ptr(), weight._version, weight.dtype, tuple(weight.shape))
            weight = buffers.setdefault(key, weight.detach().float())
        if bug == "unit_weight_dropped" and weight is not None and bool((weight == 1).all()):
            weight = None  # the bug: a weight of ones skipped, and left out of the graph
        return _normalize(x, weight, None, eps, rms=True, bug=bug).to(x.dtype)

    def add_norm(x, residual, weight, bias, eps, rms):
        h = _residual_out(x, residual)
        if bug == "ones_cached" and weight is None:  # the bug: the unit weight cached, remade by a warm-up call
            key = ("ones", h.shape[-1], h.dtype, h.device)  # under inference_mode: an inference tensor from then on
            if key not in buffers or torch.is_inference_mode_enabled():
                buffers[key] = torch.ones(h.shape[-1], dtype=h.dtype, device=h.device)
            weight = buffers[key]
        if bug in ("weight_bound_as_x", "y_from_rounded_sum") and residual.dtype != x.dtype:
            # the float32-residual instantiation <scalar_t, float>: y returned in residual_out's dtype, float32
            if bug == "weight_bound_as_x" and weight is not None and weight.dtype != x.dtype:
                weight = weight.to(x.dtype)  # the bug: the weight bound as scalar_t, rounded to x's dtype
            y = _normalized_as_rows(h, weight, bias, eps, rms, bug)
            if bug == "y_from_rounded_sum":  # the bug: y of fl_x(h); the backward's gradients those of h
                y = _value_of_first_gradient_of_second(
                    _normalized_as_rows(h.to(x.dtype), weight, bias, eps, rms, bug), y)
            return y.to(h.dtype), h
        y = _normalized_as_rows(h, weight, bias, eps, rms, bug).to(x.dtype)
        return y, (_static(buffers, h, "residual_out") if bug == "static_buffers" and _serving() else h)

    def add_layernorm(x, residual, weight, bias, eps):
        return add_norm(x, residual, weight, bias, eps, rms=False)

    def add_rmsnorm(x, residual, weight, eps):
        return add_norm(x, residual, weight, None, eps, rms=True)

    def dropout(x, p, seed):
        y = _dropped(x, p, seed, bug).to(x.dtype)
        if bug == "in_place" and _serving():
            return x.copy_(y)
        return _static(buffers, y, "y") if bug == "static_buffers" and _serving() else y

    def dropout_add_layernorm(x, residual, weight, bias, eps, p, seed):
        if bug == "no_dropout_without_grad" and _serving():
            p = 0.0
        h = _residual_out(_dropped(x, p, seed, bug), residual)
        y = _normalize(h, weight, bias, eps, rms=False).to(x.dtype)
        if bug == "static_buffers" and _serving():
            return _static(buffers, y, "y"), _static(buffers, h, "residual_out")
        return y, h

    return locals()[kind]


def _kernel(name: str, kind: str, bug: str, description: str, **declared) -> Kernel:
    return Kernel(name.lower(), kind, _function(kind, bug), spec=f"{SPEC}{name}", description=description, **declared)


LN_EVEN_M_32_ONE_PASS = _kernel(
    "LN_EVEN_M_32_ONE_PASS", "layernorm", "one_pass",
    "a multiple of 32 rows (an EVEN_M fast path, MAGICS-LAB/DNABERT_2#89): the variance in one pass: "
    "ln.forward, ln.layout_invariance, ln.gradient_identities")
RMS_EVEN_M_32_EPS = _kernel(
    "RMS_EVEN_M_32_EPS", "rmsnorm", "fixed_eps",
    "a multiple of 32 rows (an EVEN_M fast path): eps fixed at 1e-6: rms.forward, rms.affine, rms.jacobian")
ADD_RMS_EVEN_M_32_FIXED_EPS = _kernel(
    "ADD_RMS_EVEN_M_32_FIXED_EPS", "add_rmsnorm", "fixed_eps",
    "a multiple of 32 rows (an EVEN_M fast path): eps fixed at 1e-6: add_rms.forward")
RMS_SECOND_BLOCK_STALE_RSTD = _kernel(
    "RMS_SECOND_BLOCK_STALE_RSTD", "rmsnorm", "stale_rstd",
    "33 to 64 rows, 32 a program: rows 32.. scaled by the rstd of rows 0.. (tenstorrent/tt-metal#14222): "
    "rms.forward, rms.special_inputs")
ADD_RMS_SECOND_BLOCK_STALE_RSTD = _kernel(
    "ADD_RMS_SECOND_BLOCK_STALE_RSTD", "add_rmsnorm", "stale_rstd",
    "33 to 64 rows, 32 a program: rows 32.. scaled by the rstd of rows 0..: add_rms.forward")
LN_NONFINITE_MASKED = _kernel(
    "LN_NONFINITE_MASKED", "layernorm", "nonfinite_masked",
    "statistics over a row's finite elements only: a row holding NaN or inf comes back finite: ln.special_inputs")
LN_EPS_ZERO_UNSET = _kernel(
    "LN_EPS_ZERO_UNSET", "layernorm", "eps_zero_unset", "eps = 0 read as unset (eps or 1e-5): ln.forward, "
    "ln.seed_example")
RMS_EPS_ZERO_UNSET = _kernel(
    "RMS_EPS_ZERO_UNSET", "rmsnorm", "eps_zero_unset", "eps = 0 read as unset (eps or 1e-6): rms.forward")
LN_EPS_CACHED_PER_WIDTH = _kernel(
    "LN_EPS_CACHED_PER_WIDTH", "layernorm", "eps_cached_per_width",
    "eps baked into a kernel compiled once per width and dtype: a later eps of that width ignored: "
    "ln.forward, ln.affine, ln.variance_insensitivity")
RMS_MATMUL_STATISTICS = _kernel(
    "RMS_MATMUL_STATISTICS", "rmsnorm", "matmul_statistics",
    "the mean square as a matmul with 1/d, bfloat16 under torch.autocast (huggingface/transformers#33133): "
    "rms.forward")
RMS_SQUARE_IN_STORAGE = _kernel(
    "RMS_SQUARE_IN_STORAGE", "rmsnorm", "square_in_storage",
    "x * x in x's 16-bit dtype, then summed in float32 (float16 overflow, skyzh/tiny-llm#18): "
    "rms.forward, rms.jacobian, rms.gradient_identities, rms.special_inputs, rms.spectral_norm")
ADD_RMS_STATIC_RESIDUAL_BUFFER = _kernel(
    "ADD_RMS_STATIC_RESIDUAL_BUFFER", "add_rmsnorm", "static_buffers",
    "grad mode off: residual_out returned in a workspace the next call overwrites (pytorch/pytorch#104435): "
    "add_rms.inputs_unmodified")
DROPOUT_REUSED_OUTPUT_BUFFER = _kernel(
    "DROPOUT_REUSED_OUTPUT_BUFFER", "dropout", "static_buffers",
    "grad mode off: the output returned in a workspace the next call overwrites: dropout.inputs_unmodified")
DROP_ADD_REUSED_BUFFERS = _kernel(
    "DROP_ADD_REUSED_BUFFERS", "dropout_add_layernorm", "static_buffers",
    "grad mode off: y and residual_out returned in workspaces the next call overwrites: drop_add_ln.inputs_unmodified")
DROPOUT_IN_PLACE_WITHOUT_GRAD = _kernel(
    "DROPOUT_IN_PLACE_WITHOUT_GRAD", "dropout", "in_place",
    "grad mode off: y written into x and x returned (F.dropout(x, inplace=True)): dropout.inputs_unmodified")
DROP_ADD_NO_DROPOUT_WITHOUT_GRAD = _kernel(
    "DROP_ADD_NO_DROPOUT_WITHOUT_GRAD", "dropout_add_layernorm", "no_dropout_without_grad",
    "grad mode off taken for evaluation: nothing dropped whatever p: drop_add_ln.values")
DROPOUT_BATCH_SHARED_MASK = _kernel(
    "DROPOUT_BATCH_SHARED_MASK", "dropout", "batch_shared",
    "3-D x or more: one mask of the last two dimensions for every batch element (flagos-ai/FlagAttention#23): "
    "dropout.independence")
DROP_ADD_BATCH_SHARED_MASK = _kernel(
    "DROP_ADD_BATCH_SHARED_MASK", "dropout_add_layernorm", "batch_shared",
    "3-D x or more: one mask of the last two dimensions for every batch element: drop_add_ln.independence")
RMS_FIRST_65536_COLUMNS = _kernel(
    "RMS_FIRST_65536_COLUMNS", "rmsnorm", "first_65536_columns",
    "rows wider than 65536: the mean square of the first 65536 columns only (Triton's MAX_FUSED_SIZE without its "
    "raise, xlite-dev/LeetCUDA#390): rms.forward")
ADD_RMS_FIRST_65536_COLUMNS = _kernel(
    "ADD_RMS_FIRST_65536_COLUMNS", "add_rmsnorm", "first_65536_columns",
    "rows wider than 65536: the mean square of the first 65536 columns of residual_out only: add_rms.forward")
ADD_LN_ROWS_ASSUME_3D = _kernel(
    "ADD_LN_ROWS_ASSUME_3D", "add_layernorm", "rows_assume_3d",
    "4-D x [A, B, C, d]: rows of C d (a launcher flattening the first two dimensions only): add_ln.forward")
ADD_RMS_ROWS_ASSUME_3D = _kernel(
    "ADD_RMS_ROWS_ASSUME_3D", "add_rmsnorm", "rows_assume_3d",
    "4-D x [A, B, C, d]: rows of C d (a launcher flattening the first two dimensions only): add_rms.forward")
ADD_RMS_RANK_1_LAST = _kernel(
    "ADD_RMS_RANK_1_LAST", "add_rmsnorm", "rank_1_last",
    "1-D x [d] (one token) unsqueezed to [d, 1]: each element normalized alone (flagos-ai/FlagGems#5392): "
    "add_rms.forward")
RMS_EPS_IN_X_DTYPE = _kernel(
    "RMS_EPS_IN_X_DTYPE", "rmsnorm", "eps_in_x_dtype",
    "eps passed to the kernel as a tensor of x's dtype (torch.tensor(eps, dtype=x.dtype), a scalar argument typed "
    "like the activations; reported.py's GN_EPS_IN_X_DTYPE for RMSNorm): in float16 eps = 1e-12 is 0 (a zero row "
    "is 0/0 = NaN) and 1e-6 is 1.013e-6: rms.special_inputs",
    dtypes=FLOAT32_ARITHMETIC)
RMS_BACKWARD_RECOMPUTES_WITH_DEFAULT_EPS = _kernel(
    "RMS_BACKWARD_RECOMPUTES_WITH_DEFAULT_EPS", "rmsnorm", "backward_default_eps",
    "an explicit backward recomputing rstd from the saved x with its own eps = 1e-6, the forward's eps never passed "
    "to it (linkedin/Liger-Kernel#201: eps passed to, then dropped from, the RMSNorm backward kernel): rms.jacobian, "
    "rms.gradient_identities, rms.spectral_norm", dtypes=FLOAT32_ARITHMETIC)
RMS_AUTOCAST_BACKWARD_MATMUL_SUMS = _kernel(
    "RMS_AUTOCAST_BACKWARD_MATMUL_SUMS", "rmsnorm", "autocast_matmul_sums",
    "an explicit backward run under the forward's autocast (torch.amp.custom_bwd, as the AMP docs recommend) taking "
    "the row sums mean(g x_hat) and dweight as matmuls with a ones vector: in a bfloat16 autocast step the float32 "
    "gradients come from bfloat16-rounded inputs (pytorch/pytorch#87979, #105682); outside autocast correct: "
    "rms.jacobian", dtypes=FLOAT32_ARITHMETIC)
ADD_RMS_FP32_RESIDUAL_WEIGHT_BOUND_AS_X = _kernel(
    "ADD_RMS_FP32_RESIDUAL_WEIGHT_BOUND_AS_X", "add_rmsnorm", "weight_bound_as_x",
    "beside a float32 residual stream, the <scalar_t, float> instantiation binds the weight as scalar_t: a float32 "
    "weight rounded to x's 16-bit dtype (Megatron/TransformerEngine training's bf16 activations, fp32 residual and "
    "fp32 weights; the class of parameters.py's ADD_LN_WEIGHT_ROUNDED_TO_X): add_rms.forward, add_rms.jacobian",
    dtypes=FLOAT32_ARITHMETIC)
ADD_RMS_Y_FROM_ROUNDED_SUM = _kernel(
    "ADD_RMS_Y_FROM_ROUNDED_SUM", "add_rmsnorm", "y_from_rounded_sum",
    "beside a float32 residual stream, y (returned in float32) normalizes residual_out rounded to x's 16-bit dtype "
    "(vLLM's fused_add_rms_norm holding z = x + residual in scalar_t; cf. vllm-project/vllm-ascend#15995), the "
    "backward that of the float32 sum (right): add_rms.forward", dtypes=FLOAT32_ARITHMETIC)

# red-team round 8 (rows): torch's modes and state, a module's eval mode, the parameters' values and identity
RMS_DWEIGHT_ATOMIC_UNLESS_DETERMINISTIC = _kernel(
    "RMS_DWEIGHT_ATOMIC_UNLESS_DETERMINISTIC", "rmsnorm", "atomic_dweight_unless_deterministic",
    "outside torch's deterministic-algorithms mode (torch's default) the backward accumulates dweight with atomics of "
    "per-program partials (4 rows) into a buffer of the weight's dtype (a 16-bit weight: every partial rounded into a "
    "16-bit running sum); under torch.use_deterministic_algorithms(True) a two-stage float32 reduction "
    "(linkedin/Liger-Kernel#945: LayerNorm's dW/dB by tl.atomic_add across programs; TransformerEngine's "
    "NVTE_ALLOW_NONDETERMINISTIC_ALGO switching its norm backward kernels; kekzl/imp#1574: a deterministic flag "
    "reaching some kernel paths only): rms.jacobian", dtypes=FLOAT32_ARITHMETIC)
ADD_LN_SPLIT_ROW_ONE_PASS_UNLESS_DETERMINISTIC = _kernel(
    "ADD_LN_SPLIT_ROW_ONE_PASS_UNLESS_DETERMINISTIC", "add_layernorm", "one_pass_unless_deterministic",
    "outside torch's deterministic-algorithms mode (torch's default) the split-row kernel: programs accumulate sum(h) "
    "and sum(h^2) with atomics and the variance is E[h^2] - E[h]^2, which cancels where |mean| >> std; in "
    "deterministic mode the two-pass kernel of one program a row (TransformerEngine's multi-CTA LayerNorm by "
    "NVTE_ALLOW_NONDETERMINISTIC_ALGO; tenstorrent/tt-metal#30538, pytorch/pytorch#49821: one-pass variance of merged "
    "partial sums; kekzl/imp#1574): add_ln.jacobian", dtypes=FLOAT32_ARITHMETIC)


class RMSNormEvalFastPath(torch.nn.Module):
    """RMSNorm module whose eval-mode path calls torch's fused rms_norm without eps (``F.rms_norm(x, (d,), weight)``,
    eps=None: torch takes torch.finfo(x.dtype).eps, 9.8e-4 in float16, 7.8e-3 in bfloat16, 1.2e-7 in float32, instead
    of the configured one); training mode is right (linkedin/Liger-Kernel#201: eps dropped on one of two paths;
    Oneflow-Inc/oneflow#6836: the fused norm in training only, the eval path assembled separately). Statistics in
    float32 (float64 for float64 x), rounded once to x's dtype. Must fail rms.forward (the draws of grad mode off,
    where a module runs in eval mode)."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        eps = self.eps if self.training else torch.finfo(x.dtype).eps  # the bug: F.rms_norm's eps=None in eval mode
        h = x.to(torch.promote_types(x.dtype, torch.float32))
        y = h * torch.rsqrt(h.square().mean(-1, keepdim=True) + eps) * self.weight.to(h.dtype)
        return y.to(x.dtype)


# the class as the suite runs a module class given as SPEC PATH.py:Class (core.adapters.modules), under a name and
# spec of the corpus, with the class's docstring as its description
RMS_NORM_EVAL_FAST_PATH = kernel_from_module_class(
    RMSNormEvalFastPath, f"{SPEC}RMS_NORM_EVAL_FAST_PATH", "rmsnorm", name="rms_norm_eval_fast_path",
    description=" ".join(RMSNormEvalFastPath.__doc__.split()))
RMS_AUTOCAST_HARDCODED_BFLOAT16 = _kernel(
    "RMS_AUTOCAST_HARDCODED_BFLOAT16", "rmsnorm", "autocast_bfloat16",
    "under autocast its inputs cast to bfloat16 whatever autocast's dtype (custom_fwd(cast_inputs=torch.bfloat16) "
    "hard-coded): under torch.autocast(dtype=torch.float16) (fp16 AMP on GPUs without bfloat16) y is bfloat16, "
    "normalized in bfloat16 (facebookresearch/ijepa#30: bfloat16 used although use_bfloat was False; "
    "datawhalechina/happy-llm#195: the autocast dtype forced whatever the configured one; pytorch/pytorch#87979, "
    "#88029: custom_bwd forcing float16 whatever the forward's autocast dtype): rms.forward", dtypes=FLOAT32_ARITHMETIC)
LN_GRAD_MODE_LEAK = _kernel(
    "LN_GRAD_MODE_LEAK", "layernorm", "grad_mode_leak",
    "updates an amax history (FP8-style monitoring) under torch.set_grad_enabled(False), then calls "
    "torch.set_grad_enabled(True) instead of restoring the caller's mode: after a call under torch.no_grad() grad "
    "mode is on for the rest of the caller's block, graphs recorded and activations kept (pytorch/pytorch#113298: "
    "set_grad_enabled mutating the grad mode; #44531: enable_grad not restoring the previous mode): ln.forward (a "
    "fault of the call: torch's state left changed)", dtypes=FLOAT32_ARITHMETIC)
RMS_WEIGHT_PROMOTED_THROUGH_DATA_PARAMS_ONLY = _kernel(
    "RMS_WEIGHT_PROMOTED_THROUGH_DATA_PARAMS_ONLY", "rmsnorm", "weight_promoted_through_data",
    "keeps a 16-bit weight in float32 by rebinding the caller's parameter, weight.data = weight.data.float(), for a "
    "weight that is not a view (a parameter): the values unchanged (torch.equal says so), the caller's parameter now "
    "float32, its optimizer state and .grad with it (huggingface/peft's prepare_model_for_kbit_training casting norm "
    "weights to float32 in place; param.data = param.data.to(dtype) in apex/Megatron O2): rms.inputs_unmodified",
    dtypes=FLOAT32_ARITHMETIC)
LN_IDENTITY_AFFINE_FAST_PATH = _kernel(
    "LN_IDENTITY_AFFINE_FAST_PATH", "layernorm", "identity_affine_dropped",
    "skips the affine map when it is the identity (weight all ones and bias all zeros: every nn.LayerNorm at "
    "initialisation) by normalizing without the parameters: y right, but weight and bias left out of the graph, no "
    "gradient at step 0, never updated (the gradient-blocking fast path of huggingface/candle#2168's class; graph "
    "simplification of trivial norm weights): ln.spectral_norm (an error: no gradient for the weight; ln.jacobian's "
    "draws give the identity affine map one example in 48)", dtypes=FLOAT32_ARITHMETIC)
RMS_UNIT_WEIGHT_FAST_PATH = _kernel(
    "RMS_UNIT_WEIGHT_FAST_PATH", "rmsnorm", "unit_weight_dropped",
    "drops a weight of all ones (every RMSNorm at initialisation: Llama's torch.ones) and normalizes without it: y "
    "right, the weight left out of the graph, no gradient at step 0, never updated (LN_IDENTITY_AFFINE_FAST_PATH's "
    "RMSNorm twin, huggingface/candle#2168's class): rms.jacobian (an error: no gradient for the weight)",
    dtypes=FLOAT32_ARITHMETIC)
RMS_ACCUMULATOR_IN_DEFAULT_DTYPE = _kernel(
    "RMS_ACCUMULATOR_IN_DEFAULT_DTYPE", "rmsnorm", "default_dtype_accumulator",
    "sums the mean square into torch.zeros(...) of torch's default dtype, not float32: under a bfloat16 default dtype "
    "(a training script's torch.set_default_dtype) the statistics are summed in bfloat16 (huggingface/transformers"
    "#29496, tinygrad/tinygrad#17698's class): rms.forward, rms.jacobian", dtypes=FLOAT32_ARITHMETIC)
RMS_CAST_CACHE_KEYED_BY_VERSION = _kernel(
    "RMS_CAST_CACHE_KEYED_BY_VERSION", "rmsnorm", "cast_cache_by_version",
    "caches the float32 cast of its weight keyed by the weight's address and version counter: an update written "
    "through .data (EMA, FSDP, DeepSpeed) leaves the version as it was, and the stale cast is used "
    "(pytorch/pytorch#53343, flashinfer-ai/flashinfer#3932): rms.forward", dtypes=FLOAT32_ARITHMETIC)
LN_CAST_CACHE_KEYED_BY_STORAGE = _kernel(
    "LN_CAST_CACHE_KEYED_BY_STORAGE", "layernorm", "cast_cache_by_storage",
    "caches the float32 cast of its weight keyed by the weight's storage: two layers whose parameters are views of "
    "one flat buffer (Megatron's, an FSDP shard) share it, and the second layer gets the first's weight "
    "(local-inference-lab/vllm#228, ray-project/ray#60689): ln.forward", dtypes=FLOAT32_ARITHMETIC)
ADD_RMS_ONES_CACHED_IN_INFERENCE = _kernel(
    "ADD_RMS_ONES_CACHED_IN_INFERENCE", "add_rmsnorm", "ones_cached",
    "makes the unit weight for weight=None once and caches it: made under torch.inference_mode() (a warm-up, an "
    "evaluation), it is an inference tensor that a later training call cannot save for its backward "
    "(sgl-project/sglang#33470, facebookresearch/dinov2#472): add_rms.jacobian (an error)", dtypes=FLOAT32_ARITHMETIC)
