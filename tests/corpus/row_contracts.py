"""Row-norm kernels with an explicit backward (an autograd.Function: float32 two-pass statistics, rounded once; the
backward the derived VJP from the saved x, mean and rstd), each broken in one hook, modelled on the bugs of a
red-team session (2026-11-27, round 6) that escaped the draws of its day: no gradient was taken through a strided x
(the autograd leaves were contiguous clones), the frozen-input gradient tests drew d = 1, the fresh-outputs test
drew no weight at d <= 3, nothing wrote x in place between two calls, and nothing looked at .grad or at torch's
global generator. The manifest (tests/corpus/__init__.py) lists the claims that must catch each.

    RMS_DX_EMPTY_LIKE_STRIDES        dx = torch.empty_like(x) (a transposed x's strides kept) written as if
                                     contiguous (TransformerEngine#1017)                  -> rms.layout_invariance
    ADD_LN_DX_EMPTY_LIKE_STRIDES     the same in add + LayerNorm, for the gradient of h = x + residual
                                                                                        -> add_ln.layout_invariance
    LN_FROZEN_WEIGHT_LEFT_OUT_OF_DX  a frozen weight (requires_grad False) left out of dx: g = dy, not dy * gamma
                                     (unsloth#45)                                         -> ln.jacobian
    RMS_FROZEN_WEIGHT_LEFT_OUT_OF_DX the same in RMSNorm                                  -> rms.jacobian
    ADD_RMS_FROZEN_WEIGHT_LEFT_OUT_OF_DX  the same in add + RMSNorm                       -> add_rms.jacobian
    LN_DWEIGHT_RETURNED_IN_WORKSPACE dweight returned in a buffer cached per width, overwritten by the next backward
                                     (Liger-Kernel#1305)                                  -> ln.inputs_unmodified
    LN_WGRAD_ALSO_ACCUMULATED        the backward adds dweight into weight.grad itself and returns it too (fused
                                     wgrad accumulation, TransformerEngine#545): twice under loss.backward()
                                                                                          -> ln.jacobian
    LN_INFERENCE_MEMO_BY_DATA_PTR    without a graph, outputs cached by x's address and shape: stale once x's
                                     buffer is overwritten (a serving stack's reused activations) -> ln.forward
    DROP_ADD_RESEEDS_GLOBAL_RNG      dropout + add + LayerNorm drawing its mask after torch.manual_seed(seed):
                                     the caller's random stream reset on every call       -> drop_add_ln.forward
"""

from __future__ import annotations

import torch

from core.registry import Kernel
from corpus.statistics import FLOAT32_ARITHMETIC, float32_norm

SPEC = "tests/corpus/row_contracts.py:"


