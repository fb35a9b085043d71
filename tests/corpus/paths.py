"""Broken kernels that are right on the shapes most tests draw and wrong on a path the kernel takes by shape: a
vectorized loop for widths that are multiples of 8, the last partial block of rows of a program that handles several,
a large-batch kernel chosen by the row count (as inference stacks choose one by num_tokens). A red-team session wrote
their like without seeing this corpus, and the suite passed them: widths were odd or powers of two, row counts 1-4,
64, 128 and 65 537 (one past a power of two), large batches float32 only. Each is the textbook float32 computation,
rounded once, but for its bug; each docstring names the claim that must catch it.

    LN_VECTOR_TAIL_DROPPED             d % 8 == 0 and d >= 256: the last partial step of 256 columns never loaded
                                                                                            -> ln.forward
    LN_PARTIAL_ROW_BLOCK_SHARES_RSTD   16 rows a program: the rows of a partial last block use its first row's rstd
                                                                                            -> ln.forward (at scale)
    RMS_LARGE_BATCH_STORAGE_SUM        1 024 rows or more: the sum of squares in x's 16-bit dtype
                                                                                            -> rms.forward (at scale)
    GN_LARGE_BATCH_GROUPS_STRIDED      1 024 samples or more: channel c in group c mod G, not c // (C / G)
                                                                                            -> gn.forward (at scale)
    LN_INFERENCE_PATH_EPS_OUTSIDE_ROOT grad mode off (no_grad, inference_mode): rstd = 1 / (sqrt(var) + eps)
                                                                                            -> ln.forward
    ADD_RMS_INFERENCE_PATH_STORAGE_SUM grad mode off: the sum of squares of residual_out in its 16-bit dtype
                                                                                            -> add_rms.forward
    GN_BATCH_ONE_UNBIASED              one sample (batch-1 inference): the unbiased variance     -> gn.forward
    RMS_TAIL_BLOCK_OVERREAD            blocks of 2048: a last partial block a multiple of 16 wide loaded unmasked,
                                       its sum of squares taking the next row's first columns    -> rms.forward
    RMS_WIDE_CHUNKS_UNWEIGHTED         rows wider than 16384: the chunks' mean squares averaged as if equal
                                                                                            -> rms.forward
"""

from __future__ import annotations

import torch

from core.registry import Kernel
from corpus.groupnorm import refuse_invalid_groups

SPEC = "tests/corpus/paths.py:"
VECTOR_STEP = 256  # columns a warp loads per step on the vectorized path: 32 lanes x 8 values
ROWS_PER_PROGRAM = 16
LARGE_BATCH = 1024  # rows (samples) from which the large-batch kernel runs


def _affine(y: torch.Tensor, weight, bias, shape: tuple[int, ...]) -> torch.Tensor:
    y = y if weight is None else y * weight.float().reshape(shape)
    return y if bias is None else y + bias.float().reshape(shape)


