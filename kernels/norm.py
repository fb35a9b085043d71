"""LayerNorm and RMSNorm in Triton: forward, and backward to x, gamma and beta.

Over one row x in R^d (the last dimension), with eps added inside the root, in float32:

    LayerNorm: mu = mean(x), sigma^2 = mean((x - mu)^2),  xhat = (x - mu) / sqrt(sigma^2 + eps)
    RMSNorm:   mu = 0,       sigma^2 = mean(x^2),         xhat = x / sqrt(sigma^2 + eps)
    y = gamma * xhat + beta            (gamma, beta optional; RMSNorm has no beta)

Backward, for an upstream gradient dy and g = gamma * dy, with rstd = 1/sqrt(sigma^2 + eps):

    LayerNorm: dx = rstd * (g - xhat * mean(g * xhat) - mean(g))
    RMSNorm:   dx = rstd * (g - xhat * mean(g * xhat))
    dgamma = sum over rows of dy * xhat,    dbeta = sum over rows of dy

Both norms share these kernels (``IS_RMS`` is a compile-time switch: mu is fixed at 0). Storage may be
float32, float16 or bfloat16; every sum is accumulated in float32 and the statistics (mean, rstd) are
saved in float32. The variance is never E[x^2] - E[x]^2: the forward is two-pass over the whole row (its
mean, then the squares of the deviations from it, as in Triton's tutorial 05), so rows with |mean|/std of 1e4
keep a float32-accurate variance. (merge_block, the fused residual-add kernel's form, which sees each block once:
each block two-pass, blocks merged with Chan, Golub and LeVeque's pairwise update.)
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels import rows
from kernels.dropout_kernel import SEED_MODULUS, dropped_out


@triton.jit
def store_normalized(
    Y,  # pointer to the row's first output element (row-contiguous: column c at Y + c), in the output dtype
    W,  # pointer to gamma, [d], contiguous, float32/float16/bfloat16; unused unless HAS_WEIGHT
    B,  # pointer to beta, [d], contiguous, float32/float16/bfloat16; unused unless HAS_BIAS
    cols,  # int32 [BLOCK]: the block's column indices
    mask,  # bool [BLOCK]: cols < d, the block's columns that exist (the last block of a row is partial)
    x,  # float32 [BLOCK]: the block's inputs (values where masked off are not stored)
    mean,  # float32 scalar: the row's mean (0.0 for RMSNorm)
    rstd,  # float32 scalar: 1 / sqrt(var + eps)
    HAS_WEIGHT: tl.constexpr,  # bool: multiply by gamma (False: W is None, gamma = 1)
    HAS_BIAS: tl.constexpr,  # bool: add beta (False: B is None, beta = 0)
):
    """Y[cols] = (x - mean) * rstd * gamma + beta, computed in float32, rounded once to Y's dtype."""
    y = (x - mean) * rstd  # float32
    if HAS_WEIGHT:  # masked-off lanes load 0.0 and are not stored
        y = y * tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        y = y + tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + cols, y.to(Y.dtype.element_ty), mask=mask)  # the one rounding, to the output dtype


@triton.jit
def merge_block(
    count,  # float32 scalar: columns of the row merged so far (unused for RMSNorm)
    mean,  # float32 scalar: their mean (stays 0.0 for RMSNorm)
    m2,  # float32 scalar: their sum of squared deviations from mean (RMSNorm: their sum of squares)
    x,  # float32 [BLOCK]: the block row[start:start + BLOCK], 0.0 where masked off
    mask,  # bool [BLOCK]: the block's columns < d
    start,  # int: the block's first column
    n_cols,  # int: d, the row's width
    IS_RMS: tl.constexpr,  # bool: RMSNorm (sum of squares, mean fixed at 0) instead of LayerNorm
    BLOCK: tl.constexpr,  # int, power of two: columns per block
):
    """(count, mean, m2) of a row so far merged with the block x = row[start:start + BLOCK] (float32, zeros where
    masked off), for a kernel that sees each block once (kernels/fused_norm.py). RMSNorm: m2 += sum(x^2), mean stays
    0. LayerNorm: the block two-pass (its mean, then its squared deviations), merged by Chan et al.'s pairwise
    update. Every sum is in float32."""
    if IS_RMS:
        m2 += tl.sum(x * x, axis=0)  # masked-off lanes are 0.0 and add nothing
    else:
        block_count = tl.minimum(n_cols - start, BLOCK).to(tl.float32)  # the existing columns, not BLOCK
        block_mean = tl.sum(x, axis=0) / block_count
        deviation = tl.where(mask, x - block_mean, 0.0)  # masked-off lanes would add block_mean^2
        block_m2 = tl.sum(deviation * deviation, axis=0)
        total = count + block_count
        delta = block_mean - mean
        mean += delta * (block_count / total)
        m2 += block_m2 + delta * delta * (count * block_count / total)
        count = total
    return count, mean, m2