def _as_contiguous(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``torch.empty_like(like)`` (a dense permuted ``like`` keeps its strides) filled by a kernel writing element
    (r, c) at offset r d + c: right for a contiguous ``like`` only."""
    out = torch.empty_like(like, dtype=values.dtype)
    torch.as_strided(out, (out.numel(),), (1,)).copy_(values.reshape(-1))
    return out


def _dx_in_x_layout(dx: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return dx.to(x.dtype)


def _gamma(weight, needs_weight_grad: bool):
    return weight


def _gamma_only_when_trained(weight, needs_weight_grad: bool):
    return weight if needs_weight_grad else None


def _returned(dweight: torch.Tensor) -> torch.Tensor:
    return dweight


_WORKSPACES: dict[tuple, torch.Tensor] = {}


def _in_workspace(dweight: torch.Tensor) -> torch.Tensor:
    key = (dweight.shape, dweight.dtype, dweight.device)
    if key not in _WORKSPACES:
        _WORKSPACES[key] = torch.empty_like(dweight)
    return _WORKSPACES[key].copy_(dweight)


def _no_side_effect(weight: torch.Tensor | None, dweight: torch.Tensor | None) -> None:
    return None


def _accumulate_into_grad(weight: torch.Tensor | None, dweight: torch.Tensor | None) -> None:
    if weight is not None and dweight is not None and weight.requires_grad:
        weight.grad = dweight.clone() if weight.grad is None else weight.grad + dweight


class _Norm(torch.autograd.Function):
    """LayerNorm (``rms`` False) or RMSNorm of the rows of x; ``hooks``: (write_dx(dx, x), gamma_in_dx(weight,
    needs_weight_grad), give_dweight(dweight), side_effect(weight, dweight)), each the correct one unless broken."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps, rms, hooks):
        y, mean, rstd = float32_norm(x, weight, bias, eps, centred=not rms)
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.rms, ctx.hooks, ctx.bias_dtype = rms, hooks, None if bias is None else bias.dtype
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, rstd = ctx.saved_tensors
        write_dx, gamma_in_dx, give_dweight, side_effect = ctx.hooks
        needs_x, needs_weight, needs_bias = ctx.needs_input_grad[:3]
        xhat = (x.float() - mean) * rstd
        dy = dy.float()
        gamma = gamma_in_dx(weight, needs_weight)
        g = dy if gamma is None else dy * gamma.float()
        centred = g - xhat * (g * xhat).mean(-1, keepdim=True)
        dx = rstd * (centred if ctx.rms else centred - g.mean(-1, keepdim=True))
        d = x.shape[-1]
        dweight = None
        if weight is not None and needs_weight:
            dweight = give_dweight((dy * xhat).reshape(-1, d).sum(0).to(weight.dtype))
            side_effect(weight, dweight)
        dbias = dy.reshape(-1, d).sum(0).to(ctx.bias_dtype) if ctx.bias_dtype is not None and needs_bias else None
        return write_dx(dx, x) if needs_x else None, dweight, dbias, None, None, None


CORRECT = (_dx_in_x_layout, _gamma, _returned, _no_side_effect)


def _hooks(**broken) -> tuple:
    names = ("write_dx", "gamma_in_dx", "give_dweight", "side_effect")
    return tuple(broken.get(name, default) for name, default in zip(names, CORRECT, strict=True))


def _layernorm(hooks: tuple):
    def layernorm(x, weight, bias, eps):
        return _Norm.apply(x, weight, bias, eps, False, hooks)

    return layernorm


def _rmsnorm(hooks: tuple):
    def rmsnorm(x, weight, eps):
        return _Norm.apply(x, weight, None, eps, True, hooks)

    return rmsnorm


def _add_layernorm(hooks: tuple):
    def add_layernorm(x, residual, weight, bias, eps):
        h = x if residual is None else x + residual
        return _Norm.apply(h, weight, bias, eps, False, hooks), h

    return add_layernorm


def _add_rmsnorm(hooks: tuple):
    def add_rmsnorm(x, residual, weight, eps):
        h = x if residual is None else x + residual
        return _Norm.apply(h, weight, None, eps, True, hooks), h

    return add_rmsnorm


_MEMO: dict[tuple, torch.Tensor] = {}


def layernorm_inference_memo_by_data_ptr(x, weight, bias, eps):
    """Without a graph to record, the output is looked up by (x's address, shape, dtype, eps): a second call on the
    same buffer with new values gets the first call's output."""
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)):
        return _Norm.apply(x, weight, bias, eps, False, CORRECT)
    key = (x.data_ptr(), tuple(x.shape), x.dtype, eps, weight is None, bias is None)
    if key not in _MEMO:
        _MEMO[key] = _Norm.apply(x, weight, bias, eps, False, CORRECT)
    return _MEMO[key].clone()


def dropout_add_layernorm_reseeding_the_global_generator(x, residual, weight, bias, eps, p, seed):
    """residual + dropout(x) with the mask of torch.manual_seed(seed), then LayerNorm: a function of the seed, but the
    caller's global generator is left reseeded."""
    torch.manual_seed(seed)
    dropped = torch.nn.functional.dropout(x, p) if p > 0 else x
    h = dropped if residual is None else residual + dropped
    return _Norm.apply(h, weight, bias, eps, False, CORRECT), h


def _kernel(attr: str, kind: str, fn, description: str) -> Kernel:
    """The float32 arithmetic of the file's implementation (its float64 x computed in float32) declared."""
    return Kernel(name=attr.lower(), kind=kind, fn=fn, spec=SPEC + attr, dtypes=FLOAT32_ARITHMETIC,
                  description=description)


