"""Broken fused LayerNorm/RMSNorm kernels: one ``torch.autograd.Function`` written the way a fused Triton or
CUDA kernel is (the forward saves xhat and rstd, the backward applies the derived VJP), with exactly one
stage replaced by a bug.

The math (x one row of width d, g = dy * gamma, rstd = 1/sqrt(sigma^2 + eps), xhat = (x - mean) * rstd;
RMSNorm: mean = 0 and sigma^2 = mean(x^2)):

    y      = xhat * gamma + beta
    dx     = rstd * (g - mean(g) - xhat * mean(g * xhat))      RMSNorm: rstd * (g - xhat * mean(g * xhat))
    dgamma = sum over rows of dy * xhat,    dbeta = sum over rows of dy

``LN_FUSED`` and ``RMS_FUSED`` use only the correct stages (:data:`CORRECT`) and are the controls. Each bug
stage's docstring says the bug and the claim ids that must catch it (the manifest lists the same ids).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from core.registry import Kernel
from corpus.memory import read_as_if_contiguous
from corpus.statistics import FLOAT32_ARITHMETIC

SPEC = "tests/corpus/fused.py:"


# --- correct stages ---------------------------------------------------------------------------------------------


def _as_given(t: torch.Tensor) -> torch.Tensor:
    """Reads the tensor through its strides."""
    return t


def _leave_input(x: torch.Tensor, xhat: torch.Tensor) -> None:
    """Leaves the input's buffer alone."""


def _effective_weight(weight: torch.Tensor, offset: float) -> torch.Tensor:
    """gamma = offset + weight in float32 (offset 0, or Gemma's 1 with ``weight_offset=1.0`` declared), as the
    forward scales by."""
    return weight.float() + offset


def _scale_upstream(dy: torch.Tensor, gamma: torch.Tensor | None) -> torch.Tensor:
    """g = dy * gamma, in float32, in a new tensor."""
    g = dy.float()
    return g if gamma is None else g * gamma


def _saved_normalized(xhat: torch.Tensor, y: torch.Tensor, gamma: torch.Tensor | None,
                      bias: torch.Tensor | None) -> torch.Tensor:
    """Uses the xhat saved by the forward."""
    return xhat


def _input_grad(g: torch.Tensor, xhat: torch.Tensor, rstd: torch.Tensor, centred: bool) -> torch.Tensor:
    """dx = rstd (g - mean(g) - xhat mean(g xhat)); RMSNorm (not centred) has no mean(g) term."""
    variance_term = xhat * (g * xhat).mean(-1, keepdim=True)
    mean_term = g.mean(-1, keepdim=True) if centred else 0.0
    return rstd * (g - mean_term - variance_term)


def _fresh_dx(dx: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx in a tensor of its own."""
    return dx


def _weight_grad(dy: torch.Tensor, xhat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """dgamma per element: dy * xhat (summed over rows by the caller)."""
    return dy * xhat


def _sum_rows(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """dgamma / dbeta: the per-row terms summed over the rows in float32, stored in the parameter's dtype."""
    return t.reshape(-1, t.shape[-1]).sum(0).to(dtype)


class Stages(NamedTuple):
    """The replaceable stages of the fused kernel; the defaults are the correct ones."""

    read_input: Callable[[torch.Tensor], torch.Tensor] = _as_given
    after_forward: Callable[[torch.Tensor, torch.Tensor], None] = _leave_input
    read_upstream: Callable[[torch.Tensor], torch.Tensor] = _as_given
    effective_weight: Callable[[torch.Tensor, float], torch.Tensor] = _effective_weight
    scale_upstream: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor] = _scale_upstream
    normalized_for_backward: Callable[..., torch.Tensor] = _saved_normalized
    input_grad: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool], torch.Tensor] = _input_grad
    store_dx: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = _fresh_dx
    weight_grad: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] = _weight_grad
    sum_rows: Callable[[torch.Tensor, torch.dtype], torch.Tensor] = _sum_rows


CORRECT = Stages()


