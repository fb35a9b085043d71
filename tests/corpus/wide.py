"""Broken LayerNorm/RMSNorm kernels wrong only on rows wider than one block (BLOCK = 8192 columns, as ours): the
loop over blocks that such kernels take beyond it has the bug, the one-block path is right. Only the draws of
strategies.WIDE_ROWS (d = 8193 to 65536) reach them.

    LN_WIDE_TAIL_MASK               the loop's last block masked against BLOCK, not d: the mean and variance take
                                    the next row's first elements (past the last row, zeros)   -> ln.forward
    RMS_WIDE_UNWEIGHTED_MERGE       mean(x^2) as the mean of the blocks' means, a partial last block weighted as a
                                    full one                                                    -> rms.forward
    LN_WIDE_BACKWARD_FIRST_BLOCK    the backward's row sums mean(g), mean(g xhat) over the first block only
                                                                                                -> ln.jacobian

The kinds over x [N, C, *] (groupnorm.py, batchnorm.py) take :func:`unweighted_block_moments` as their bug
"wide_blocks": their rows of statistics wider than a tile of 4096 elements merged as blocks of equal weight.
"""

from __future__ import annotations

import torch

from core.registry import Kernel
from corpus.statistics import Moments, _layernorm_statistics, _normalize, _rmsnorm_statistics

SPEC = "tests/corpus/wide.py:"
BLOCK = 8192
TILE = 4096  # the elements of a row of statistics a program of a BatchNorm or GroupNorm kernel holds at once


def unweighted_block_moments(values: torch.Tensor, axes: tuple[int, ...]) -> Moments:
    """(mean, population variance) of ``values`` over ``axes`` (keepdim), each the plain mean of the TILE-element
    blocks' means, in memory order of the reduced elements: a partial last block counts as a whole one (right when
    TILE divides the count, as for one block)."""
    dims = values.dim()
    axes = tuple(sorted(a % dims for a in axes))
    kept = [a for a in range(dims) if a not in axes]
    rows = values.permute(*kept, *axes).reshape(*(values.shape[a] for a in kept), -1)
    shape = tuple(1 if a in axes else values.shape[a] for a in range(dims))

    def blockwise_mean(t: torch.Tensor) -> torch.Tensor:
        blocks = torch.stack([t[..., i:i + TILE].mean(-1) for i in range(0, t.shape[-1], TILE)])
        return blocks.mean(0).unsqueeze(-1)

    mean = blockwise_mean(rows)
    return mean.reshape(shape), blockwise_mean((rows - mean).square()).reshape(shape)


def _tail_mask_statistics(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """Rows wider than BLOCK: the statistics of a window of whole blocks from the row's start, which runs into the
    next row (zeros past the last row). Must fail ln.forward."""
    d = x.shape[-1]
    if d <= BLOCK:
        return _layernorm_statistics(x, eps, storage)
    window = -(-d // BLOCK) * BLOCK
    flat = x.reshape(-1)
    windows = torch.cat([flat, flat.new_zeros(window - d)]).unfold(0, window, d)
    mean = windows.mean(-1, keepdim=True)
    variance = (windows - mean).square().mean(-1, keepdim=True)
    shape = (*x.shape[:-1], 1)
    return mean.reshape(shape), torch.rsqrt(variance + eps).reshape(shape)


def _unweighted_merge_statistics(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """Rows wider than BLOCK: mean(x^2) as the plain mean of the blocks' means (a partial last block counts as a
    whole one). Must fail rms.forward."""
    d = x.shape[-1]
    if d <= BLOCK:
        return _rmsnorm_statistics(x, eps, storage)
    blocks = torch.stack([x[..., i:i + BLOCK].square().mean(-1, keepdim=True) for i in range(0, d, BLOCK)])
    return torch.zeros_like(x[..., :1]), torch.rsqrt(blocks.mean(0) + eps)


class _FirstBlockBackward(torch.autograd.Function):
    """LayerNorm (float32 inside) whose backward takes mean(g) and mean(g xhat) over the first BLOCK columns of a
    wider row: dx = rstd (g - mean(g) - xhat mean(g xhat)) with the wrong means. Must fail ln.jacobian."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float):
        mean, rstd = _layernorm_statistics(x.float(), eps, x.dtype)
        xhat = (x.float() - mean) * rstd
        y = xhat if weight is None else xhat * weight.float()
        y = y if bias is None else y + bias.float()
        ctx.save_for_backward(xhat, rstd, weight)
        ctx.input_dtype, ctx.has_bias = x.dtype, bias is not None
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        xhat, rstd, weight = ctx.saved_tensors
        dy32 = dy.float()
        g = dy32 if weight is None else dy32 * weight.float()
        span = slice(0, min(BLOCK, g.shape[-1]))
        dx = rstd * (g - g[..., span].mean(-1, keepdim=True)
                     - xhat * (g * xhat)[..., span].mean(-1, keepdim=True))
        rows = xhat.shape[-1]
        dweight = None if weight is None else (dy32 * xhat).reshape(-1, rows).sum(0).to(weight.dtype)
        dbias = dy32.reshape(-1, rows).sum(0).to(weight.dtype if weight is not None else dy.dtype) if ctx.has_bias \
            else None
        return dx.to(ctx.input_dtype), dweight, dbias, None


def layernorm_wide_tail_mask(x, weight, bias, eps):
    return _normalize(x, weight, bias, eps, _tail_mask_statistics)


def rmsnorm_wide_unweighted_merge(x, weight, eps):
    return _normalize(x, weight, None, eps, _unweighted_merge_statistics)


def layernorm_wide_backward_first_block(x, weight, bias, eps):
    return _FirstBlockBackward.apply(x, weight, bias, eps)


def _kernel(name: str, kind: str, fn, bug) -> Kernel:
    """The corpus kernel ``fn``, described by the docstring of ``bug``, the part of it that is broken."""
    return Kernel(name.lower(), kind, fn, spec=SPEC + name, description=" ".join(bug.__doc__.split()))


LN_WIDE_TAIL_MASK = _kernel("LN_WIDE_TAIL_MASK", "layernorm", layernorm_wide_tail_mask, _tail_mask_statistics)
RMS_WIDE_UNWEIGHTED_MERGE = _kernel("RMS_WIDE_UNWEIGHTED_MERGE", "rmsnorm", rmsnorm_wide_unweighted_merge,
                                    _unweighted_merge_statistics)
LN_WIDE_BACKWARD_FIRST_BLOCK = _kernel("LN_WIDE_BACKWARD_FIRST_BLOCK", "layernorm", layernorm_wide_backward_first_block,
                                       _FirstBlockBackward)