@triton.jit
def _load_row_block(
    X,  # pointer to the row's first input element, float32/float16/bfloat16
    start,  # int: the block's first column
    stride_x_col,  # int: elements between two columns of X
    n_cols,  # int: d, the row's width
    BLOCK: tl.constexpr,  # int, power of two: columns per block
):
    """(cols, mask, x) of the block row[start:start + BLOCK]: x in float32, zeros where masked off."""
    cols = start + tl.arange(0, BLOCK)
    mask = cols < n_cols  # the last block of a row is partial when BLOCK does not divide d
    return cols, mask, tl.load(X + cols * stride_x_col, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _squared_deviations(
    x,  # float32 [BLOCK]: a block of the row
    mask,  # bool [BLOCK]: the block's columns < d
    mean,  # float32 scalar: the row's mean (0.0 for RMSNorm)
):
    """(x - mean)^2 in float32, 0 where masked off (RMSNorm: mean = 0, so x^2)."""
    deviation = tl.where(mask, x - mean, 0.0)  # masked-off lanes hold 0.0, whose deviation would be -mean
    return deviation * deviation


@triton.jit
def _norm_forward(
    X,  # pointer to the input x, [n, d], any strides, float32/float16/bfloat16
    Y,  # pointer to the output y, [n, d], row-contiguous (column stride 1), X's dtype
    W,  # pointer to gamma, [d], contiguous, float32/float16/bfloat16; None without (HAS_WEIGHT False)
    B,  # pointer to beta, [d], contiguous, float32/float16/bfloat16; None without (HAS_BIAS False)
    Mean,  # pointer to the output mean, float32 [n], one per row; None for RMSNorm (never written)
    Rstd,  # pointer to the output rstd = 1/sqrt(var + eps), float32 [n], one per row
    stride_x_row,  # int: elements between two rows of X
    stride_x_col,  # int: elements between two columns of X
    stride_y_row,  # int: elements between two rows of Y
    n_cols,  # int: d, the row's width (the normalized dimension)
    eps,  # float32: added to the variance inside the root
    IS_RMS: tl.constexpr,  # bool: RMSNorm (mean fixed at 0, Mean not written) instead of LayerNorm
    HAS_WEIGHT: tl.constexpr,  # bool: W given
    HAS_BIAS: tl.constexpr,  # bool: B given
    BLOCK: tl.constexpr,  # int, power of two: columns held at once (rows.LaunchConfig.block)
    SINGLE_BLOCK: tl.constexpr,  # bool: d <= BLOCK, the row is loaded once
):
    """One program per row, two-pass over the whole row as in Triton's tutorial 05: the mean, then the squared
    deviations from it, then y. A row that is a single block (SINGLE_BLOCK = d <= BLOCK) is loaded once and the three
    passes run on its registers, straight-line. A wider row: each sum adds the row's blocks into a float32 vector of
    BLOCK lanes, one block after another, and reduces the lanes once with tl.sum; its first block is loaded once for
    both sums, and y reads the row again.

    Launch (kernels.rows.launch_config): grid (n,), BLOCK = its forward_block, num_warps by the rule there."""
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    X += row * stride_x_row
    Y += row * stride_y_row

    # Pass 1 (LayerNorm): mean = sum(x) / d; RMSNorm: mean = 0. The lanes are float32 whatever X's dtype, and the
    # masked-off lanes of the last block are loaded as 0.0, so they add nothing.
    cols, mask, x = _load_row_block(X, 0, stride_x_col, n_cols, BLOCK)
    mean = 0.0
    if SINGLE_BLOCK:  # no loops: the block stays in registers through all three passes
        if not IS_RMS:
            mean = tl.sum(x, axis=0) / n_cols
            tl.store(Mean + row, mean)
        rstd = 1.0 / tl.sqrt(tl.sum(_squared_deviations(x, mask, mean), axis=0) / n_cols + eps)
        tl.store(Rstd + row, rstd)
        store_normalized(Y, W, B, cols, mask, x, mean, rstd, HAS_WEIGHT, HAS_BIAS)
    else:
        if not IS_RMS:
            lanes = x
            for start in range(BLOCK, n_cols, BLOCK):
                lanes += _load_row_block(X, start, stride_x_col, n_cols, BLOCK)[2]
            mean = tl.sum(lanes, axis=0) / n_cols
            tl.store(Mean + row, mean)

        # Pass 2: m2 = sum((x - mean)^2) the same way (float32 lanes, masked-off lanes 0.0); rstd = 1/sqrt(m2/d + eps).
        lanes = _squared_deviations(x, mask, mean)
        for start in range(BLOCK, n_cols, BLOCK):
            _, block_mask, block = _load_row_block(X, start, stride_x_col, n_cols, BLOCK)
            lanes += _squared_deviations(block, block_mask, mean)
        rstd = 1.0 / tl.sqrt(tl.sum(lanes, axis=0) / n_cols + eps)
        tl.store(Rstd + row, rstd)

        # Pass 3: y = (x - mean) * rstd * gamma + beta in float32, stored with the mask, rounded once to Y's dtype.
        for start in range(0, n_cols, BLOCK):
            cols, mask, x = _load_row_block(X, start, stride_x_col, n_cols, BLOCK)
            store_normalized(Y, W, B, cols, mask, x, mean, rstd, HAS_WEIGHT, HAS_BIAS)


@triton.jit
def _load_block(
    x_row,  # pointer to the row's first element of the forward's input x, float32/float16/bfloat16
    dy_row,  # pointer to the row's first element of the upstream gradient dy, float32/float16/bfloat16
    W,  # pointer to gamma, [d], contiguous; unused unless HAS_WEIGHT
    cols,  # int32 [BLOCK]: the block's column indices
    mask,  # bool [BLOCK]: cols < d
    stride_x_col,  # int: elements between two columns of x
    stride_dy_col,  # int: elements between two columns of dy
    mean,  # float32 scalar: the row's saved mean (0.0 for RMSNorm)
    rstd,  # float32 scalar: the row's saved 1/sqrt(var + eps)
    HAS_WEIGHT: tl.constexpr,  # bool: g = gamma * dy (False: g = dy)
):
    """One block of a row in float32: (dy, g = gamma * dy, xhat = (x - mean) * rstd); zeros where masked off."""
    x = tl.load(x_row + cols * stride_x_col, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_row + cols * stride_dy_col, mask=mask, other=0.0).to(tl.float32)
    g = dy
    if HAS_WEIGHT:
        g = dy * tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    xhat = tl.where(mask, (x - mean) * rstd, 0.0)  # masked-off x is 0.0, whose xhat would be -mean * rstd
    return dy, g, xhat


@triton.jit
def _store_input_grad(
    dx_row,  # pointer to the row's first element of the output dx (row-contiguous), in dx's dtype
    dres_row,  # pointer to the row's first element of dres (float32/float16/bfloat16); unused unless HAS_DRES
    branch_row,  # pointer to the row's first element of the branch's gradient (row-contiguous); unless HAS_BRANCH
    cols,  # int32 [BLOCK]: the block's column indices
    mask,  # bool [BLOCK]: cols < d; only these are read and stored
    stride_dres_col,  # int: elements between two columns of dres
    g,  # float32 [BLOCK]: gamma * dy
    xhat,  # float32 [BLOCK]: (x - mean) * rstd
    c_xhat,  # float32 scalar: mean(g * xhat) over the row
    c_one,  # float32 scalar: mean(g) over the row (0.0 for RMSNorm)
    rstd,  # float32 scalar: the row's 1/sqrt(var + eps)
    first,  # int64 scalar: row-major index of the row's first element (the dropout mask's counter)
    p,  # float32: drop probability (used with HAS_DROPOUT)
    scale,  # float32: 1/(1 - p) (used with HAS_DROPOUT)
    seed,  # int: Philox seed, mod 2^64 (used with HAS_DROPOUT)
    HAS_DRES: tl.constexpr,  # bool: add dres (the fused residual add's dL/dh) before the rounding
    HAS_BRANCH: tl.constexpr,  # bool: also store the fused add's branch gradient (dropped out with HAS_DROPOUT)
    HAS_DROPOUT: tl.constexpr,  # bool: the branch was dropped out in the forward (p > 0)
):
    """dx[cols] = rstd (g - xhat c_xhat - c_one) (+ dres[cols]), in float32, rounded once to dx's dtype; with
    HAS_BRANCH, the branch's gradient: that float32 value (times m / (1 - p) with HAS_DROPOUT, the forward's mask)
    rounded once to its own dtype."""
    dx = (g - (xhat * c_xhat + c_one)) * rstd
    if HAS_DRES:
        dx += tl.load(dres_row + cols * stride_dres_col, mask=mask, other=0.0).to(tl.float32)
    tl.store(dx_row + cols, dx.to(dx_row.dtype.element_ty), mask=mask)
    if HAS_BRANCH:
        branch = dx
        if HAS_DROPOUT:
            branch = dropped_out(dx, first + cols, p, scale, seed)  # the forward's mask: same seed, same index
        tl.store(branch_row + cols, branch.to(branch_row.dtype.element_ty), mask=mask)


@triton.jit
def _norm_backward_input(
    X,  # pointer to the forward's input x, [n, d], any strides, float32/float16/bfloat16
    DY,  # pointer to the upstream gradient dy, [n, d], any strides, float32/float16/bfloat16
    DX,  # pointer to the output dx, [n, d], row-contiguous, in x's dtype (float32 where fused_norm's backward
    #      asks for it: x and the residual in different dtypes, or dropout after)
    W,  # pointer to gamma, [d], contiguous, float32/float16/bfloat16; None without (HAS_WEIGHT False)
    Mean,  # pointer to the forward's mean, float32 [n]; None for RMSNorm (never read)
    Rstd,  # pointer to the forward's rstd, float32 [n]
    Partials,  # pointer to the output partial sums, float32 [(FUSE_DW + FUSE_DB) * n_programs, d]: the programs'
    #            dgamma rows, then their dbeta rows; None when neither FUSE_DW nor FUSE_DB
    DRES,  # pointer to dres, [n, d], any strides: a gradient added to dx before its rounding (the fused residual
    #        add's dL/dh); None without (HAS_DRES False)
    Coeffs,  # pointer to the output row coefficients, float32: c_xhat of every row [n], then (LayerNorm) c_one of
    #          every row [n]; None unless ROW_COEFFS
    BRANCH,  # pointer to the output gradient of the fused add's branch x, [n, d], row-contiguous like DX, in x's
    #          dtype (dropped out with HAS_DROPOUT); None unless HAS_BRANCH
    stride_x_row,  # int: elements between two rows of X
    stride_x_col,  # int: elements between two columns of X
    stride_dy_row,  # int: elements between two rows of DY
    stride_dy_col,  # int: elements between two columns of DY
    stride_dx_row,  # int: elements between two rows of DX
    stride_dres_row,  # int: elements between two rows of DRES (0 without)
    stride_dres_col,  # int: elements between two columns of DRES (0 without)
    n_rows,  # int: n, X's rows
    n_cols,  # int: d, the row's width
    p,  # float32: the forward's drop probability of the branch (used with HAS_DROPOUT)
    scale,  # float32: 1/(1 - p) (used with HAS_DROPOUT)
    seed,  # int: the forward's Philox seed, mod 2^64 (used with HAS_DROPOUT)
    IS_RMS: tl.constexpr,  # bool: RMSNorm (mean = 0, no mean(g) term) instead of LayerNorm
    HAS_WEIGHT: tl.constexpr,  # bool: W given (g = gamma * dy; else g = dy)
    HAS_DRES: tl.constexpr,  # bool: DRES given
    HAS_BRANCH: tl.constexpr,  # bool: BRANCH given: the fused add's branch gradient, in its own dtype
    HAS_DROPOUT: tl.constexpr,  # bool: the branch was dropped out (p > 0): its gradient is masked and scaled
    FUSE_DW: tl.constexpr,  # bool: write the programs' dgamma partial sums (SINGLE_BLOCK only)
    FUSE_DB: tl.constexpr,  # bool: write the programs' dbeta partial sums (SINGLE_BLOCK only)
    ROW_COEFFS: tl.constexpr,  # bool: store each row's c_xhat, c_one in Coeffs instead of writing dx (then
    #                            _norm_backward_columns writes dx and sums dgamma/dbeta)
    BLOCK: tl.constexpr,  # int, power of two: columns held at once (rows.LaunchConfig.block)
    SINGLE_BLOCK: tl.constexpr,  # bool: d <= BLOCK, the row is read once
):
    """dx, row by row; each program takes rows program, program + n_programs, ...

    With HAS_DRES, dx = J^T dy + dres: the gradient reaching the input of a fused residual add, whose sum
    h = x + residual is both normalized and returned (dres = dL/dh), added before the one rounding to DX.

    A row that fits one block (SINGLE_BLOCK) is read once. Then, with FUSE_DW / FUSE_DB, the program also
    accumulates its rows' dy * xhat / dy in registers and writes them as its row of the partial-sum buffer.
    A wider row is read twice: once for its sums c_xhat = mean(g * xhat), c_one = mean(g), which every element of
    dx needs, once for dx. With ROW_COEFFS only the first read is done here and the coefficients stored, so that
    the second read (by _norm_backward_columns) also sums dgamma/dbeta.

    Launch (kernels.rows.launch_config): BLOCK its rms_ or layernorm_backward_block, num_warps
    rows.backward_num_warps; grid
    (min(n, 4 x SMs),), one program per SM for a block wider than 8192 (rows.persistent_programs).
    """
    program = tl.program_id(0)
    n_programs = tl.num_programs(0)
    if FUSE_DW or FUSE_DB:  # this program's partial sums of dgamma, dbeta: float32 accumulators, one lane a column
        param_cols = tl.arange(0, BLOCK)
        dw_acc = tl.zeros([BLOCK], dtype=tl.float32)
        db_acc = tl.zeros([BLOCK], dtype=tl.float32)

    for row in range(program, n_rows, n_programs):
        x_row = X + row.to(tl.int64) * stride_x_row  # int64: row * stride can pass 2^31 elements
        dy_row = DY + row.to(tl.int64) * stride_dy_row
        dx_row = DX + row.to(tl.int64) * stride_dx_row
        dres_row = DRES
        if HAS_DRES:
            dres_row = DRES + row.to(tl.int64) * stride_dres_row
        branch_row = BRANCH
        if HAS_BRANCH:
            branch_row = BRANCH + row.to(tl.int64) * stride_dx_row
        first = row.to(tl.int64) * n_cols  # the row-major index of the row's first element
        mean = 0.0 if IS_RMS else tl.load(Mean + row)
        rstd = tl.load(Rstd + row)

        # Pass 1: the row's sums of g * xhat and of g, with g = gamma * dy, in float32 (masked-off lanes are 0.0).
        if SINGLE_BLOCK:  # no loop: the one block stays in registers for pass 2
            cols = tl.arange(0, BLOCK)
            mask = cols < n_cols
            dy, g, xhat = _load_block(x_row, dy_row, W, cols, mask, stride_x_col, stride_dy_col, mean, rstd, HAS_WEIGHT)
            sum_g_xhat = tl.sum(g * xhat, axis=0)
            sum_g = tl.sum(g, axis=0)
        else:
            sum_g_xhat = 0.0
            sum_g = 0.0
            for start in range(0, n_cols, BLOCK):
                block_cols = start + tl.arange(0, BLOCK)
                block_mask = block_cols < n_cols  # the last block is partial when BLOCK does not divide d
                _, block_g, block_xhat = _load_block(x_row, dy_row, W, block_cols, block_mask, stride_x_col,
                                                     stride_dy_col, mean, rstd, HAS_WEIGHT)
                sum_g_xhat += tl.sum(block_g * block_xhat, axis=0)
                sum_g += tl.sum(block_g, axis=0)
        c_xhat = sum_g_xhat / n_cols
        c_one = 0.0
        if not IS_RMS:
            c_one = sum_g / n_cols

        # Pass 2: dx = rstd * (g - xhat * c_xhat - c_one) in float32, stored with the mask, rounded once to dx's dtype.
        if ROW_COEFFS:  # pass 2 is _norm_backward_columns'
            tl.store(Coeffs + row, c_xhat)
            if not IS_RMS:
                tl.store(Coeffs + n_rows + row, c_one)
        elif SINGLE_BLOCK:  # the row's only block is still in registers
            _store_input_grad(dx_row, dres_row, branch_row, cols, mask, stride_dres_col, g, xhat, c_xhat, c_one, rstd,
                              first, p, scale, seed, HAS_DRES, HAS_BRANCH, HAS_DROPOUT)
            if FUSE_DW:
                dw_acc += dy * xhat
            if FUSE_DB:
                db_acc += dy
        else:
            for start in range(0, n_cols, BLOCK):
                cols = start + tl.arange(0, BLOCK)
                mask = cols < n_cols
                dy, g, xhat = _load_block(x_row, dy_row, W, cols, mask, stride_x_col, stride_dy_col, mean, rstd,
                                          HAS_WEIGHT)
                _store_input_grad(dx_row, dres_row, branch_row, cols, mask, stride_dres_col, g, xhat, c_xhat, c_one,
                                  rstd, first, p, scale, seed, HAS_DRES, HAS_BRANCH, HAS_DROPOUT)

    # The partial sums are stored in float32 (rounded to the weight's dtype only after _sum_partials adds them).
    if FUSE_DW:
        tl.store(Partials + program * n_cols + param_cols, dw_acc, mask=param_cols < n_cols)
    if FUSE_DB:
        db_row = program
        if FUSE_DW:
            db_row += n_programs
        tl.store(Partials + db_row * n_cols + param_cols, db_acc, mask=param_cols < n_cols)


@triton.jit
def _norm_backward_columns(
    X,  # pointer to the forward's input x, [n, d], any strides, float32/float16/bfloat16
    DY,  # pointer to the upstream gradient dy, [n, d], any strides, float32/float16/bfloat16
    DX,  # pointer to the output dx, [n, d], row-contiguous (column stride 1), in dx's dtype
    W,  # pointer to gamma, [d], contiguous, float32/float16/bfloat16; None without (HAS_WEIGHT False)
    Mean,  # pointer to the forward's mean, float32 [n]; None for RMSNorm (never read)
    Rstd,  # pointer to the forward's rstd, float32 [n]
    Coeffs,  # pointer to the rows' coefficients from _norm_backward_input (ROW_COEFFS), float32: c_xhat [n], then
    #          (LayerNorm) c_one [n]
    DRES,  # pointer to dres, [n, d], any strides, added to dx before its rounding; None without (HAS_DRES False)
    BRANCH,  # pointer to the output gradient of the fused add's branch, [n, d], row-contiguous like DX; None unless
    #          HAS_BRANCH
    DW,  # pointer to the output dgamma, [d], contiguous, in the weight's dtype (else x's); None unless COMPUTE_DW
    DB,  # pointer to the output dbeta, [d], contiguous, in the weight's dtype (else x's); None unless COMPUTE_DB
    stride_x_row,  # int: elements between two rows of X
    stride_x_col,  # int: elements between two columns of X
    stride_dy_row,  # int: elements between two rows of DY
    stride_dy_col,  # int: elements between two columns of DY
    stride_dx_row,  # int: elements between two rows of DX
    stride_dres_row,  # int: elements between two rows of DRES (0 without)
    stride_dres_col,  # int: elements between two columns of DRES (0 without)
    n_rows,  # int: n, X's rows
    n_cols,  # int: d, the row's width
    p,  # float32: the forward's drop probability of the branch (used with HAS_DROPOUT)
    scale,  # float32: 1/(1 - p) (used with HAS_DROPOUT)
    seed,  # int: the forward's Philox seed, mod 2^64 (used with HAS_DROPOUT)
    IS_RMS: tl.constexpr,  # bool: RMSNorm (mean = 0, no c_one) instead of LayerNorm
    HAS_WEIGHT: tl.constexpr,  # bool: W given (g = gamma * dy; else g = dy)
    HAS_DRES: tl.constexpr,  # bool: DRES given
    HAS_BRANCH: tl.constexpr,  # bool: BRANCH given (as _norm_backward_input's)
    HAS_DROPOUT: tl.constexpr,  # bool: the branch was dropped out (p > 0)
    COMPUTE_DW: tl.constexpr,  # bool: write dgamma
    COMPUTE_DB: tl.constexpr,  # bool: write dbeta
    BLOCK_ROWS: tl.constexpr,  # int, power of two: rows of the tile read at a time (rows.LaunchConfig.sum_rows)
    BLOCK_COLS: tl.constexpr,  # int, power of two: columns of that tile, one program per block of them (sum_cols)
):
    """The second read of rows wider than one block (d > MAX_BLOCK): dx = rstd (g - xhat c_xhat - c_one) (+ dres)
    from the rows' coefficients, and in the same read dgamma = sum_rows dy * xhat, dbeta = sum_rows dy (so x and dy
    are read twice in all, not three times, and no partial sums are written). One program per block of BLOCK_COLS
    columns walks down every row in BLOCK_ROWS x BLOCK_COLS tiles; the sums add tiles in float32, then reduce the
    tile's rows once, rounded once to the weight's dtype (no atomics: deterministic). dx's elements are computed
    as in _norm_backward_input's pass 2, operation for operation."""
    cols = tl.program_id(0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    col_mask = cols < n_cols  # the last column block is partial when BLOCK_COLS does not divide d
    if HAS_WEIGHT:
        w = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)
    dw_acc = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=tl.float32)  # float32 accumulators, one per tile element
    db_acc = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=tl.float32)
    for start in range(0, n_rows, BLOCK_ROWS):
        row_ids = start + tl.arange(0, BLOCK_ROWS)
        row_mask = row_ids < n_rows  # the last row tile is partial when BLOCK_ROWS does not divide n
        mask = row_mask[:, None] & col_mask[None, :]  # masked-off elements load as 0.0 and are not stored
        rows64 = row_ids.to(tl.int64)  # int64: row * stride can pass 2^31 elements
        dy = tl.load(DY + rows64[:, None] * stride_dy_row + cols[None, :] * stride_dy_col,
                     mask=mask, other=0.0).to(tl.float32)
        x = tl.load(X + rows64[:, None] * stride_x_row + cols[None, :] * stride_x_col,
                    mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(Rstd + row_ids, mask=row_mask, other=0.0)[:, None]
        c_xhat = tl.load(Coeffs + row_ids, mask=row_mask, other=0.0)[:, None]
        g = dy
        if HAS_WEIGHT:
            g = dy * w[None, :]
        if IS_RMS:  # mean = 0, c_one = 0
            xhat = tl.where(mask, x * rstd, 0.0)
            dx = (g - xhat * c_xhat) * rstd
        else:
            mean = tl.load(Mean + row_ids, mask=row_mask, other=0.0)[:, None]
            xhat = tl.where(mask, (x - mean) * rstd, 0.0)  # masked-off x is 0.0, whose xhat would be -mean * rstd
            c_one = tl.load(Coeffs + n_rows + row_ids, mask=row_mask, other=0.0)[:, None]
            dx = (g - (xhat * c_xhat + c_one)) * rstd
        if HAS_DRES:
            dx += tl.load(DRES + rows64[:, None] * stride_dres_row + cols[None, :] * stride_dres_col,
                          mask=mask, other=0.0).to(tl.float32)
        tl.store(DX + rows64[:, None] * stride_dx_row + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        if HAS_BRANCH:  # as _store_input_grad's: the forward's mask at the element's row-major index
            branch = dx
            if HAS_DROPOUT:
                branch = dropped_out(dx, rows64[:, None] * n_cols + cols[None, :], p, scale, seed)
            tl.store(BRANCH + rows64[:, None] * stride_dx_row + cols[None, :], branch.to(BRANCH.dtype.element_ty),
                     mask=mask)
        if COMPUTE_DW:
            dw_acc += dy * xhat
        if COMPUTE_DB:
            db_acc += dy
    # The tile's rows reduced once, in float32, then rounded once to the weight's dtype.
    if COMPUTE_DW:
        tl.store(DW + cols, tl.sum(dw_acc, axis=0).to(DW.dtype.element_ty), mask=col_mask)
    if COMPUTE_DB:
        tl.store(DB + cols, tl.sum(db_acc, axis=0).to(DB.dtype.element_ty), mask=col_mask)


@triton.jit
def _sum_partials(
    Partials,  # pointer to the partial sums, float32 [(COMPUTE_DW + COMPUTE_DB) * n_partials, d], contiguous:
    #            dgamma's partial rows, then dbeta's
    DW,  # pointer to the output dgamma, [d], contiguous, in the weight's dtype (else x's); None unless COMPUTE_DW
    DB,  # pointer to the output dbeta, [d], contiguous, in the weight's dtype (else x's); None unless COMPUTE_DB
    n_partials,  # int: partial-sum rows per gradient (the backward's programs)
    n_cols,  # int: d, the row's width (Partials' row stride)
    COMPUTE_DW: tl.constexpr,  # bool: write dgamma
    COMPUTE_DB: tl.constexpr,  # bool: write dbeta
    BLOCK_ROWS: tl.constexpr,  # int, power of two: rows of the tile summed at a time (rows.LaunchConfig.sum_rows)
    BLOCK_COLS: tl.constexpr,  # int, power of two: columns of that tile, one program per block of them (sum_cols)
):
    """dgamma, dbeta = the column sums of the partial-sum buffers (the second stage of tutorial 05's two-stage
    reduction), in float32, rounded once to the weight's dtype: one program per block of BLOCK_COLS columns, both
    buffers in one launch."""
    cols = tl.program_id(0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    col_mask = cols < n_cols  # the last column block is partial when BLOCK_COLS does not divide d
    dw_acc = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=tl.float32)  # float32 accumulators, one per tile element
    db_acc = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=tl.float32)
    for start in range(0, n_partials, BLOCK_ROWS):
        row_ids = start + tl.arange(0, BLOCK_ROWS)
        mask = (row_ids < n_partials)[:, None] & col_mask[None, :]  # masked-off elements load as 0.0
        offsets = row_ids[:, None] * n_cols + cols[None, :]
        if COMPUTE_DW:
            dw_acc += tl.load(Partials + offsets, mask=mask, other=0.0)
        if COMPUTE_DB:
            if COMPUTE_DW:
                offsets += n_partials * n_cols  # dbeta's rows follow dgamma's
            db_acc += tl.load(Partials + offsets, mask=mask, other=0.0)
    # The tile's rows reduced once, in float32, then rounded once to the weight's dtype.
    if COMPUTE_DW:
        tl.store(DW + cols, tl.sum(dw_acc, axis=0).to(DW.dtype.element_ty), mask=col_mask)
    if COMPUTE_DB:
        tl.store(DB + cols, tl.sum(db_acc, axis=0).to(DB.dtype.element_ty), mask=col_mask)


def forward(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float, *,
            rms: bool, block: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """``(y, mean, rstd)`` over the last dimension of ``x``; ``mean`` is None for RMSNorm. One launch.

    ``y`` has x's shape and dtype; ``mean``/``rstd`` are float32 of shape ``[n]`` (one per row).
    ``block`` overrides the column block (a power of two), e.g. to exercise the multi-block path.
    """
    x2 = x if x.dim() == 2 else rows.as_rows(x)
    n_rows, n_cols = x2.shape
    y = torch.empty_like(x2, memory_format=torch.contiguous_format)
    mean = None if rms else x2.new_empty(n_rows, dtype=torch.float32)
    rstd = x2.new_empty(n_rows, dtype=torch.float32)
    if n_rows and n_cols:
        element_size = x2.element_size()
        block = block or rows.config_for(n_cols, element_size, x2.device).forward_block
        warps = rows.num_warps(block, element_size)
        weight = None if weight is None else weight.contiguous()
        bias = None if bias is None else bias.contiguous()
        rows.launch(
            _norm_forward, (n_rows,),
            x2, y, weight, bias, mean, rstd,
            *x2.stride(), n_cols,  # y's row stride: y is contiguous
            n_cols, float(eps),
            IS_RMS=rms, HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None, BLOCK=block,
            SINGLE_BLOCK=n_cols <= block, num_warps=warps,
        )
    return (y if x2 is x else y.view(x.shape)), mean, rstd


def backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, mean: torch.Tensor | None,
             rstd: torch.Tensor, *, rms: bool, need_dw: bool, need_db: bool, block: int | None = None,
             dresidual: torch.Tensor | None = None, dx_dtype: torch.dtype | None = None,
             branch: torch.Tensor | None = None, p: float = 0.0, seed: int = 0,
             ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """``(dx, dweight, dbias)`` from the forward's saved ``mean``/``rstd``; None for what is not needed.

    ``dweight``/``dbias`` are summed in float32 and returned in the weight's dtype (x's without a weight).
    ``dresidual`` (x's shape): a gradient added to dx before it is rounded (the fused residual add's dL/dh);
    ``dx_dtype``: dx's dtype (default x's). ``branch`` (x's shape, contiguous): a second output the same launches
    write, the gradient of the fused add's other input in its own dtype, each element the same float32 value as dx's
    before its rounding, or with ``p`` > 0 that value times m / (1 - p), m the forward's dropout mask of ``seed``
    (kernels/dropout_kernel.py's: the element's row-major index).

    Launches: one without dweight/dbias, two with. Rows of one block: the row kernel (dx, and with dweight/dbias its
    programs' float32 partial sums of them, tutorial 05's first stage), then :func:`_sum_partials` summing the
    partial buffers; x and dy are read once. Wider rows (d > block) with dweight/dbias: the row kernel's first read
    gives each row's coefficients, then :func:`_norm_backward_columns` reads x and dy a second time for dx and
    dweight/dbias together (two reads in all; without dweight/dbias the row kernel alone reads the row twice).
    """
    flat = x.dim() == 2
    x2, dy2 = (x, dy) if flat else (rows.as_rows(x), rows.as_rows(dy))
    dres2 = None if dresidual is None else rows.as_rows(dresidual)
    n_rows, n_cols = x2.shape
    device = x.device
    dx = torch.empty_like(x2, dtype=dx_dtype or x.dtype, memory_format=torch.contiguous_format)
    param_dtype = weight.dtype if weight is not None else x.dtype
    dweight = torch.empty(n_cols, dtype=param_dtype, device=device) if need_dw else None
    dbias = torch.empty(n_cols, dtype=param_dtype, device=device) if need_db else None
    if dx.numel() == 0:
        for grad in (dweight, dbias):
            if grad is not None:
                grad.zero_()
        return dx.view(x.shape), dweight, dbias

    element_size = x2.element_size()
    config = rows.config_for(n_cols, element_size, device)
    block = block or (config.rms_backward_block if rms else config.layernorm_backward_block)
    weight = None if weight is None else weight.contiguous()
    single_block = n_cols <= block
    need_params = need_dw or need_db
    programs = rows.persistent_programs(n_rows, device, block)
    fused_sums = single_block and need_params
    by_columns = need_params and not single_block
    partials = (torch.empty(((need_dw + need_db) * programs, n_cols), dtype=torch.float32, device=device)
                if fused_sums else None)
    coeffs = torch.empty((1 if rms else 2) * n_rows, dtype=torch.float32, device=device) if by_columns else None
    dres_strides = (0, 0) if dres2 is None else dres2.stride()
    branch2 = None if branch is None else branch.view(n_rows, n_cols)
    dropout = (float(p), 0.0 if p == 1.0 else 1.0 / (1.0 - p), seed % SEED_MODULUS)
    branch_flags = {"HAS_BRANCH": branch is not None, "HAS_DROPOUT": branch is not None and p > 0.0}
    rows.launch(
        _norm_backward_input, (programs,),
        x2, dy2, dx, weight, mean, rstd, partials, dres2, coeffs, branch2,
        x2.stride(0), x2.stride(1), dy2.stride(0), dy2.stride(1), dx.stride(0), *dres_strides,
        n_rows, n_cols, *dropout,
        IS_RMS=rms, HAS_WEIGHT=weight is not None, HAS_DRES=dres2 is not None, **branch_flags,
        FUSE_DW=fused_sums and need_dw, FUSE_DB=fused_sums and need_db, ROW_COEFFS=by_columns,
        BLOCK=block, SINGLE_BLOCK=single_block, num_warps=rows.backward_num_warps(block, element_size),
    )
    dx_shaped = dx if flat else dx.view(x.shape)
    if not need_params:
        return dx_shaped, None, None
    col_blocks = (-(-n_cols // config.sum_cols),)  # ceil; triton.cdiv is a ConstexprFunction, ~3 us per call
    if fused_sums:
        rows.launch(
            _sum_partials, col_blocks,
            partials, dweight, dbias, programs, n_cols,
            COMPUTE_DW=need_dw, COMPUTE_DB=need_db, BLOCK_ROWS=config.sum_rows, BLOCK_COLS=config.sum_cols,
            num_warps=4,
        )
    else:
        rows.launch(
            _norm_backward_columns, col_blocks,
            x2, dy2, dx, weight, mean, rstd, coeffs, dres2, branch2, dweight, dbias,
            x2.stride(0), x2.stride(1), dy2.stride(0), dy2.stride(1), dx.stride(0), *dres_strides,
            n_rows, n_cols, *dropout,
            IS_RMS=rms, HAS_WEIGHT=weight is not None, HAS_DRES=dres2 is not None, **branch_flags,
            COMPUTE_DW=need_dw,
            COMPUTE_DB=need_db, BLOCK_ROWS=config.sum_rows, BLOCK_COLS=config.sum_cols, num_warps=4,
        )
    return dx_shaped, dweight, dbias