RMS_DX_EMPTY_LIKE_STRIDES = _kernel(
    "RMS_DX_EMPTY_LIKE_STRIDES", "rmsnorm", _rmsnorm(_hooks(write_dx=_as_contiguous)),
    "dx = torch.empty_like(x) written as if contiguous (a transposed x's dx comes back transposed, "
    "TransformerEngine#1017). Must fail rms.layout_invariance (gradients through strided x).")
ADD_LN_DX_EMPTY_LIKE_STRIDES = _kernel(
    "ADD_LN_DX_EMPTY_LIKE_STRIDES", "add_layernorm", _add_layernorm(_hooks(write_dx=_as_contiguous)),
    "The gradient of h = x + residual written as if contiguous into empty_like(h). Must fail "
    "add_ln.layout_invariance (gradients through strided x and residual).")
LN_FROZEN_WEIGHT_LEFT_OUT_OF_DX = _kernel(
    "LN_FROZEN_WEIGHT_LEFT_OUT_OF_DX", "layernorm", _layernorm(_hooks(gamma_in_dx=_gamma_only_when_trained)),
    "A frozen weight (requires_grad False) left out of dx (unsloth#45). Must fail ln.jacobian (frozen inputs, d >= 4).")
RMS_FROZEN_WEIGHT_LEFT_OUT_OF_DX = _kernel(
    "RMS_FROZEN_WEIGHT_LEFT_OUT_OF_DX", "rmsnorm", _rmsnorm(_hooks(gamma_in_dx=_gamma_only_when_trained)),
    "A frozen weight left out of dx (unsloth#45). Must fail rms.jacobian (frozen inputs, d >= 4).")
ADD_RMS_FROZEN_WEIGHT_LEFT_OUT_OF_DX = _kernel(
    "ADD_RMS_FROZEN_WEIGHT_LEFT_OUT_OF_DX", "add_rmsnorm", _add_rmsnorm(_hooks(gamma_in_dx=_gamma_only_when_trained)),
    "A frozen weight left out of the gradient of h (unsloth#45). Must fail add_rms.jacobian (frozen inputs, d >= 4).")
LN_DWEIGHT_RETURNED_IN_WORKSPACE = _kernel(
    "LN_DWEIGHT_RETURNED_IN_WORKSPACE", "layernorm", _layernorm(_hooks(give_dweight=_in_workspace)),
    "dweight returned in a buffer cached per width, overwritten by the next backward (Liger-Kernel#1305). Must fail "
    "ln.inputs_unmodified (outputs are fresh tensors).")
LN_WGRAD_ALSO_ACCUMULATED = _kernel(
    "LN_WGRAD_ALSO_ACCUMULATED", "layernorm", _layernorm(_hooks(side_effect=_accumulate_into_grad)),
    "The backward adds dweight into weight.grad itself and returns it too (TransformerEngine#545): twice under "
    "loss.backward(). Must fail ln.jacobian (the guard's accumulated fault).")
LN_INFERENCE_MEMO_BY_DATA_PTR = _kernel(
    "LN_INFERENCE_MEMO_BY_DATA_PTR", "layernorm", layernorm_inference_memo_by_data_ptr,
    "Without a graph, outputs cached by x's address: stale once x's buffer is overwritten. Must fail ln.forward "
    "(x, weight and bias overwritten in place between two calls).")
DROP_ADD_RESEEDS_GLOBAL_RNG = _kernel(
    "DROP_ADD_RESEEDS_GLOBAL_RNG", "dropout_add_layernorm", dropout_add_layernorm_reseeding_the_global_generator,
    "The mask drawn after torch.manual_seed(seed): the caller's random stream reset on every call. Must fail "
    "drop_add_ln.forward (the guard's rng fault) and every claim that calls it.")
# The implementation unbroken (every hook the correct one): must pass every claim.
ROW_CONTRACTS_CONTROL = _kernel("ROW_CONTRACTS_CONTROL", "layernorm", _layernorm(CORRECT),
                                "row_contracts.py's implementation unbroken: correct.")
