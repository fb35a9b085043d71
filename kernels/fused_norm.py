"""Fused residual add + LayerNorm/RMSNorm in Triton, with optional dropout on the branch: forward and backward.

Over one row (the last dimension), for a branch x and the residual stream r:

    h = r + x                      (dropout: h = r + x * m / (1 - p), m_i = [rand(seed, i) >= p])
    residual_out = h, rounded once to the residual dtype (r's dtype, or float32 with residual_in_fp32)
    y = N(residual_out)            N = LayerNorm or RMSNorm of kernels/norm.py, over the stored h

so y normalizes exactly the residual stream the next layer receives. h is summed in float32 and rounded once;
the statistics are accumulated in float32 as in kernels/norm.py (two-pass blocks merged pairwise). The mask
index i is the element's row-major index in x's shape, as in kernels/dropout_kernel.py, so the same seed
gives the same mask there.

Backward, for upstream gradients dy = dL/dy and dh = dL/d(residual_out) (claim add_ln.jacobian):

    dresidual = J_N(h)^T dy + dh   (the norm's backward kernel with dh added before its one rounding)
    dx = dresidual                 (dropout: dx = m / (1 - p) * dresidual, the same mask)
    dweight, dbias                 the norm's, at h

dresidual and dx are written by the same launches (kernels/norm.py backward's ``branch``), each rounded once from
one float32 value to its input's dtype: two launches with dweight/dbias, dropout and differing dtypes included.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels import norm, rows
from kernels.dropout_kernel import SEED_MODULUS, dropped_out


@triton.jit
def _residual_block(
    X,  # pointer to the row's first element of the branch x, float32/float16/bfloat16
    R,  # pointer to the row's first element of the residual stream r, float32/float16/bfloat16
    H,  # pointer to the row's first element of the output residual_out (row-contiguous), in the residual dtype
    cols,  # int32 [BLOCK]: the block's column indices
    mask,  # bool [BLOCK]: cols < d, the block's columns that exist (the last block of a row is partial)
    stride_x_col,  # int: elements between two columns of X
    stride_r_col,  # int: elements between two columns of R
    first,  # int64: row-major index of the row's first element (the dropout mask's counter)
    p,  # float32: drop probability (used with HAS_DROPOUT)
    scale,  # float32: 1/(1 - p), the kept values' scale (used with HAS_DROPOUT)
    seed,  # int: Philox seed, mod 2^64 (used with HAS_DROPOUT)
    HAS_DROPOUT: tl.constexpr,  # bool: drop out the branch (p > 0)
):
    """h = r + x (or r + x m/(1-p)) for one block, in float32, stored rounded to H's dtype; returns the stored
    values in float32 (zeros where masked off)."""
    x = tl.load(X + cols * stride_x_col, mask=mask, other=0.0).to(tl.float32)
    if HAS_DROPOUT:
        x = dropped_out(x, first + cols, p, scale, seed)  # kernels/dropout_kernel.py's mask: same seed, same index
    # the sum in float32, rounded once to the residual dtype: y normalizes exactly this stored h
    h = (x + tl.load(R + cols * stride_r_col, mask=mask, other=0.0).to(tl.float32)).to(H.dtype.element_ty)
    tl.store(H + cols, h, mask=mask)
    return tl.where(mask, h.to(tl.float32), 0.0)  # masked-off lanes 0.0, so the statistics' sums ignore them


@triton.jit
def _add_norm_forward(
    X,  # pointer to the branch x, [n, d], any strides, float32/float16/bfloat16
    R,  # pointer to the residual stream r, [n, d], any strides, float32/float16/bfloat16 (X's dtype or another)
    H,  # pointer to the output residual_out = r + x, [n, d], row-contiguous, in the residual dtype (R's, or float32
    #     with residual_in_fp32)
    Y,  # pointer to the output y = N(h), [n, d], row-contiguous, X's dtype
    W,  # pointer to gamma, [d], contiguous, float32/float16/bfloat16; None without (HAS_WEIGHT False)
    B,  # pointer to beta, [d], contiguous, float32/float16/bfloat16; None without (HAS_BIAS False)
    Mean,  # pointer to the output mean of h, float32 [n], one per row; None for RMSNorm (never written)
    Rstd,  # pointer to the output rstd = 1/sqrt(var(h) + eps), float32 [n], one per row
    stride_x_row,  # int: elements between two rows of X
    stride_x_col,  # int: elements between two columns of X
    stride_r_row,  # int: elements between two rows of R
    stride_r_col,  # int: elements between two columns of R
    stride_h_row,  # int: elements between two rows of H
    stride_y_row,  # int: elements between two rows of Y
    n_cols,  # int: d, the row's width (the normalized dimension)
    eps,  # float32: added to the variance inside the root
    p,  # float32: the branch's drop probability (used with HAS_DROPOUT)
    scale,  # float32: 1/(1 - p), the kept values' scale (used with HAS_DROPOUT)
    seed,  # int: Philox seed, mod 2^64 (used with HAS_DROPOUT)
    IS_RMS: tl.constexpr,  # bool: RMSNorm (mean fixed at 0, Mean not written) instead of LayerNorm
    HAS_WEIGHT: tl.constexpr,  # bool: W given
    HAS_BIAS: tl.constexpr,  # bool: B given
    HAS_DROPOUT: tl.constexpr,  # bool: p > 0, drop out the branch before the add
    BLOCK: tl.constexpr,  # int, power of two: columns held at once (rows.LaunchConfig.block)
    SINGLE_BLOCK: tl.constexpr,  # bool: d <= BLOCK, h is normalized from registers, not re-read
):
    """One program per row: h block by block (stored, statistics merged), then y from the stored h; a row of one
    block (SINGLE_BLOCK) straight-line, y from h in registers. The statistics (count, mean, m2) are float32 scalars;
    the masks of the last, partial block are explicit in _residual_block, merge_block and store_normalized."""
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    X += row * stride_x_row
    R += row * stride_r_row
    H += row * stride_h_row
    Y += row * stride_y_row
    first = row * n_cols  # row-major index of the row's first element: the dropout mask's counter

    if SINGLE_BLOCK:  # no loop: the row's one block stays in registers from the add to y
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        h = _residual_block(X, R, H, cols, mask, stride_x_col, stride_r_col, first, p, scale, seed, HAS_DROPOUT)
        count, mean, m2 = norm.merge_block(0.0, 0.0, 0.0, h, mask, 0, n_cols, IS_RMS, BLOCK)
    else:
        count = 0.0  # float32 accumulators of the statistics of h (kernels.norm.merge_block)
        mean = 0.0
        m2 = 0.0
        for start in range(0, n_cols, BLOCK):
            block_cols = start + tl.arange(0, BLOCK)
            block_mask = block_cols < n_cols  # the last block is partial when BLOCK does not divide d
            block_h = _residual_block(X, R, H, block_cols, block_mask, stride_x_col, stride_r_col, first, p, scale,
                                      seed, HAS_DROPOUT)
            count, mean, m2 = norm.merge_block(count, mean, m2, block_h, block_mask, start, n_cols, IS_RMS, BLOCK)
    rstd = 1.0 / tl.sqrt(m2 / n_cols + eps)
    if not IS_RMS:
        tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)

    if SINGLE_BLOCK:  # the row's h is still in registers
        norm.store_normalized(Y, W, B, cols, mask, h, mean, rstd, HAS_WEIGHT, HAS_BIAS)
    else:
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            mask = cols < n_cols
            h = tl.load(H + cols, mask=mask, other=0.0).to(tl.float32)  # the stored, rounded h, read back
            norm.store_normalized(Y, W, B, cols, mask, h, mean, rstd, HAS_WEIGHT, HAS_BIAS)


def forward(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
            eps: float, *, rms: bool, residual_dtype: torch.dtype, p: float = 0.0, seed: int = 0,
            block: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """``(y, residual_out, mean, rstd)``: y in x's dtype, residual_out in ``residual_dtype``, both x's shape;
    mean (None for RMSNorm) and rstd float32 per row. ``p`` > 0 drops out x with the mask of ``seed``."""
    flat = x.dim() == 2
    x2, r2 = (x, residual) if flat else (rows.as_rows(x), rows.as_rows(residual))
    n_rows, n_cols = x2.shape
    h = torch.empty_like(x2, dtype=residual_dtype, memory_format=torch.contiguous_format)
    y = torch.empty_like(x2, memory_format=torch.contiguous_format)
    mean = None if rms else x2.new_empty(n_rows, dtype=torch.float32)
    rstd = x2.new_empty(n_rows, dtype=torch.float32)
    if n_rows and n_cols:
        block, warps = rows.block_and_warps(n_cols, x2.element_size(), x2.device, block)
        weight = None if weight is None else weight.contiguous()
        bias = None if bias is None else bias.contiguous()
        scale = 0.0 if p == 1.0 else 1.0 / (1.0 - p)
        rows.launch(
            _add_norm_forward, (n_rows,),
            x2, r2, h, y, weight, bias, mean, rstd,
            *x2.stride(), *r2.stride(), n_cols, n_cols,  # h's and y's row strides: both are contiguous
            n_cols, float(eps), float(p), scale, seed % SEED_MODULUS,
            IS_RMS=rms, HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None, HAS_DROPOUT=p > 0.0,
            BLOCK=block, SINGLE_BLOCK=n_cols <= block, num_warps=warps,
        )
    if not flat:
        y, h = y.view(x.shape), h.view(x.shape)
    return y, h, mean, rstd


class _AddNormFunction(torch.autograd.Function):
    """(y, residual_out) = (N(h), h), h = residual + x (dropped out with p > 0); backward as in the module doc."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None,
                bias: torch.Tensor | None, eps: float, rms: bool, residual_in_fp32: bool, p: float, seed: int):
        y, h, mean, rstd = forward(x, residual, weight, bias, eps, rms=rms,
                                   residual_dtype=_residual_dtype(residual, residual_in_fp32), p=p, seed=seed)
        ctx.save_for_backward(h, weight, mean, rstd)
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None, not a launch of zeros
        ctx.rms, ctx.p, ctx.seed = rms, p, seed
        ctx.dtypes = (x.dtype, residual.dtype)
        return y, h

    @staticmethod
    def backward(ctx, dy: torch.Tensor | None, dh: torch.Tensor | None):
        h, weight, mean, rstd = ctx.saved_tensors
        x_dtype, residual_dtype = ctx.dtypes
        if dy is None:  # only residual_out was used (dy = 0): rare, so no kernel variant for it
            dy = torch.zeros(h.shape, dtype=x_dtype, device=h.device)
        # J^T dy + dh in float32, rounded once to each input's dtype by the same launches: the residual's gradient
        # as norm.backward's dx, the branch's as its second output (masked and scaled with dropout); one tensor for
        # both where their dtypes agree and nothing was dropped
        separate = x_dtype != residual_dtype or ctx.p > 0.0
        branch = torch.empty(h.shape, dtype=x_dtype, device=h.device) if separate else None
        total, dweight, dbias = norm.backward(dy, h, weight, mean, rstd, rms=ctx.rms,
                                              need_dw=ctx.needs_input_grad[2], need_db=ctx.needs_input_grad[3],
                                              dresidual=dh, dx_dtype=residual_dtype, branch=branch, p=ctx.p,
                                              seed=ctx.seed)
        return (total if branch is None else branch, total, dweight, dbias, None, None, None, None, None)