def _differentiable_statistics(x: torch.Tensor, centred: bool, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(xhat, rstd) recomputed from x with grad mode on, as the forward computes them: the backward's graph then
    differentiates them too (saved from the forward they are constants, and the gradient of the gradient misses their
    terms: ln.second_order's LN_STATISTICS_HELD_CONSTANT)."""
    xf = x.float()
    mean = xf.mean(-1, keepdim=True) if centred else torch.zeros_like(xf[..., :1])
    rstd = torch.rsqrt((xf - mean).square().mean(-1, keepdim=True) + eps)
    return (xf - mean) * rstd, rstd


class _FusedNorm(torch.autograd.Function):
    """LayerNorm (centred) or RMSNorm over the last dimension, float32 inside, built from ``stages``."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
                centred: bool, stages: Stages, offset: float = 0.0) -> torch.Tensor:
        xf = stages.read_input(x).float()
        mean = xf.mean(-1, keepdim=True) if centred else torch.zeros_like(xf[..., :1])
        rstd = torch.rsqrt((xf - mean).square().mean(-1, keepdim=True) + eps)
        xhat = (xf - mean) * rstd
        y = xhat if weight is None else xhat * _effective_weight(weight, offset)
        y = (y if bias is None else y + bias.float()).to(x.dtype)
        stages.after_forward(x, xhat)
        ctx.save_for_backward(x, xhat, rstd, y, weight, bias)
        ctx.centred, ctx.stages, ctx.input_dtype, ctx.eps, ctx.offset = centred, stages, x.dtype, eps, offset
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        x, xhat, rstd, y, weight, bias = ctx.saved_tensors
        stages: Stages = ctx.stages
        if torch.is_grad_enabled():  # a graph of the backward (create_graph=True): its statistics as functions of x
            xhat, rstd = _differentiable_statistics(x, ctx.centred, ctx.eps)
        dy = stages.read_upstream(dy)
        gamma = None if weight is None else stages.effective_weight(weight, ctx.offset)
        xhat = stages.normalized_for_backward(xhat, y, gamma, bias)
        g = stages.scale_upstream(dy, gamma)
        dx = stages.input_grad(g, xhat, rstd, ctx.centred).to(ctx.input_dtype)
        dweight = None if weight is None else stages.sum_rows(stages.weight_grad(dy.float(), xhat, y), weight.dtype)
        dbias = None if bias is None else stages.sum_rows(dy.float(), bias.dtype)
        return stages.store_dx(dx, dy), dweight, dbias, None, None, None, None


# --- bug stages -------------------------------------------------------------------------------------------------


def _as_if_contiguous(t: torch.Tensor) -> torch.Tensor:
    """Strides ignored: reads the tensor's storage as if it were contiguous (a kernel indexing
    ``ptr + row * d + col``, corpus.memory); right only for contiguous tensors. Must fail ln.layout_invariance /
    rms.layout_invariance."""
    return read_as_if_contiguous(t)


def _input_reused_as_scratch(x: torch.Tensor, xhat: torch.Tensor) -> None:
    """The input's buffer is reused to hold xhat (to save memory): the caller's x is overwritten.
    Must fail ln.inputs_unmodified / rms.inputs_unmodified."""
    x.copy_(xhat)


def _upstream_scaled_in_place(dy: torch.Tensor, gamma: torch.Tensor | None) -> torch.Tensor:
    """g = dy * gamma computed in place: ``dy.float()`` is dy itself for float32, so the caller's upstream
    gradient is overwritten. Must fail ln.inputs_unmodified."""
    g = dy.float()
    if gamma is not None:
        g *= gamma
    return g


def _offset_left_out(weight: torch.Tensor, offset: float) -> torch.Tensor:
    """The backward scales by w where the forward scaled by 1 + w (Gemma's zero-centred gamma, declared
    weight_offset=1.0): g = dy w instead of dy (1 + w); dweight is right (d(1 + w)/dw = 1). Must fail rms.jacobian,
    rms.gradient_identities and rms.spectral_norm (NVIDIA/TransformerEngine#67: the backward kernels never got
    zero_centered_gamma)."""
    return weight.float()


def _upstream_without_gamma(dy: torch.Tensor, gamma: torch.Tensor | None) -> torch.Tensor:
    """Backward misses gamma: g = dy instead of dy * gamma (right only for gamma = 1). Must fail ln.jacobian
    and ln.spectral_norm (per-feature gamma)."""
    return dy.float()


def _normalized_from_output(xhat: torch.Tensor, y: torch.Tensor, gamma: torch.Tensor | None,
                            bias: torch.Tensor | None) -> torch.Tensor:
    """xhat rebuilt in the backward as (y - beta) / gamma instead of saved: inf/NaN where gamma = 0, and
    cancellation where |beta| >> |gamma xhat|. Must fail ln.jacobian (weights with zeros)."""
    shifted = y.float() if bias is None else y.float() - bias.float()
    return shifted if gamma is None else shifted / gamma


def _input_grad_without_mean_term(g: torch.Tensor, xhat: torch.Tensor, rstd: torch.Tensor,
                                  centred: bool) -> torch.Tensor:
    """Backward misses the mean term: dx = rstd (g - xhat mean(g xhat)), without -mean(g); the row sum of dx
    is no longer 0. Must fail ln.jacobian and ln.gradient_identities."""
    return rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))


def _input_grad_without_variance_term(g: torch.Tensor, xhat: torch.Tensor, rstd: torch.Tensor,
                                      centred: bool) -> torch.Tensor:
    """Backward misses the variance term (the derivative of rstd): dx = rstd (g - mean(g)), RMSNorm
    dx = rstd g. Must fail ln.jacobian, ln.gradient_identities / rms.jacobian, rms.gradient_identities."""
    return rstd * (g - g.mean(-1, keepdim=True)) if centred else rstd * g


def _input_grad_zero_on_padding_rows(g: torch.Tensor, xhat: torch.Tensor, rstd: torch.Tensor,
                                     centred: bool) -> torch.Tensor:
    """Rows whose x_hat is all zeros taken for padding tokens: their dx set to 0, where RMSNorm's is rstd g with rstd
    = 1/sqrt(eps) (a row of zeros among ordinary ones). Must fail rms.jacobian."""
    return torch.where((xhat == 0).all(-1, keepdim=True), 0.0, _input_grad(g, xhat, rstd, centred))


def _dx_into_upstream(dx: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx written into dy's buffer and returned (declared ``in_place=("dy",)``, Liger's in_place=True); where dy's
    rows share memory (a stride of 0: the upstream gradient of y.sum()) every row's dx lands in the one row of memory,
    the last written wins (Liger-Kernel#370/#376, #1305). Must fail rms.layout_invariance."""
    if dy.dtype != dx.dtype:
        return dx
    try:
        return dy.copy_(dx)
    except RuntimeError:  # torch refuses a copy into overlapping memory; a kernel's stores do not
        rows = dx.reshape(-1, dx.shape[-1])
        return rows[-1].expand(dx.shape) if rows.shape[0] else dx


def _weight_grad_from_output(dy: torch.Tensor, xhat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """dgamma from the output: sum dy * y instead of dy * xhat (right only for gamma = 1, beta = 0). Must fail
    ln.jacobian and ln.gradient_identities."""
    return dy * y.float()


def _weight_grad_missing(dy: torch.Tensor, xhat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """dgamma missing: zeros (a backward that never writes the dgamma buffer). Must fail ln.jacobian."""
    return torch.zeros_like(dy)


def _rows_accumulated_in_storage_dtype(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """dgamma / dbeta accumulated across rows in the parameter's (storage) dtype: each row's term is added to a
    float16/bfloat16 accumulator, rounding every partial sum. Must fail ln.jacobian and ln.gradient_identities
    (16-bit storage, many rows)."""
    total = torch.zeros(t.shape[-1], dtype=dtype, device=t.device)
    for row in t.reshape(-1, t.shape[-1]):
        total = total + row.to(dtype)
    return total


# --- kernels ----------------------------------------------------------------------------------------------------


def _description(stages: Stages) -> str:
    replaced = [stage for stage, correct in zip(stages, CORRECT, strict=True) if stage is not correct]
    return " ".join(replaced[0].__doc__.split()) if replaced else "Correct fused kernel (control)."


def _layernorm(name: str, stages: Stages) -> Kernel:
    def layernorm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                  eps: float) -> torch.Tensor:
        return _FusedNorm.apply(x, weight, bias, eps, True, stages)

    return Kernel(name, "layernorm", layernorm, spec=SPEC + name.upper(), description=_description(stages),
                  dtypes=FLOAT32_ARITHMETIC, second_derivatives=True)


def _rmsnorm(name: str, stages: Stages, offset: float = 0.0, in_place: tuple[str, ...] = ()) -> Kernel:
    """``offset``: the weight offset (Gemma's 1: the forward scales by 1 + w), declared as ``weight_offset``;
    ``in_place``: the declared buffers the kernel writes."""
    def rmsnorm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
        return _FusedNorm.apply(x, weight, None, eps, False, stages, offset)

    return Kernel(name, "rmsnorm", rmsnorm, spec=SPEC + name.upper(), description=_description(stages),
                  dtypes=FLOAT32_ARITHMETIC, second_derivatives=True, weight_offset=offset, in_place=in_place)


LN_FUSED = _layernorm("ln_fused", CORRECT)
RMS_FUSED = _rmsnorm("rms_fused", CORRECT)

LN_STRIDES_IGNORED = _layernorm("ln_strides_ignored", Stages(read_input=_as_if_contiguous))
LN_UPSTREAM_STRIDES_IGNORED = _layernorm("ln_upstream_strides_ignored", Stages(read_upstream=_as_if_contiguous))
LN_INPUT_OVERWRITTEN = _layernorm("ln_input_overwritten", Stages(after_forward=_input_reused_as_scratch))
LN_UPSTREAM_OVERWRITTEN = _layernorm("ln_upstream_overwritten", Stages(scale_upstream=_upstream_scaled_in_place))
LN_BWD_NO_GAMMA = _layernorm("ln_bwd_no_gamma", Stages(scale_upstream=_upstream_without_gamma))
LN_BWD_XHAT_FROM_OUTPUT = _layernorm("ln_bwd_xhat_from_output",
                                     Stages(normalized_for_backward=_normalized_from_output))
LN_BWD_NO_MEAN_TERM = _layernorm("ln_bwd_no_mean_term", Stages(input_grad=_input_grad_without_mean_term))
LN_BWD_NO_VARIANCE_TERM = _layernorm("ln_bwd_no_variance_term", Stages(input_grad=_input_grad_without_variance_term))
LN_DGAMMA_FROM_OUTPUT = _layernorm("ln_dgamma_from_output", Stages(weight_grad=_weight_grad_from_output))
LN_DGAMMA_MISSING = _layernorm("ln_dgamma_missing", Stages(weight_grad=_weight_grad_missing))
LN_PARAMETER_GRADS_IN_STORAGE_DTYPE = _layernorm("ln_parameter_grads_in_storage_dtype",
                                                 Stages(sum_rows=_rows_accumulated_in_storage_dtype))

RMS_STRIDES_IGNORED = _rmsnorm("rms_strides_ignored", Stages(read_input=_as_if_contiguous))
RMS_INPUT_OVERWRITTEN = _rmsnorm("rms_input_overwritten", Stages(after_forward=_input_reused_as_scratch))
RMS_BWD_ZERO_ON_PADDING_ROWS = _rmsnorm("rms_bwd_zero_on_padding_rows",
                                        Stages(input_grad=_input_grad_zero_on_padding_rows))
RMS_BWD_NO_VARIANCE_TERM = _rmsnorm("rms_bwd_no_variance_term", Stages(input_grad=_input_grad_without_variance_term))
RMS_DX_INTO_SHARED_DY = _rmsnorm("rms_dx_into_shared_dy", Stages(store_dx=_dx_into_upstream), in_place=("dy",))
RMS_GEMMA_BWD_NO_OFFSET = _rmsnorm("rms_gemma_bwd_no_offset", Stages(effective_weight=_offset_left_out), offset=1.0)