def layernorm_vector_tail_dropped(x, weight, bias, eps):
    """LayerNorm whose vectorized path (d a multiple of 8, d >= 256) steps 256 columns at a time, (d // 256) steps:
    the last d mod 256 columns are left out of the mean and the variance (divided by d all the same). Must fail
    ln.forward."""
    h = x.float()
    d = h.shape[-1]
    read = h[..., : d // VECTOR_STEP * VECTOR_STEP] if d % 8 == 0 and d >= VECTOR_STEP else h
    mean = read.sum(-1, keepdim=True) / d
    var = (read - mean).square().sum(-1, keepdim=True) / d
    return _affine((h - mean) * torch.rsqrt(var + eps), weight, bias, (-1,)).to(x.dtype)


def layernorm_partial_row_block_shares_rstd(x, weight, bias, eps):
    """LayerNorm run 16 rows to a program: in a partial last block of more than one row, every row is scaled by the
    rstd of the block's first row (a broadcast from the wrong lane); the statistics of full blocks are right. Must
    fail ln.forward and ln.jacobian (its autograd follows the wrong forward)."""
    h = x.float().reshape(-1, x.shape[-1])
    mean = h.mean(-1, keepdim=True)
    rstd = torch.rsqrt((h - mean).square().mean(-1, keepdim=True) + eps)
    tail = h.shape[0] % ROWS_PER_PROGRAM
    if h.shape[0] > ROWS_PER_PROGRAM and tail > 1:
        rstd = torch.cat([rstd[:-tail], rstd[-tail:][:1].expand(tail, 1)])
    return _affine((h - mean) * rstd, weight, bias, (-1,)).reshape(x.shape).to(x.dtype)


def rmsnorm_large_batch_storage_sum(x, weight, eps):
    """RMSNorm whose large-batch kernel (1 024 rows or more) sums the squares in x's dtype: in float16 or bfloat16
    the mean of squares loses precision (the small-batch kernel accumulates in float32). Must fail rms.forward."""
    rows = x.numel() // max(x.shape[-1], 1)
    h = x.float()
    if rows >= LARGE_BATCH and x.dtype in (torch.float16, torch.bfloat16):
        mean_square = x.square().sum(-1, keepdim=True, dtype=x.dtype).float() / x.shape[-1]
    else:
        mean_square = h.square().mean(-1, keepdim=True)
    return _affine(h * torch.rsqrt(mean_square + eps), weight, None, (-1,)).to(x.dtype)


def groupnorm_large_batch_groups_strided(x, num_groups, weight, bias, eps):
    """GroupNorm whose large-batch kernel (1 024 samples or more) puts channel c in group c mod G instead of the
    contiguous block c // (C / G) (one group or one channel a group is the same either way). Must fail gn.forward
    and gn.jacobian."""
    refuse_invalid_groups(x, num_groups)
    n, c = x.shape[:2]
    h = x.float().reshape(n, c, -1)
    order = torch.arange(c, device=x.device)
    if n >= LARGE_BATCH and 1 < num_groups < c:
        order = order.reshape(c // num_groups, num_groups).t().reshape(-1)
    grouped = h[:, order].reshape(n, num_groups, -1)
    mean = grouped.mean(-1, keepdim=True)
    normalized = ((grouped - mean) * torch.rsqrt((grouped - mean).square().mean(-1, keepdim=True) + eps))
    y = torch.empty_like(h)
    y[:, order] = normalized.reshape(n, c, -1)
    return _affine(y, weight, bias, (1, c, 1)).reshape(x.shape).to(x.dtype)


def layernorm_inference_path_eps_outside_root(x, weight, bias, eps):
    """LayerNorm whose inference path (grad mode off: torch.no_grad() or torch.inference_mode(), as a serving stack
    calls it) computes rstd = 1 / (sqrt(var) + eps); with grad mode on it is right. Must fail ln.forward."""
    h = x.float()
    mean = h.mean(-1, keepdim=True)
    var = (h - mean).square().mean(-1, keepdim=True)
    rstd = torch.rsqrt(var + eps) if torch.is_grad_enabled() else 1.0 / (var.sqrt() + eps)
    return _affine((h - mean) * rstd, weight, bias, (-1,)).to(x.dtype)


def add_rmsnorm_inference_path_storage_sum(x, residual, weight, eps):
    """Fused add + RMSNorm (residual_out = x + residual in the residual's dtype) whose inference path (grad mode off)
    sums the squares of residual_out in its 16-bit dtype; with grad mode on, in float32. Must fail add_rms.forward."""
    h = (x + residual).to(residual.dtype)
    if torch.is_grad_enabled() or h.dtype == torch.float32:
        mean_square = h.float().square().mean(-1, keepdim=True)
    else:
        mean_square = h.square().sum(-1, keepdim=True, dtype=h.dtype).float() / h.shape[-1]
    return _affine(h.float() * torch.rsqrt(mean_square + eps), weight, None, (-1,)).to(x.dtype), h


def groupnorm_batch_one_unbiased(x, num_groups, weight, bias, eps):
    """GroupNorm whose batch-1 path (one sample: the inference of one image) divides the squared deviations by
    n - 1 (the unbiased variance); with two samples or more it is right. Must fail gn.forward."""
    refuse_invalid_groups(x, num_groups)
    n, c = x.shape[:2]
    h = x.float().reshape(n, num_groups, -1)
    mean = h.mean(-1, keepdim=True)
    squares = (h - mean).square().sum(-1, keepdim=True)
    var = squares / max(h.shape[-1] - 1, 1) if n == 1 else squares / h.shape[-1]
    y = ((h - mean) * torch.rsqrt(var + eps)).reshape(n, c, -1)
    return _affine(y, weight, bias, (1, c, 1)).reshape(x.shape).to(x.dtype)


TAIL_BLOCK = 2048


def rmsnorm_tail_block_overread(x, weight, eps):
    """RMSNorm in blocks of 2048 columns whose last partial block, when a multiple of 16 wide (the vectorized case),
    is loaded without its mask: the sum of squares takes in the next row's first 2048 - tail columns (zeros past the
    tensor's end). Must fail rms.forward."""
    d = x.shape[-1]
    h = x.float().reshape(-1, d)
    sum_squares = h.square().sum(-1, keepdim=True)
    tail = d % TAIL_BLOCK
    if d > TAIL_BLOCK and tail and tail % 16 == 0:
        following = torch.cat([h.reshape(-1)[d:], h.new_zeros(TAIL_BLOCK)])
        over = torch.stack([following[r * d: r * d + TAIL_BLOCK - tail] for r in range(h.shape[0])])
        sum_squares = sum_squares + over.square().sum(-1, keepdim=True)
    y = h * torch.rsqrt(sum_squares / d + eps)
    return _affine(y, weight, None, (-1,)).reshape(x.shape).to(x.dtype)


WIDE_CHUNK = 16384


def rmsnorm_wide_chunks_unweighted(x, weight, eps):
    """RMSNorm whose rows wider than 16384 are reduced in chunks of 16384 (a two-stage reduction) whose mean squares
    are averaged with equal weights, a partial last chunk weighing as much as a whole one. Must fail rms.forward."""
    h = x.float()
    d = h.shape[-1]
    if d > WIDE_CHUNK:
        chunks = [h[..., start:start + WIDE_CHUNK].square().mean(-1, keepdim=True) for start in range(0, d, WIDE_CHUNK)]
        mean_square = torch.stack(chunks).mean(0)
    else:
        mean_square = h.square().mean(-1, keepdim=True)
    return _affine(h * torch.rsqrt(mean_square + eps), weight, None, (-1,)).to(x.dtype)


def _kernel(attr: str, kind: str, fn) -> Kernel:
    return Kernel(attr.lower(), kind, fn, spec=SPEC + attr, description=" ".join(fn.__doc__.split()))


LN_VECTOR_TAIL_DROPPED = _kernel("LN_VECTOR_TAIL_DROPPED", "layernorm", layernorm_vector_tail_dropped)
LN_PARTIAL_ROW_BLOCK_SHARES_RSTD = _kernel("LN_PARTIAL_ROW_BLOCK_SHARES_RSTD", "layernorm",
                                           layernorm_partial_row_block_shares_rstd)
RMS_LARGE_BATCH_STORAGE_SUM = _kernel("RMS_LARGE_BATCH_STORAGE_SUM", "rmsnorm", rmsnorm_large_batch_storage_sum)
GN_LARGE_BATCH_GROUPS_STRIDED = _kernel("GN_LARGE_BATCH_GROUPS_STRIDED", "groupnorm",
                                        groupnorm_large_batch_groups_strided)
LN_INFERENCE_PATH_EPS_OUTSIDE_ROOT = _kernel("LN_INFERENCE_PATH_EPS_OUTSIDE_ROOT", "layernorm",
                                             layernorm_inference_path_eps_outside_root)
ADD_RMS_INFERENCE_PATH_STORAGE_SUM = _kernel("ADD_RMS_INFERENCE_PATH_STORAGE_SUM", "add_rmsnorm",
                                             add_rmsnorm_inference_path_storage_sum)
GN_BATCH_ONE_UNBIASED = _kernel("GN_BATCH_ONE_UNBIASED", "groupnorm", groupnorm_batch_one_unbiased)
RMS_TAIL_BLOCK_OVERREAD = _kernel("RMS_TAIL_BLOCK_OVERREAD", "rmsnorm", rmsnorm_tail_block_overread)
RMS_WIDE_CHUNKS_UNWEIGHTED = _kernel("RMS_WIDE_CHUNKS_UNWEIGHTED", "rmsnorm", rmsnorm_wide_chunks_unweighted)
