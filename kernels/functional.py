"""Differentiable entry points: ``torch.autograd.Function`` wrappers around the Triton kernels.

    layer_norm(x, weight, bias, eps)   over the last dimension; weight, bias: [d] or None
    rms_norm(x, weight, eps)           over the last dimension; weight: [d] or None
    dropout(x, p, seed)                inverted dropout, deterministic for a seed

These are the contracts of :mod:`core.registry`. CUDA tensors run compiled Triton, CPU tensors
Triton's interpreter (float32/float16 only there). Gradients flow to x, weight and bias, and the
norms' backward pass is itself differentiable (second derivatives; see ``_NormBackward``).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from kernels import norm, rows
from kernels.dropout_kernel import dropout as dropout_kernel


class _NormFunction(torch.autograd.Function):
    """LayerNorm (``rms=False``) and RMSNorm (``rms=True``): one launch forward, at most two backward.

    The backward calls the kernels directly; only when a graph of it is being built (``create_graph=True``, so
    grad mode is on inside it) does it go through :class:`_NormBackward`, the backward as a differentiable
    function, whose extra autograd node a plain backward does not pay for."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
                rms: bool) -> torch.Tensor:
        y, mean, rstd = norm.forward(x, weight, bias, eps, rms=rms)
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.rms = rms
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        x, weight, mean, rstd = ctx.saved_tensors
        _, need_dw, need_db, _, _ = ctx.needs_input_grad
        if torch.is_grad_enabled():
            dx, dweight, dbias = _NormBackward.apply(dy, x, weight, mean, rstd, ctx.rms, need_dw, need_db)
        else:
            dx, dweight, dbias = norm.backward(dy, x, weight, mean, rstd, rms=ctx.rms, need_dw=need_dw,
                                               need_db=need_db)
        return dx, dweight, dbias, None, None


def _rowdot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a * b).sum(-1, keepdim=True)


class _NormBackward(torch.autograd.Function):
    """The backward pass as a differentiable function of (dy, x, weight), so gradients of gradients exist.

    With Jn = d xhat / d x per row, symmetric: Jn = rstd (I - 11^T/d - xhat xhat^T/d) (RMSNorm: no 11^T/d),

        dx = Jn (w * dy),   dweight = sum_rows dy * xhat,   dbias = sum_rows dy.

    For upstream gradients (u, a, c) of (dx, dweight, dbias), with v = w * dy, m = <xhat, v>/d,
    F = <u, v> - mean(v) sum(u) - m <u, xhat> (RMSNorm: no mean(v) sum(u) term), per row:

        d/d dy     = w * Jn u + xhat * a + c
        d/d weight = sum_rows dy * Jn u
        d/d x      = Jn (dy * a - rstd/d <u, xhat> v) - rstd m Jn u - rstd^2/d xhat F

    (from d rstd/dx = -rstd^2 xhat/d and d xhat/dx = Jn). Jn is applied by the backward kernel with no
    weight; the rest are row sums in float32. Third derivatives are not provided.
    """

    @staticmethod
    def forward(ctx, dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, mean: torch.Tensor | None,
                rstd: torch.Tensor, rms: bool, need_dw: bool, need_db: bool):
        ctx.save_for_backward(dy, x, weight, mean, rstd)
        ctx.rms = rms
        return norm.backward(dy, x, weight, mean, rstd, rms=rms, need_dw=need_dw, need_db=need_db)

    @staticmethod
    @once_differentiable
    def backward(ctx, u: torch.Tensor | None, a: torch.Tensor | None, c: torch.Tensor | None):
        dy, x, weight, mean, rstd = ctx.saved_tensors
        rms, d = ctx.rms, x.shape[-1]

        def jn(t: torch.Tensor) -> torch.Tensor:
            return norm.backward(t, x, None, mean, rstd, rms=rms, need_dw=False, need_db=False)[0].float()

        r = rstd.view(*x.shape[:-1], 1)
        centered = x.float() if rms else x.float() - mean.view(*x.shape[:-1], 1)
        xhat = centered * r
        w = torch.ones(d, device=x.device) if weight is None else weight.float()
        dy32 = dy.float()
        u = torch.zeros_like(xhat) if u is None else u.float()
        a = torch.zeros(d, device=x.device) if a is None else a.float()
        c = torch.zeros(d, device=x.device) if c is None else c.float()
        jn_u = jn(u)
        v = w * dy32
        m = _rowdot(xhat, v) / d
        f = _rowdot(u, v) - m * _rowdot(u, xhat)
        if not rms:
            f = f - v.mean(-1, keepdim=True) * u.sum(-1, keepdim=True)
        grad_dy = w * jn_u + xhat * a + c
        grad_x = jn(dy32 * a - r / d * _rowdot(u, xhat) * v) - r * m * jn_u - r * r / d * xhat * f
        grad_w = None if weight is None else (dy32 * jn_u).reshape(-1, d).sum(0).to(weight.dtype)
        return grad_dy.to(dy.dtype), grad_x.to(x.dtype), grad_w, None, None, None, None, None


def _check_norm_inputs(op: str, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None) -> None:
    if rows.inputs_ok(x, (weight, bias)):
        return
    rows.check_tensor(op, "x", x)
    if x.dim() == 0:
        raise ValueError(f"{op}: x must have at least one dimension")
    rows.check_param(op, "weight", weight, x)
    rows.check_param(op, "bias", bias, x)


_NORM_APPLY = rows.c_apply(_NormFunction)


def _norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
          rms: bool) -> torch.Tensor:
    mode = rows.graph_mode(x, weight, bias)
    if mode == rows.NO_GRAPH:
        return norm.forward(x, weight, bias, eps, rms=rms)[0]
    if mode == rows.RECORD:
        return _NORM_APPLY(x, weight, bias, eps, rms)
    return _NormFunction.apply(x, weight, bias, eps, rms)


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
               eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm over the last dimension: weight * (x - mean) / sqrt(var + eps) + bias (population var)."""
    _check_norm_inputs("layer_norm", x, weight, bias)
    return _norm(x, weight, bias, eps, False)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dimension: weight * x / sqrt(mean(x^2) + eps)."""
    _check_norm_inputs("rms_norm", x, weight, None)
    return _norm(x, weight, None, eps, True)


class _DropoutFunction(torch.autograd.Function):
    """y = mask * x / (1 - p); dL/dx = mask * dL/dy / (1 - p): the same kernel, the same seed."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
        ctx.p, ctx.seed = p, seed
        return dropout_kernel(x, p, seed)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        # The same linear map again, so it is differentiable to any order.
        return _DropoutFunction.apply(dy, ctx.p, ctx.seed), None, None


def dropout(x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
    """Inverted dropout (drop probability p), the mask a function of (seed, element index) only."""
    rows.check_tensor("dropout", "x", x)
    return _DropoutFunction.apply(x, p, seed)
