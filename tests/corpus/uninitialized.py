"""Broken kernels that read memory they never wrote, or leave part of an output unwritten: their results are whatever
``torch.empty`` handed them. On a CPU that is often zeros, or the values a previous call left in the same block of
the caching allocator, which can be the right ones; the suite fills every uninitialized allocation of a kernel call
with NaN (core.guard.poisoned_allocations), so they give NaN on finite inputs, every time.

Modelled on public bugs of this class: FlagGems' RMSNorm backward summed a ``torch.empty`` partial-sum buffer whose
rows for programs without a row were never written (FlagGems PR 1082: NaN or wrong dW, fixed with torch.zeros), and
launches whose grid rounds the row count down (``n // ROWS`` programs of ROWS rows instead of a ceiling), leaving
the remainder of ``y = torch.empty_like(x)`` unwritten.

    LN_PARTIALS_UNWRITTEN           LayerNorm: dweight, dbias summed from one float32 partial row per program (8),
                                    rows of programs with no row never written       -> ln.jacobian
    RMS_REMAINDER_ROWS_UNWRITTEN    RMSNorm: 4 rows per program, n // 4 programs: the last n mod 4 rows of y never
                                    written                                          -> rms.forward
"""

from __future__ import annotations

import torch

from core.kernel import Kernel
from corpus.correct import layernorm_two_pass_float64, rmsnorm_two_pass_float64

SPEC = "tests/corpus/uninitialized.py:"
PROGRAMS = 8  # the backward's persistent programs, each summing rows p, p + 8, ... into its partial row
ROWS_PER_PROGRAM = 4


class _LayerNormUnwrittenPartials(torch.autograd.Function):
    """LayerNorm in float64, rounded once; the backward's dx is autograd's of the float64 forward, dweight and dbias
    the sums of a ``torch.empty`` [8, 2, d] float32 buffer in which program p writes the sums of dy xhat and dy over
    rows p, p + 8, ...: only when it has a row. Right for 8 rows or more."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps: float):
        ctx.save_for_backward(x, weight, bias)
        ctx.eps = eps
        return layernorm_two_pass_float64(x, weight, bias, eps)

    @staticmethod
    def backward(ctx, dy):
        x, weight, bias = ctx.saved_tensors
        leaf = x.detach().double().requires_grad_()
        with torch.enable_grad():
            y = layernorm_two_pass_float64(leaf, None if weight is None else weight.double(), None, ctx.eps)
        (dx,) = torch.autograd.grad(y, leaf, dy.double())
        d = x.shape[-1]
        xhat = layernorm_two_pass_float64(x.double(), None, None, ctx.eps).reshape(-1, d)
        rows = dy.double().reshape(-1, d)
        partials = dy.new_empty((PROGRAMS, 2, d), dtype=torch.float32)
        for program in range(min(PROGRAMS, rows.shape[0])):
            partials[program, 0] = (rows[program::PROGRAMS] * xhat[program::PROGRAMS]).sum(0)
            partials[program, 1] = rows[program::PROGRAMS].sum(0)
        sums = partials.sum(0)
        dweight = None if weight is None else sums[0].to(weight.dtype)
        dbias = None if bias is None else sums[1].to(bias.dtype)
        return dx.to(x.dtype), dweight, dbias, None


def layernorm_partials_unwritten(x, weight, bias, eps):
    return _LayerNormUnwrittenPartials.apply(x, weight, bias, eps)


def rmsnorm_remainder_rows_unwritten(x, weight, eps):
    """RMSNorm (float64, rounded once) into ``y = torch.empty_like``, 4 rows per program on a grid of n // 4 programs:
    the last n mod 4 rows are never written."""
    flat = x.reshape(-1, x.shape[-1])
    y = torch.empty_like(flat)
    written = flat.shape[0] - flat.shape[0] % ROWS_PER_PROGRAM
    y[:written] = rmsnorm_two_pass_float64(flat[:written], weight, eps)
    return y.reshape(x.shape)


LN_PARTIALS_UNWRITTEN = Kernel("ln_partials_unwritten", "layernorm", layernorm_partials_unwritten,
                               spec=SPEC + "LN_PARTIALS_UNWRITTEN",
                               description="dweight/dbias summed from partial rows some programs never wrote: "
                                           "ln.jacobian")
RMS_REMAINDER_ROWS_UNWRITTEN = Kernel("rms_remainder_rows_unwritten", "rmsnorm", rmsnorm_remainder_rows_unwritten,
                                      spec=SPEC + "RMS_REMAINDER_ROWS_UNWRITTEN",
                                      description="the last n mod 4 rows of y never written: rms.forward")