_ADD_NORM_APPLY = rows.c_apply(_AddNormFunction)


def _residual_dtype(residual: torch.Tensor, residual_in_fp32: bool) -> torch.dtype:
    return torch.float32 if residual_in_fp32 else residual.dtype


def _add_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
              eps: float, rms: bool, residual_in_fp32: bool, p: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, residual_out): through :class:`_AddNormFunction` when autograd records, else the forward kernel alone."""
    mode = rows.graph_mode(x, residual, weight, bias)
    if mode == rows.NO_GRAPH:
        residual_dtype = _residual_dtype(residual, residual_in_fp32)
        return forward(x, residual, weight, bias, eps, rms=rms, residual_dtype=residual_dtype, p=p, seed=seed)[:2]
    apply = _ADD_NORM_APPLY if mode == rows.RECORD else _AddNormFunction.apply
    return apply(x, residual, weight, bias, eps, rms, residual_in_fp32, p, seed)


def _check_inputs(op: str, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None,
                  bias: torch.Tensor | None) -> None:
    if rows.inputs_ok(x, (weight, bias), (residual,)):
        return
    rows.check_tensor(op, "x", x)
    rows.check_tensor(op, "residual", residual, like=x)
    if x.dim() == 0:
        raise ValueError(f"{op}: x must have at least one dimension")
    if residual.shape != x.shape:
        raise ValueError(f"{op}: residual has shape {tuple(residual.shape)}, x {tuple(x.shape)}; they must match")
    rows.check_param(op, "weight", weight, x)
    rows.check_param(op, "bias", bias, x)


def add_layer_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None,
                   bias: torch.Tensor | None, eps: float = 1e-5, residual_in_fp32: bool = False,
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """(LayerNorm(h), h) with h = x + residual (kept in float32 with ``residual_in_fp32``, else residual's dtype)."""
    _check_inputs("add_layer_norm", x, residual, weight, bias)
    return _add_norm(x, residual, weight, bias, eps, False, residual_in_fp32, 0.0, 0)


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6,
                 residual_in_fp32: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(RMSNorm(h), h) with h = x + residual (kept in float32 with ``residual_in_fp32``, else residual's dtype)."""
    _check_inputs("add_rms_norm", x, residual, weight, None)
    return _add_norm(x, residual, weight, None, eps, True, residual_in_fp32, 0.0, 0)


def dropout_add_layer_norm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None,
                           bias: torch.Tensor | None, eps: float, p: float, seed: int,
                           residual_in_fp32: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(LayerNorm(h), h) with h = residual + dropout(x, p, seed) (inverted dropout, kernels.dropout's mask)."""
    _check_inputs("dropout_add_layer_norm", x, residual, weight, bias)
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout_add_layer_norm: p must be in [0, 1), got {p}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"dropout_add_layer_norm: seed must be an int, not {type(seed).__name__}")
    return _add_norm(x, residual, weight, bias, eps, False, residual_in_fp32, float(p), seed)
