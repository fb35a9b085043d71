"""Differentiable entry points: ``torch.autograd.Function`` wrappers around the Triton kernels.

    layer_norm(x, weight, bias, eps)   over the last dimension; weight, bias: [d] or None
    rms_norm(x, weight, eps)           over the last dimension; weight: [d] or None
    dropout(x, p, seed)                inverted dropout, deterministic for a seed

These are the contracts of :mod:`verify.registry`. CUDA tensors run compiled Triton, CPU tensors
Triton's interpreter (float32/float16 only there). Gradients flow to x, weight and bias; the
backward pass is not itself differentiable (``once_differentiable``).
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from kernels import norm, rows
from kernels.dropout import dropout as dropout_kernel


class _NormFunction(torch.autograd.Function):
    """Shared forward/backward of LayerNorm (``rms=False``) and RMSNorm (``rms=True``)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
                rms: bool) -> torch.Tensor:
        y, mean, rstd = norm.forward(x, weight, bias, eps, rms=rms)
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.rms = rms
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy: torch.Tensor):
        x, weight, mean, rstd = ctx.saved_tensors
        dx, dweight, dbias = norm.backward(dy, x, weight, mean, rstd, rms=ctx.rms,
                                           need_dw=ctx.needs_input_grad[1], need_db=ctx.needs_input_grad[2])
        return dx, dweight, dbias, None, None


def _check_norm_inputs(op: str, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None) -> None:
    rows.check_tensor(op, "x", x)
    if x.dim() == 0:
        raise ValueError(f"{op}: x must have at least one dimension")
    rows.check_param(op, "weight", weight, x)
    rows.check_param(op, "bias", bias, x)


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
               eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm over the last dimension: weight * (x - mean) / sqrt(var + eps) + bias (population var)."""
    _check_norm_inputs("layer_norm", x, weight, bias)
    return _NormFunction.apply(x, weight, bias, eps, False)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dimension: weight * x / sqrt(mean(x^2) + eps)."""
    _check_norm_inputs("rms_norm", x, weight, None)
    return _NormFunction.apply(x, weight, None, eps, True)


class _DropoutFunction(torch.autograd.Function):
    """y = mask * x / (1 - p); dL/dx = mask * dL/dy / (1 - p): the same kernel, the same seed."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
        ctx.p, ctx.seed = p, seed
        return dropout_kernel(x, p, seed)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy: torch.Tensor):
        return dropout_kernel(dy, ctx.p, ctx.seed), None, None


def dropout(x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
    """Inverted dropout (drop probability p), the mask a function of (seed, element index) only."""
    rows.check_tensor("dropout", "x", x)
    return _DropoutFunction.apply(x, p, seed)
