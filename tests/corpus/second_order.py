"""Broken second derivatives (ln.second_order / rms.second_order): LayerNorm/RMSNorm as a ``torch.autograd.Function``
whose backward is itself differentiable, right to first order (every first-order claim passes them) and wrong in the
gradient of its gradient, the way real double backwards go wrong:

    LN_STATISTICS_HELD_CONSTANT      the backward written in torch ops from the saved mean and rstd: autograd
                                     differentiates it with the statistics held constant (a helper's
                                     ln_double_backward; pytorch/pytorch#50467: the eager double backward missed
                                     dmean and drstd until they were put into the backward function)
    RMS_F_TERM_DROPPED               an explicit double backward (the closed form of proofs.second_order) without the
                                     -r^2/d xhat F term of dS/dx (the derivative of rstd through <xhat, w dy>)
    LN_WEIGHT_SECOND_DERIVATIVE_MISSING  an explicit double backward returning no gradient for the weight (dS/dw =
                                     sum_rows dy J_n u): autograd takes it as 0
    ADD_LN_STATISTICS_HELD_CONSTANT, ADD_RMS_STATISTICS_HELD_CONSTANT  fused add + norm, h = x + residual
                                     normalized as the first kernel does: the statistics held constant in the
                                     gradient of its gradient (pytorch/pytorch#50467's class, for the fused kinds)
                                     -> add_ln.second_order, add_rms.second_order

Per row, r = rstd, xhat = (x - mean) r (RMSNorm: x r), v = w dy, J_n t = r (t - [mean t]_LN - xhat <xhat, t>/d); for
upstream gradients u, a, c of (dx, dweight, dbias): dS/d dy = w J_n u + xhat a + c, dS/dw = sum_rows dy J_n u,
dS/dx = J_n(dy a - r/d <u, xhat> v) - r m J_n u - r^2/d xhat F with m = <xhat, v>/d,
F = <u, v> - m <u, xhat> - [mean(v) sum(u)]_LN. Everything in float32, cast back to the inputs' dtypes.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from core.registry import Kernel
from corpus.statistics import FLOAT32_ARITHMETIC, float32_norm

SPEC = "tests/corpus/second_order.py:"


class Flaws(NamedTuple):
    statistics_held_constant: bool = False
    f_term_dropped: bool = False
    weight_second_derivative_missing: bool = False


def _rowsum(t: torch.Tensor) -> torch.Tensor:
    return t.sum(-1, keepdim=True)


def _parameter_sum(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1, t.shape[-1]).sum(0)


def _jn(t: torch.Tensor, xhat: torch.Tensor, rstd: torch.Tensor, centred: bool) -> torch.Tensor:
    d = t.shape[-1]
    out = t - xhat * _rowsum(xhat * t) / d
    return rstd * (out - _rowsum(t) / d if centred else out)


def _first_order(dy: torch.Tensor, xhat: torch.Tensor, rstd: torch.Tensor, weight: torch.Tensor | None,
                 centred: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dweight, dbias) in float32 from xhat and rstd: dx = J_n (w dy)."""
    g = dy.float() if weight is None else dy.float() * weight.float()
    return _jn(g, xhat, rstd, centred), _parameter_sum(dy.float() * xhat), _parameter_sum(dy.float())


class _Backward(torch.autograd.Function):
    """The first-order backward as a function of (dy, x, weight), with its explicit (flawed) double backward."""

    @staticmethod
    def forward(ctx, dy, x, weight, mean, rstd, centred: bool, flaws: Flaws):
        xhat = (x.float() - mean) * rstd
        ctx.save_for_backward(dy, x, weight, mean, rstd)
        ctx.centred, ctx.flaws = centred, flaws
        return _first_order(dy, xhat, rstd, weight, centred)

    @staticmethod
    def backward(ctx, u, a, c):
        dy, x, weight, mean, rstd = ctx.saved_tensors
        centred, flaws, d = ctx.centred, ctx.flaws, x.shape[-1]
        xhat = (x.float() - mean) * rstd
        w = torch.ones(d, dtype=torch.float32, device=x.device) if weight is None else weight.float()
        u = torch.zeros_like(xhat) if u is None else u.float()
        a = torch.zeros(d, device=x.device) if a is None else a.float()
        c = torch.zeros(d, device=x.device) if c is None else c.float()
        dy32 = dy.float()
        v = w * dy32
        jn_u = _jn(u, xhat, rstd, centred)
        m = _rowsum(xhat * v) / d
        f = _rowsum(u * v) - m * _rowsum(u * xhat)
        if centred:
            f = f - _rowsum(v) / d * _rowsum(u)
        grad_dy = w * jn_u + xhat * a + c
        grad_x = _jn(dy32 * a - rstd / d * _rowsum(u * xhat) * v, xhat, rstd, centred) - rstd * m * jn_u
        if not flaws.f_term_dropped:
            grad_x = grad_x - rstd * rstd / d * xhat * f
        grad_w = None if weight is None or flaws.weight_second_derivative_missing else _parameter_sum(dy32 * jn_u)
        return (grad_dy.to(dy.dtype), grad_x.to(x.dtype), None if grad_w is None else grad_w.to(weight.dtype),
                None, None, None, None)


