"""Broken kernels of every differentiable kind whose backward reads the upstream gradients (dy, and the fused
kinds' dh) as if they were contiguous (corpus.memory): a kernel indexing ``ptr + row * d + col`` whatever strides
autograd hands it, a strided or transposed view, a channels-last gradient from a convolution's backward, or the
stride-0 expansion that is the upstream gradient of a summed loss (``y.sum()``, ``(y * v).sum()``). Each is a
correct kernel of its kind (the corpus's controls) with its outputs passed through :class:`_UpstreamRead`;
each must fail its kind's layout_invariance.

    RMS_UPSTREAM_STRIDES_IGNORED       RMSNorm (float64 two-pass)                -> rms.layout_invariance
    ADD_LN_UPSTREAM_STRIDES_IGNORED    add + LayerNorm (dy and dh)               -> add_ln.layout_invariance
    ADD_RMS_UPSTREAM_STRIDES_IGNORED   add + RMSNorm (dy and dh)                 -> add_rms.layout_invariance
    GN_UPSTREAM_STRIDES_IGNORED        GroupNorm                                 -> gn.layout_invariance
    CLN_UPSTREAM_STRIDES_IGNORED       LayerNorm over (C, *)                     -> cln.layout_invariance
    BN_UPSTREAM_STRIDES_IGNORED        BatchNorm                                 -> bn.layout_invariance
    IN_UPSTREAM_STRIDES_IGNORED        InstanceNorm                              -> in.layout_invariance
    DROPOUT_UPSTREAM_STRIDES_IGNORED   dropout (seeded Bernoulli)                -> dropout.layout_invariance
    DROP_ADD_UPSTREAM_STRIDES_IGNORED  dropout + add + LayerNorm (dy and dh)     -> drop_add_ln.layout_invariance

    RMS_UPSTREAM_ROWS_BY_LAST_ROW_STRIDE  RMSNorm reading dy's rows stepped by dy.stride(-2): wrong for a [B, S, d]
                                       view of an [S, B, d] gradient       -> rms.layout_invariance

(LayerNorm's is fused.py's LN_UPSTREAM_STRIDES_IGNORED.)
"""

from __future__ import annotations

import functools

import torch

from core.kernel import Kernel
from corpus import batchnorm, channel_layernorm, correct, dropout, dropout_add, groupnorm, residual
from corpus.memory import read_as_if_contiguous, read_rows_by_the_last_row_stride

SPEC = "tests/corpus/upstream.py:"
DESCRIPTION = "its backward reads the upstream gradient as if it were contiguous: {claim}"


class _UpstreamRead(torch.autograd.Function):
    """The identity forward; backward, the upstream gradient as ``read`` reads it (corpus.memory)."""

    @staticmethod
    def forward(ctx, t: torch.Tensor, read) -> torch.Tensor:
        ctx.read = read
        return t.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return ctx.read(grad), None


def _upstream_read(fn, read):
    """``fn`` (its signature kept) with each tensor it returns passed through :class:`_UpstreamRead`."""
    @functools.wraps(fn)
    def wrapped(*args):
        out = fn(*args)
        if isinstance(out, tuple):
            return tuple(_UpstreamRead.apply(t, read) for t in out)
        return _UpstreamRead.apply(out, read)

    return wrapped


def _kernel(name: str, kind: str, fn, claim: str, read=read_as_if_contiguous, **declared) -> Kernel:
    return Kernel(name.lower(), kind, _upstream_read(fn, read), spec=SPEC + name,
                  description=DESCRIPTION.format(claim=claim), **declared)


def _add_norm(kind: str):
    fn, _, _ = residual._make("none", kind)
    return fn


RMS_UPSTREAM_STRIDES_IGNORED = _kernel("RMS_UPSTREAM_STRIDES_IGNORED", "rmsnorm", correct.rmsnorm_two_pass_float64,
                                       "rms.layout_invariance")
ADD_LN_UPSTREAM_STRIDES_IGNORED = _kernel("ADD_LN_UPSTREAM_STRIDES_IGNORED", "add_layernorm", _add_norm("ln"),
                                          "add_ln.layout_invariance", dtypes=(torch.float32, torch.float16))
ADD_RMS_UPSTREAM_STRIDES_IGNORED = _kernel("ADD_RMS_UPSTREAM_STRIDES_IGNORED", "add_rmsnorm", _add_norm("rms"),
                                           "add_rms.layout_invariance", dtypes=(torch.float32, torch.float16))
GN_UPSTREAM_STRIDES_IGNORED = _kernel("GN_UPSTREAM_STRIDES_IGNORED", "groupnorm", groupnorm.GN_CORRECT.fn,
                                      "gn.layout_invariance")
CLN_UPSTREAM_STRIDES_IGNORED = _kernel("CLN_UPSTREAM_STRIDES_IGNORED", "channel_layernorm",
                                       channel_layernorm.CLN_CORRECT.fn, "cln.layout_invariance")
BN_UPSTREAM_STRIDES_IGNORED = _kernel("BN_UPSTREAM_STRIDES_IGNORED", "batchnorm", batchnorm.BN_CORRECT.fn,
                                      "bn.layout_invariance")
IN_UPSTREAM_STRIDES_IGNORED = _kernel("IN_UPSTREAM_STRIDES_IGNORED", "instancenorm", batchnorm.IN_CORRECT.fn,
                                      "in.layout_invariance")
DROPOUT_UPSTREAM_STRIDES_IGNORED = _kernel("DROPOUT_UPSTREAM_STRIDES_IGNORED", "dropout", dropout.DROPOUT_BERNOULLI.fn,
                                           "dropout.layout_invariance")
DROP_ADD_UPSTREAM_STRIDES_IGNORED = _kernel("DROP_ADD_UPSTREAM_STRIDES_IGNORED", "dropout_add_layernorm",
                                            dropout_add.DROP_ADD_CORRECT.fn, "drop_add_ln.layout_invariance")
RMS_UPSTREAM_ROWS_BY_LAST_ROW_STRIDE = _kernel("RMS_UPSTREAM_ROWS_BY_LAST_ROW_STRIDE", "rmsnorm",
                                               correct.rmsnorm_two_pass_float64, "rms.layout_invariance",
                                               read=read_rows_by_the_last_row_stride)