class _Norm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps: float, centred: bool, flaws: Flaws):
        y, mean, rstd = float32_norm(x, weight, bias, eps, centred)
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.centred, ctx.flaws, ctx.bias_dtype = centred, flaws, None if bias is None else bias.dtype
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, rstd = ctx.saved_tensors
        if ctx.flaws.statistics_held_constant:  # differentiable torch ops; mean and rstd saved without a graph
            dx, dweight, dbias = _first_order(dy, (x.float() - mean) * rstd, rstd, weight, ctx.centred)
        else:
            dx, dweight, dbias = _Backward.apply(dy, x, weight, mean, rstd, ctx.centred, ctx.flaws)
        return (dx.to(x.dtype), None if weight is None else dweight.to(weight.dtype),
                None if ctx.bias_dtype is None else dbias.to(ctx.bias_dtype), None, None, None)


def _layernorm(name: str, flaws: Flaws, description: str) -> Kernel:
    def fn(x, weight, bias, eps):
        return _Norm.apply(x, weight, bias, eps, True, flaws)

    return Kernel(name, "layernorm", fn, spec=SPEC + name.upper(), description=description,
                  dtypes=FLOAT32_ARITHMETIC, second_derivatives=True)


def _rmsnorm(name: str, flaws: Flaws, description: str) -> Kernel:
    def fn(x, weight, eps):
        return _Norm.apply(x, weight, None, eps, False, flaws)

    return Kernel(name, "rmsnorm", fn, spec=SPEC + name.upper(), description=description, dtypes=FLOAT32_ARITHMETIC,
                  second_derivatives=True)


LN_STATISTICS_HELD_CONSTANT = _layernorm(
    "ln_statistics_held_constant", Flaws(statistics_held_constant=True),
    "LayerNorm whose backward, written in differentiable torch ops from the saved mean and rstd, autograd "
    "differentiates with the statistics held constant (pytorch/pytorch#50467: dmean and drstd missing from the double "
    "backward). Right to first order. Must fail ln.second_order.")
RMS_F_TERM_DROPPED = _rmsnorm(
    "rms_f_term_dropped", Flaws(f_term_dropped=True),
    "RMSNorm with an explicit double backward that drops dS/dx's -r^2/d xhat F term (rstd's derivative through "
    "<xhat, w dy>). Right to first order. Must fail rms.second_order.")
LN_WEIGHT_SECOND_DERIVATIVE_MISSING = _layernorm(
    "ln_weight_second_derivative_missing", Flaws(weight_second_derivative_missing=True),
    "LayerNorm with an explicit double backward that returns no gradient for the weight (dS/dw = sum_rows dy J_n u "
    "taken as 0 by autograd). Right to first order. Must fail ln.second_order.")



def _add_layernorm(name: str, flaws: Flaws, description: str) -> Kernel:
    def fn(x, residual, weight, bias, eps):
        h = x + residual
        return _Norm.apply(h, weight, bias, eps, True, flaws), h

    return Kernel(name, "add_layernorm", fn, spec=SPEC + name.upper(), description=description,
                  dtypes=FLOAT32_ARITHMETIC, second_derivatives=True)


def _add_rmsnorm(name: str, flaws: Flaws, description: str) -> Kernel:
    def fn(x, residual, weight, eps):
        h = x + residual
        return _Norm.apply(h, weight, None, eps, False, flaws), h

    return Kernel(name, "add_rmsnorm", fn, spec=SPEC + name.upper(), description=description,
                  dtypes=FLOAT32_ARITHMETIC, second_derivatives=True)


ADD_LN_STATISTICS_HELD_CONSTANT = _add_layernorm(
    "add_ln_statistics_held_constant", Flaws(statistics_held_constant=True),
    "Fused add + LayerNorm normalizing h = x + residual with a backward written in differentiable torch ops from the "
    "saved mean and rstd: autograd differentiates it with the statistics held constant (pytorch/pytorch#50467). "
    "Right to first order. Must fail add_ln.second_order.")


ADD_RMS_STATISTICS_HELD_CONSTANT = _add_rmsnorm(
    "add_rms_statistics_held_constant", Flaws(statistics_held_constant=True),
    "Fused add + RMSNorm normalizing h = x + residual with a backward written in differentiable torch ops from the "
    "saved rstd: autograd differentiates it with the statistics held constant (pytorch/pytorch#50467's class). Right "
    "to first order. Must fail add_rms.second_order.")
