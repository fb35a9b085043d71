"""BatchNorm in Triton: forward (training and eval, running statistics updated in place) and backward to x, weight
and bias; the differentiable entry point :func:`batch_norm`, with torch.nn.functional.batch_norm's signature.

x is [N, C, *spatial] (ranks 2 to 5). Channel c's statistics span its n = N x S elements (S = prod(spatial)), in
float32 whatever the storage:

    training:  mean_c = sum(x) / n,  var_c = sum((x - mean_c)^2) / n   (population variance, two-pass)
    eval:      mean_c = running_mean_c,  var_c = running_var_c
    y = (x - mean_c) * rstd_c * weight_c + bias_c,   rstd_c = 1 / sqrt(var_c + eps)   (weight, bias optional)

Training with running buffers updates them in place, once per call, with torch's convention (momentum m):

    running_mean <- (1 - m) running_mean + m mean_c
    running_var  <- (1 - m) running_var + m sum((x - mean_c)^2) / (n - 1)     (the unbiased variance)

Backward, with xhat = (x - mean_c) rstd_c and the channel sums over its n elements:

    training:  dx = weight_c rstd_c (dy - sum(dy) / n - xhat sum(dy xhat) / n)   (through the batch mean and variance)
    eval:      dx = weight_c rstd_c dy                                           (the statistics are constants)
    dweight_c = sum(dy xhat),   dbias_c = sum(dy)

The variance is never E[x^2] - E[x]^2: the forward reads the channel twice (its mean, then the squared deviations from
it), as kernels/norm.py does a row. Every sum adds the channel's blocks into float32 lanes, then reduces the lanes once
with tl.sum; the statistics are saved in float32 for the backward.

Layout: any strides. The non-channel dimensions (N and the spatial ones) of x, y, dy and dx are coalesced on the host
into at most four strided dimensions shared by the tensors (contiguous NCHW: two, [S] of stride 1 inside [N];
channels_last and [N, C]: one, of stride C), and the kernels compute each element's address from its flat index in the
channel; y and dx are allocated like x (torch.empty_like: channels_last stays channels_last). Nothing is copied.

Grid: one program per block of BLOCK_C channels (:func:`launch_shape`), each looping over its channels' elements in
blocks of BLOCK_E; there is no split of one channel across programs (few channels with many elements each use few
programs: the limit documented in docs/kernels.md).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable

from kernels import rows

OP = "batch_norm"
#: Elements a program holds at once (BLOCK_C x BLOCK_E): 4096 float32 values over 16 warps is 8 per thread.
TILE = 4096
#: Channels a program takes at once when x's channels are adjacent in memory (channel stride 1: channels_last, [N, C]).
MAX_BLOCK_C = 32
#: Strided dimensions the kernels address (N and up to three spatial dimensions, after coalescing).
MAX_DIMS = 4


@triton.jit
def _element_offsets(
    elements,  # int32 [BLOCK_E]: flat indices of elements within a channel, the innermost dimension fastest
    size1,  # int: size of dimension 1 of the (at most four) coalesced non-channel dimensions 0..3, outer to inner
    size2,  # int: size of dimension 2
    size3,  # int: size of dimension 3, the innermost (the only one when DIMS is 1)
    stride0,  # int: elements between two indices of dimension 0 in the tensor addressed
    stride1,  # int: the same for dimension 1
    stride2,  # int: the same for dimension 2
    stride3,  # int: the same for dimension 3
    DIMS: tl.constexpr,  # int, 1 to 4: the coalesced dimensions in use, the innermost DIMS of 0..3
):
    """int64 [BLOCK_E] offsets of the elements from their channel's first element: the flat index split into the
    DIMS innermost dimensions by division and remainder in int32 (n < 2^31), the products with the strides in int64."""
    if DIMS == 1:
        offsets = elements.to(tl.int64) * stride3
    else:
        offsets = (elements % size3).to(tl.int64) * stride3
        rest = elements // size3
        if DIMS == 2:
            offsets += rest.to(tl.int64) * stride2
        else:
            offsets += (rest % size2).to(tl.int64) * stride2
            rest = rest // size2
            if DIMS == 3:
                offsets += rest.to(tl.int64) * stride1
            else:
                offsets += (rest % size1).to(tl.int64) * stride1
                offsets += (rest // size1).to(tl.int64) * stride0
    return offsets


@triton.jit
def _tile(
    channel_offsets,  # int64 [BLOCK_C]: offsets of the block's channels' first elements (channel * stride_c)
    channel_mask,  # bool [BLOCK_C]: channel < C, the block's channels that exist
    start,  # int: the first flat element index of the tile
    n_elements,  # int: n = N x S, the elements of a channel
    size1,  # int: size of coalesced dimension 1 (see _element_offsets)
    size2,  # int: size of coalesced dimension 2
    size3,  # int: size of coalesced dimension 3
    stride0,  # int: the tensor's stride of coalesced dimension 0
    stride1,  # int: its stride of dimension 1
    stride2,  # int: its stride of dimension 2
    stride3,  # int: its stride of dimension 3
    DIMS: tl.constexpr,  # int, 1 to 4: the coalesced dimensions in use
    BLOCK_E: tl.constexpr,  # int, power of two: elements of a channel per tile
):
    """(offsets int64 [BLOCK_C, BLOCK_E], mask bool [BLOCK_C, BLOCK_E]) of the tile of elements start..start+BLOCK_E
    of the block's channels; the mask is off for channels >= C and elements >= n (the last tile is partial)."""
    elements = start + tl.arange(0, BLOCK_E)
    mask = channel_mask[:, None] & (elements < n_elements)[None, :]
    offsets = channel_offsets[:, None] + _element_offsets(elements, size1, size2, size3, stride0, stride1, stride2,
                                                          stride3, DIMS)[None, :]
    return offsets, mask


@triton.jit
def _load_channel_parameter(
    P,  # pointer to a per-channel tensor, [C], contiguous, float32/float16/bfloat16; unused unless PRESENT
    channels,  # int32 [BLOCK_C]: the block's channel indices
    channel_mask,  # bool [BLOCK_C]: channels < C
    default,  # float: the value without P (1.0 for a weight, 0.0 for a bias)
    PRESENT: tl.constexpr,  # bool: P given
):
    """P[channels] in float32 (``default`` for channels >= C and without P), shape [BLOCK_C]."""
    if PRESENT:
        value = tl.load(P + channels, mask=channel_mask, other=default).to(tl.float32)
    else:
        value = tl.full(channels.shape, default, tl.float32)
    return value


@triton.jit
def _batch_norm_forward(
    X,  # pointer to the input x, [N, C, *spatial], any strides, float32/float16/bfloat16
    Y,  # pointer to the output y, x's shape and dtype, its own strides (torch.empty_like(x))
    W,  # pointer to weight, [C], contiguous, float32/float16/bfloat16; None without (HAS_WEIGHT False)
    B,  # pointer to bias, [C], contiguous, float32/float16/bfloat16; None without (HAS_BIAS False)
    RunningMean,  # pointer to running_mean, [C], any stride, float32/float16/bfloat16: read in eval, updated in
    #               place with UPDATE_RUNNING; None when neither
    RunningVar,  # pointer to running_var, [C], any stride (as RunningMean)
    Mean,  # pointer to the output mean used, float32 [C]: the batch's (training) or running_mean's (eval)
    Rstd,  # pointer to the output rstd = 1 / sqrt(var + eps), float32 [C], with the same var
    n_channels,  # int: C
    n_elements,  # int: n = N x S, the elements of a channel (>= 1)
    size1,  # int: size of coalesced non-channel dimension 1 (see _element_offsets)
    size2,  # int: size of coalesced dimension 2
    size3,  # int: size of coalesced dimension 3, the innermost
    stride_x_c,  # int: elements between two channels of X
    stride_x0,  # int: X's stride of coalesced dimension 0
    stride_x1,  # int: X's stride of dimension 1
    stride_x2,  # int: X's stride of dimension 2
    stride_x3,  # int: X's stride of dimension 3
    stride_y_c,  # int: elements between two channels of Y
    stride_y0,  # int: Y's stride of coalesced dimension 0
    stride_y1,  # int: Y's stride of dimension 1
    stride_y2,  # int: Y's stride of dimension 2
    stride_y3,  # int: Y's stride of dimension 3
    stride_running_mean,  # int: elements between two channels of RunningMean (0 without)
    stride_running_var,  # int: elements between two channels of RunningVar (0 without)
    momentum,  # float32: m of the running update (unused unless UPDATE_RUNNING)
    eps,  # float32: added to the variance inside the root
    BATCH_STATS: tl.constexpr,  # bool: training, the statistics of the batch (else running_mean, running_var)
    UPDATE_RUNNING: tl.constexpr,  # bool: BATCH_STATS and running buffers given: update them in place
    HAS_WEIGHT: tl.constexpr,  # bool: W given
    HAS_BIAS: tl.constexpr,  # bool: B given
    DIMS: tl.constexpr,  # int, 1 to 4: the coalesced non-channel dimensions in use
    BLOCK_C: tl.constexpr,  # int, power of two: channels per program
    BLOCK_E: tl.constexpr,  # int, power of two: elements of a channel per tile
    SINGLE_BLOCK: tl.constexpr,  # bool: n <= BLOCK_E, a channel is one tile, loaded once
):
    """One program per block of BLOCK_C channels. Training: two-pass over each channel (the mean, then the squared
    deviations from it), the running buffers updated, then y; eval: y from the running statistics in one pass. Each
    sum adds the channel's tiles into float32 lanes, tile after tile, and reduces the lanes once with tl.sum.

    Launch (launch_shape): grid (ceil(C / BLOCK_C),), BLOCK_C * BLOCK_E <= TILE, num_warps = clamp(BLOCK_C *
    BLOCK_E / 256, 1, 16)."""
    channels = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    channel_mask = channels < n_channels  # the last block of channels is partial when BLOCK_C does not divide C
    x_channels = channels.to(tl.int64) * stride_x_c  # int64: channel * stride can pass 2^31 elements
    y_channels = channels.to(tl.int64) * stride_y_c

    # The first tile, loaded once for both passes of the statistics and for y when it is the channel's only one
    # (eval over several tiles reads each tile once, in pass 3).
    if BATCH_STATS or SINGLE_BLOCK:
        offsets, mask = _tile(x_channels, channel_mask, 0, n_elements, size1, size2, size3,
                              stride_x0, stride_x1, stride_x2, stride_x3, DIMS, BLOCK_E)
        x = tl.load(X + offsets, mask=mask, other=0.0).to(tl.float32)  # masked-off lanes 0.0: they add nothing

    if BATCH_STATS:
        # Pass 1: mean = sum(x) / n, in float32 lanes, reduced once.
        lanes = x
        for start in range(BLOCK_E, n_elements, BLOCK_E):
            offsets, mask = _tile(x_channels, channel_mask, start, n_elements, size1, size2, size3,
                                  stride_x0, stride_x1, stride_x2, stride_x3, DIMS, BLOCK_E)
            lanes += tl.load(X + offsets, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(lanes, axis=1) / n_elements  # float32 [BLOCK_C]

        # Pass 2: m2 = sum((x - mean)^2), the same way; masked-off lanes are set to 0.0 (their x - mean is -mean).
        offsets, mask = _tile(x_channels, channel_mask, 0, n_elements, size1, size2, size3,
                              stride_x0, stride_x1, stride_x2, stride_x3, DIMS, BLOCK_E)
        deviation = tl.where(mask, x - mean[:, None], 0.0)
        lanes = deviation * deviation
        for start in range(BLOCK_E, n_elements, BLOCK_E):
            offsets, mask = _tile(x_channels, channel_mask, start, n_elements, size1, size2, size3,
                                  stride_x0, stride_x1, stride_x2, stride_x3, DIMS, BLOCK_E)
            block = tl.load(X + offsets, mask=mask, other=0.0).to(tl.float32)
            deviation = tl.where(mask, block - mean[:, None], 0.0)
            lanes += deviation * deviation
        m2 = tl.sum(lanes, axis=1)
        var = m2 / n_elements  # the population (biased) variance normalizes

        if UPDATE_RUNNING:  # torch's convention, the unbiased variance m2 / (n - 1); n >= 2 (the host checks)
            running_mean = RunningMean + channels * stride_running_mean
            running_var = RunningVar + channels * stride_running_var
            old_mean = tl.load(running_mean, mask=channel_mask, other=0.0).to(tl.float32)
            old_var = tl.load(running_var, mask=channel_mask, other=0.0).to(tl.float32)
            new_mean = (1.0 - momentum) * old_mean + momentum * mean
            new_var = (1.0 - momentum) * old_var + momentum * (m2 / (n_elements - 1))
            tl.store(running_mean, new_mean.to(RunningMean.dtype.element_ty), mask=channel_mask)
            tl.store(running_var, new_var.to(RunningVar.dtype.element_ty), mask=channel_mask)
    else:
        mean = tl.load(RunningMean + channels * stride_running_mean, mask=channel_mask, other=0.0).to(tl.float32)
        var = tl.load(RunningVar + channels * stride_running_var, mask=channel_mask, other=1.0).to(tl.float32)

    rstd = 1.0 / tl.sqrt(var + eps)  # float32 [BLOCK_C]
    tl.store(Mean + channels, mean, mask=channel_mask)
    tl.store(Rstd + channels, rstd, mask=channel_mask)

    # Pass 3: y = (x - mean) * rstd * weight + bias in float32, rounded once to Y's dtype, stored with the mask.
    weight = _load_channel_parameter(W, channels, channel_mask, 1.0, HAS_WEIGHT)[:, None]
    bias = _load_channel_parameter(B, channels, channel_mask, 0.0, HAS_BIAS)[:, None]
    if SINGLE_BLOCK:  # the channel's only tile is still in registers
        offsets, mask = _tile(y_channels, channel_mask, 0, n_elements, size1, size2, size3,
                              stride_y0, stride_y1, stride_y2, stride_y3, DIMS, BLOCK_E)
        y = (x - mean[:, None]) * rstd[:, None] * weight + bias
        tl.store(Y + offsets, y.to(Y.dtype.element_ty), mask=mask)
    else:
        for start in range(0, n_elements, BLOCK_E):
            offsets, mask = _tile(x_channels, channel_mask, start, n_elements, size1, size2, size3,
                                  stride_x0, stride_x1, stride_x2, stride_x3, DIMS, BLOCK_E)
            block = tl.load(X + offsets, mask=mask, other=0.0).to(tl.float32)
            y = (block - mean[:, None]) * rstd[:, None] * weight + bias
            offsets, mask = _tile(y_channels, channel_mask, start, n_elements, size1, size2, size3,
                                  stride_y0, stride_y1, stride_y2, stride_y3, DIMS, BLOCK_E)
            tl.store(Y + offsets, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _load_gradient_tile(
    X,  # pointer to the forward's input x; unused unless NEED_XHAT
    DY,  # pointer to the upstream gradient dy, x's shape, any strides, float32/float16/bfloat16
    x_channels,  # int64 [BLOCK_C]: offsets of the block's channels in X
    dy_channels,  # int64 [BLOCK_C]: offsets of the block's channels in DY
    channel_mask,  # bool [BLOCK_C]: channels < C
    start,  # int: the tile's first flat element index
    n_elements,  # int: n, the elements of a channel
    mean,  # float32 [BLOCK_C, 1]: the saved mean of each channel
    rstd,  # float32 [BLOCK_C, 1]: the saved rstd of each channel
    size1,  # int: size of coalesced dimension 1 (see _element_offsets)
    size2,  # int: size of coalesced dimension 2
    size3,  # int: size of coalesced dimension 3
    stride_x0,  # int: X's stride of coalesced dimension 0
    stride_x1,  # int: X's stride of dimension 1
    stride_x2,  # int: X's stride of dimension 2
    stride_x3,  # int: X's stride of dimension 3
    stride_dy0,  # int: DY's stride of coalesced dimension 0
    stride_dy1,  # int: DY's stride of dimension 1
    stride_dy2,  # int: DY's stride of dimension 2
    stride_dy3,  # int: DY's stride of dimension 3
    NEED_XHAT: tl.constexpr,  # bool: load x and compute xhat (else xhat is zeros, X unread)
    DIMS: tl.constexpr,  # int, 1 to 4: the coalesced dimensions in use
    BLOCK_E: tl.constexpr,  # int, power of two: elements of a channel per tile
):
    """(dy, xhat) of one tile in float32, both 0.0 where masked off; xhat = (x - mean) * rstd."""
    offsets, mask = _tile(dy_channels, channel_mask, start, n_elements, size1, size2, size3,
                          stride_dy0, stride_dy1, stride_dy2, stride_dy3, DIMS, BLOCK_E)
    dy = tl.load(DY + offsets, mask=mask, other=0.0).to(tl.float32)
    xhat = tl.zeros(dy.shape, dtype=tl.float32)
    if NEED_XHAT:
        offsets, mask = _tile(x_channels, channel_mask, start, n_elements, size1, size2, size3,
                              stride_x0, stride_x1, stride_x2, stride_x3, DIMS, BLOCK_E)
        x = tl.load(X + offsets, mask=mask, other=0.0).to(tl.float32)
        xhat = tl.where(mask, (x - mean) * rstd, 0.0)  # masked-off x is 0.0, whose xhat would be -mean * rstd
    return dy, xhat


@triton.jit
def _input_gradient(
    dy,  # float32 [BLOCK_C, BLOCK_E]: a tile of the upstream gradient, 0.0 where masked off
    xhat,  # float32 [BLOCK_C, BLOCK_E]: (x - mean) * rstd on the tile (unused unless BATCH_STATS)
    c_one,  # float32 [BLOCK_C]: sum(dy) / n per channel (unused unless BATCH_STATS)
    c_xhat,  # float32 [BLOCK_C]: sum(dy * xhat) / n per channel (unused unless BATCH_STATS)
    scale,  # float32 [BLOCK_C, 1]: weight * rstd per channel
    BATCH_STATS: tl.constexpr,  # bool: training (the terms through the batch mean and variance) or eval
):
    """dx in float32: scale * (dy - c_one - xhat * c_xhat) in training, scale * dy in eval."""
    centred = dy
    if BATCH_STATS:
        centred = dy - (xhat * c_xhat[:, None] + c_one[:, None])
    return centred * scale


@triton.jit
def _batch_norm_backward(
    X,  # pointer to the forward's input x, [N, C, *spatial], any strides, float32/float16/bfloat16
    DY,  # pointer to the upstream gradient dy, x's shape, any strides, float32/float16/bfloat16
    DX,  # pointer to the output dx, x's shape and dtype, its own strides; None unless COMPUTE_DX
    W,  # pointer to weight, [C], contiguous; None without (HAS_WEIGHT False)
    Mean,  # pointer to the forward's mean, float32 [C] (the batch's or running_mean)
    Rstd,  # pointer to the forward's rstd, float32 [C]
    DW,  # pointer to the output dweight, [C], in the weight's dtype; None unless COMPUTE_DW
    DB,  # pointer to the output dbias, [C], in the bias's dtype; None unless COMPUTE_DB
    n_channels,  # int: C
    n_elements,  # int: n = N x S, the elements of a channel (>= 1)
    size1,  # int: size of coalesced non-channel dimension 1 (see _element_offsets)
    size2,  # int: size of coalesced dimension 2
    size3,  # int: size of coalesced dimension 3, the innermost
    stride_x_c,  # int: elements between two channels of X
    stride_x0,  # int: X's stride of coalesced dimension 0
    stride_x1,  # int: X's stride of dimension 1
    stride_x2,  # int: X's stride of dimension 2
    stride_x3,  # int: X's stride of dimension 3
    stride_dy_c,  # int: elements between two channels of DY
    stride_dy0,  # int: DY's stride of coalesced dimension 0
    stride_dy1,  # int: DY's stride of dimension 1
    stride_dy2,  # int: DY's stride of dimension 2
    stride_dy3,  # int: DY's stride of dimension 3
    stride_dx_c,  # int: elements between two channels of DX
    stride_dx0,  # int: DX's stride of coalesced dimension 0
    stride_dx1,  # int: DX's stride of dimension 1
    stride_dx2,  # int: DX's stride of dimension 2
    stride_dx3,  # int: DX's stride of dimension 3
    BATCH_STATS: tl.constexpr,  # bool: the forward used the batch's statistics (training): dx has their terms
    HAS_WEIGHT: tl.constexpr,  # bool: W given (dx scaled by weight; else by 1)
    COMPUTE_DX: tl.constexpr,  # bool: write dx
    COMPUTE_DW: tl.constexpr,  # bool: write dweight
    COMPUTE_DB: tl.constexpr,  # bool: write dbias
    DIMS: tl.constexpr,  # int, 1 to 4: the coalesced non-channel dimensions in use
    BLOCK_C: tl.constexpr,  # int, power of two: channels per program
    BLOCK_E: tl.constexpr,  # int, power of two: elements of a channel per tile
    SINGLE_BLOCK: tl.constexpr,  # bool: n <= BLOCK_E, a channel is one tile, loaded once
):
    """One program per block of BLOCK_C channels. Pass 1 (when dweight, dbias or a training dx needs them): the
    channel sums sum(dy) and sum(dy * xhat) in float32 lanes, reduced once; dweight, dbias stored from them. Pass 2:
    dx = weight * rstd * (dy - sum(dy) / n - xhat * sum(dy * xhat) / n) in training, weight * rstd * dy in eval.

    Launch: as the forward's (launch_shape)."""
    channels = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    channel_mask = channels < n_channels
    x_channels = channels.to(tl.int64) * stride_x_c  # int64: channel * stride can pass 2^31 elements
    dy_channels = channels.to(tl.int64) * stride_dy_c
    dx_channels = channels.to(tl.int64) * stride_dx_c
    mean = tl.load(Mean + channels, mask=channel_mask, other=0.0)[:, None]
    rstd = tl.load(Rstd + channels, mask=channel_mask, other=0.0)[:, None]
    NEED_SUMS: tl.constexpr = COMPUTE_DW or COMPUTE_DB or (COMPUTE_DX and BATCH_STATS)
    NEED_XHAT: tl.constexpr = COMPUTE_DW or (COMPUTE_DX and BATCH_STATS)

    # The first tile, loaded once (kept for pass 2 when it is the channel's only one).
    dy, xhat = _load_gradient_tile(X, DY, x_channels, dy_channels, channel_mask, 0, n_elements, mean, rstd,
                                   size1, size2, size3, stride_x0, stride_x1, stride_x2, stride_x3,
                                   stride_dy0, stride_dy1, stride_dy2, stride_dy3, NEED_XHAT, DIMS, BLOCK_E)
    c_one = tl.zeros([BLOCK_C], dtype=tl.float32)  # sum(dy) / n (training dx), per channel
    c_xhat = tl.zeros([BLOCK_C], dtype=tl.float32)  # sum(dy * xhat) / n (training dx)
    if NEED_SUMS:
        lanes_dy = dy  # float32 lanes; masked-off lanes are 0.0 and add nothing
        lanes_dy_xhat = dy * xhat
        for start in range(BLOCK_E, n_elements, BLOCK_E):
            block_dy, block_xhat = _load_gradient_tile(
                X, DY, x_channels, dy_channels, channel_mask, start, n_elements, mean, rstd,
                size1, size2, size3, stride_x0, stride_x1, stride_x2, stride_x3,
                stride_dy0, stride_dy1, stride_dy2, stride_dy3, NEED_XHAT, DIMS, BLOCK_E)
            lanes_dy += block_dy
            lanes_dy_xhat += block_dy * block_xhat
        sum_dy = tl.sum(lanes_dy, axis=1)  # float32 [BLOCK_C]
        sum_dy_xhat = tl.sum(lanes_dy_xhat, axis=1)
        # rounded once to the parameter's dtype
        if COMPUTE_DW:
            tl.store(DW + channels, sum_dy_xhat.to(DW.dtype.element_ty), mask=channel_mask)
        if COMPUTE_DB:
            tl.store(DB + channels, sum_dy.to(DB.dtype.element_ty), mask=channel_mask)
        if BATCH_STATS:
            c_one = sum_dy / n_elements
            c_xhat = sum_dy_xhat / n_elements

    if COMPUTE_DX:
        scale = (_load_channel_parameter(W, channels, channel_mask, 1.0, HAS_WEIGHT)[:, None] * rstd)
        if SINGLE_BLOCK:  # the channel's only tile is still in registers
            offsets, mask = _tile(dx_channels, channel_mask, 0, n_elements, size1, size2, size3,
                                  stride_dx0, stride_dx1, stride_dx2, stride_dx3, DIMS, BLOCK_E)
            dx = _input_gradient(dy, xhat, c_one, c_xhat, scale, BATCH_STATS)
            tl.store(DX + offsets, dx.to(DX.dtype.element_ty), mask=mask)
        else:
            for start in range(0, n_elements, BLOCK_E):
                block_dy, block_xhat = _load_gradient_tile(
                    X, DY, x_channels, dy_channels, channel_mask, start, n_elements, mean, rstd,
                    size1, size2, size3, stride_x0, stride_x1, stride_x2, stride_x3,
                    stride_dy0, stride_dy1, stride_dy2, stride_dy3, BATCH_STATS, DIMS, BLOCK_E)
                dx = _input_gradient(block_dy, block_xhat, c_one, c_xhat, scale, BATCH_STATS)
                offsets, mask = _tile(dx_channels, channel_mask, start, n_elements, size1, size2, size3,
                                      stride_dx0, stride_dx1, stride_dx2, stride_dx3, DIMS, BLOCK_E)
                tl.store(DX + offsets, dx.to(DX.dtype.element_ty), mask=mask)


# --- host side ------------------------------------------------------------------------------------------------------
def element_dims(shape: tuple[int, ...], *strides: tuple[int, ...]) -> tuple[list[int], list[list[int]]]:
    """The non-channel dimensions (0, 2, 3, ...) of tensors of ``shape`` with the given strides, coalesced: size-1
    dimensions dropped, adjacent ones merged where every tensor steps through them as one (outer stride = inner size x
    inner stride). Returns (sizes, one stride list per tensor), outer to inner, at least one dimension."""
    sizes: list[int] = []
    merged: list[list[int]] = [[] for _ in strides]
    for dim in (0, *range(2, len(shape))):
        size = shape[dim]
        if size == 1:
            continue
        if sizes and all(s[-1] == size * t[dim] for s, t in zip(merged, strides, strict=True)):
            sizes[-1] *= size
            for s, t in zip(merged, strides, strict=True):
                s[-1] = t[dim]
        else:
            sizes.append(size)
            for s, t in zip(merged, strides, strict=True):
                s.append(t[dim])
    if not sizes:  # one element per channel
        return [1], [[0] for _ in strides]
    return sizes, merged


def _padded(sizes: list[int], strides: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """``element_dims``' lists left-padded to MAX_DIMS (size 1, stride 0): the kernels' dimensions 0..3."""
    pad = MAX_DIMS - len(sizes)
    return [1] * pad + sizes, [[0] * pad + s for s in strides]


def launch_shape(n_channels: int, n_elements: int, channel_stride: int) -> tuple[int, int, int]:
    """(BLOCK_C, BLOCK_E, num_warps), the launch rule: channels adjacent in memory (channel stride 1, C > 1:
    channels_last, [N, C]) are taken BLOCK_C = min(next_pow2(C), 32) at a time so that a tile's rows share cache
    lines; otherwise one channel a program. BLOCK_E = min(next_pow2(n), TILE / BLOCK_C) elements of each at a time;
    num_warps = clamp(BLOCK_C * BLOCK_E / 256, 1, 16): rows.num_warps of the float32 tile every dtype is accumulated in.
    The grid is ceil(C / BLOCK_C)."""
    block_c = min(triton.next_power_of_2(n_channels), MAX_BLOCK_C) if channel_stride == 1 and n_channels > 1 else 1
    block_e = min(triton.next_power_of_2(n_elements), TILE // block_c)
    return block_c, block_e, rows.num_warps(block_c * block_e, 4)


def _launch_geometry(x: torch.Tensor, *others: torch.Tensor) -> dict:
    """The size and stride arguments shared by the kernels' launches over x and ``others`` (x's shape), and the
    launch shape (see launch_shape)."""
    n_channels = x.shape[1]
    n_elements = x.numel() // n_channels
    sizes, strides = element_dims(tuple(x.shape), x.stride(), *(t.stride() for t in others))
    dims = len(sizes)
    sizes, strides = _padded(sizes, strides)
    block_c, block_e, warps = launch_shape(n_channels, n_elements, x.stride(1))
    return {"n_channels": n_channels, "n_elements": n_elements, "sizes": sizes[1:], "strides": strides,
            "grid": (math.ceil(n_channels / block_c),), "meta": {"DIMS": dims, "BLOCK_C": block_c, "BLOCK_E": block_e,
                                                                 "SINGLE_BLOCK": n_elements <= block_e,
                                                                 "num_warps": warps}}


def forward(x: torch.Tensor, running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
            weight: torch.Tensor | None, bias: torch.Tensor | None, batch_stats: bool, momentum: float,
            eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(y, mean, rstd)``: y like x (torch.empty_like), the float32 [C] statistics used. One launch; with
    ``batch_stats`` and running buffers given, they are updated in place by it. Inputs are checked by the caller."""
    n_channels = x.shape[1]
    y = torch.empty_like(x)
    mean = torch.empty(n_channels, dtype=torch.float32, device=x.device)
    rstd = torch.empty(n_channels, dtype=torch.float32, device=x.device)
    if x.numel() == 0:  # no element: nothing to normalize, the buffers untouched (as torch)
        return y, mean.fill_(math.nan), rstd.fill_(math.nan)
    g = _launch_geometry(x, y)
    update = batch_stats and running_mean is not None
    rows.launch(
        _batch_norm_forward, g["grid"],
        x, y, _contiguous(weight), _contiguous(bias), running_mean, running_var, mean, rstd,
        n_channels, g["n_elements"], *g["sizes"],
        x.stride(1), *g["strides"][0], y.stride(1), *g["strides"][1],
        *((0, 0) if running_mean is None else (running_mean.stride(0), running_var.stride(0))),
        float(momentum), float(eps),
        BATCH_STATS=batch_stats, UPDATE_RUNNING=update, HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
        **g["meta"],
    )
    if update:  # written by the kernel, unseen by autograd: their versions bumped, so that a graph that saved them
        #         refuses to backpropagate through stale values (torch's F.batch_norm leaves them unbumped)
        torch.autograd.graph.increment_version(running_mean)
        torch.autograd.graph.increment_version(running_var)
    return y, mean, rstd


def backward(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, mean: torch.Tensor, rstd: torch.Tensor,
             batch_stats: bool, need_dx: bool, dweight_dtype: torch.dtype | None, dbias_dtype: torch.dtype | None,
             ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    """``(dx, dweight, dbias)`` from the forward's saved ``mean``/``rstd``; None for what is not asked
    (``dweight_dtype``/``dbias_dtype`` None: not needed). dx like x (torch.empty_like); the parameter gradients
    summed in float32 and rounded once to their dtype. One launch."""
    n_channels = x.shape[1]
    dx = torch.empty_like(x) if need_dx else None
    dweight = None if dweight_dtype is None else torch.empty(n_channels, dtype=dweight_dtype, device=x.device)
    dbias = None if dbias_dtype is None else torch.empty(n_channels, dtype=dbias_dtype, device=x.device)
    if x.numel() == 0:
        for grad in (dweight, dbias):
            if grad is not None:
                grad.zero_()
        return dx, dweight, dbias
    g = _launch_geometry(x, dy, *((dx,) if need_dx else (x,)))
    rows.launch(
        _batch_norm_backward, g["grid"],
        x, dy, dx, _contiguous(weight), mean, rstd, dweight, dbias,
        n_channels, g["n_elements"], *g["sizes"],
        x.stride(1), *g["strides"][0], dy.stride(1), *g["strides"][1],
        (dx if need_dx else x).stride(1), *g["strides"][2],
        BATCH_STATS=batch_stats, HAS_WEIGHT=weight is not None, COMPUTE_DX=need_dx,
        COMPUTE_DW=dweight is not None, COMPUTE_DB=dbias is not None,
        **g["meta"],
    )
    return dx, dweight, dbias


def _contiguous(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.contiguous()


class _BatchNormFunction(torch.autograd.Function):
    """BatchNorm, differentiable with respect to x, weight and bias: one launch forward, one backward. The running
    buffers are updated in place by the forward (once per call); they carry no gradient. The backward calls the kernel
    directly; only when a graph of it is being built (``create_graph=True``) does it go through
    :class:`_BatchNormBackward`, the backward as a differentiable function (second derivatives)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
                weight: torch.Tensor | None, bias: torch.Tensor | None, batch_stats: bool, momentum: float,
                eps: float) -> torch.Tensor:
        y, mean, rstd = forward(x, running_mean, running_var, weight, bias, batch_stats, momentum, eps)
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.batch_stats = batch_stats
        ctx.bias_dtype = None if bias is None else bias.dtype
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        x, weight, mean, rstd = ctx.saved_tensors
        need_dx, _, _, need_dw, need_db, _, _, _ = ctx.needs_input_grad
        args = (dy, x, weight, mean, rstd, ctx.batch_stats, need_dx, weight.dtype if need_dw else None,
                ctx.bias_dtype if need_db else None)
        dx, dweight, dbias = _BatchNormBackward.apply(*args) if torch.is_grad_enabled() else backward(*args)
        return dx, None, None, dweight, dbias, None, None, None


class _BatchNormBackward(torch.autograd.Function):
    """The backward as a differentiable function of (dy, x, weight), so that gradients of gradients exist (the
    Jacobian-vector products of the spectral-norm property are VJPs of VJPs).

    Per channel, over its n elements, with r = rstd, xhat = (x - mean) r, v = w dy, the symmetric
    Jn = d xhat / d x = r (I - 11^T/n - xhat xhat^T/n) (training; eval: the statistics are constants, d xhat/dx = r I):

        training:  dx = Jn v,     eval: dx = w r dy;     dweight = sum dy xhat,   dbias = sum dy.

    For upstream gradients (u, a, c) of (dx, dweight, dbias) (a, c per channel), with m = <xhat, v>/n and
    F = <u, v> - mean(v) sum(u) - m <u, xhat> (every <.,.> and sum over the channel):

        training:  d/d dy = w Jn u + xhat a + c,   d/d weight = <dy, Jn u>,
                   d/d x  = Jn (dy a - r/n <u, xhat> v) - r m Jn u - r^2/n xhat F
        eval:      d/d dy = w r u + xhat a + c,    d/d weight = r <dy, u>,      d/d x = r a dy

    (kernels.functional._NormBackward's formulas for a row, here a channel with one weight). Jn is applied by the
    backward kernel without weight; the rest are channel sums in float32. Third derivatives are not provided."""

    @staticmethod
    def forward(ctx, dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, mean: torch.Tensor,
                rstd: torch.Tensor, batch_stats: bool, need_dx: bool, dweight_dtype: torch.dtype | None,
                dbias_dtype: torch.dtype | None):
        ctx.save_for_backward(dy, x, weight, mean, rstd)
        ctx.batch_stats = batch_stats
        return backward(dy, x, weight, mean, rstd, batch_stats, need_dx, dweight_dtype, dbias_dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, u: torch.Tensor | None, a: torch.Tensor | None, c: torch.Tensor | None):
        dy, x, weight, mean, rstd = ctx.saved_tensors
        channels = x.shape[1]
        per_channel = (1, channels) + (1,) * (x.dim() - 2)  # a [C] tensor broadcast over x
        summed = [0, *range(2, x.dim())]
        n = x.numel() // channels

        def channel_sum(t: torch.Tensor) -> torch.Tensor:
            return t.sum(summed, keepdim=True)

        def jn(t: torch.Tensor) -> torch.Tensor:
            return backward(t, x, None, mean, rstd, True, True, None, None)[0].float()

        r = rstd.view(per_channel)
        xhat = (x.float() - mean.view(per_channel)) * r
        w = torch.ones(per_channel, device=x.device) if weight is None else weight.float().view(per_channel)
        dy32 = dy.float()
        u = torch.zeros_like(xhat) if u is None else u.float()
        a = torch.zeros(per_channel, device=x.device) if a is None else a.float().view(per_channel)
        c = torch.zeros(per_channel, device=x.device) if c is None else c.float().view(per_channel)
        if ctx.batch_stats:
            jn_u = jn(u)
            v = w * dy32
            m = channel_sum(xhat * v) / n
            f = channel_sum(u * v) - channel_sum(v) / n * channel_sum(u) - m * channel_sum(u * xhat)
            grad_dy = w * jn_u + xhat * a + c
            grad_x = jn(dy32 * a - r / n * channel_sum(u * xhat) * v) - r * m * jn_u - r * r / n * xhat * f
            grad_w = channel_sum(dy32 * jn_u)
        else:
            grad_dy = w * r * u + xhat * a + c
            grad_x = r * a * dy32
            grad_w = r * channel_sum(dy32 * u)
        grad_w = None if weight is None else grad_w.view(channels).to(weight.dtype)
        return grad_dy.to(dy.dtype), grad_x.to(x.dtype), grad_w, None, None, None, None, None, None


def _check_channel_tensor(name: str, t: torch.Tensor | None, x: torch.Tensor) -> None:
    """None, or a tensor of shape [C] that our kernels read, on x's device."""
    if t is None:
        return
    rows.check_tensor(OP, name, t, like=x)
    if tuple(t.shape) != (x.shape[1],):
        raise ValueError(f"{OP}: {name} has shape {tuple(t.shape)}, expected ({x.shape[1]},) for x of shape "
                         f"{tuple(x.shape)} (one value per channel, dimension 1)")


def check_inputs(x: torch.Tensor, running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
                 weight: torch.Tensor | None, bias: torch.Tensor | None, training: bool,
                 momentum: float) -> None:
    """One-line TypeError/ValueError for what the kernels cannot run or torch refuses, worded as torch does where it
    refuses (n = 1 in training; one running buffer without the other; eval without running statistics)."""
    rows.check_tensor(OP, "x", x)
    if not 2 <= x.dim() <= 5:
        raise ValueError(f"{OP}: x must be [N, C] or [N, C, *spatial] of rank 2 to 5, got shape {tuple(x.shape)}")
    for name, t in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        _check_channel_tensor(name, t, x)
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float)):
        raise TypeError(f"{OP}: momentum must be a float, not {type(momentum).__name__}")
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"{OP}: running_mean and running_var must either both be None or neither be None")
    if not training and running_mean is None:
        raise ValueError(f"{OP}: running_mean and running_var must be defined in evaluation mode (training=False)")
    if x.numel() // max(x.shape[1], 1) >= 2**31:
        raise ValueError(f"{OP}: {x.numel() // x.shape[1]} elements per channel; at most 2^31 - 1 supported")
    if training and x.numel() == x.shape[1] and x.numel() > 0:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {x.size()}")


def batch_norm(x: torch.Tensor, running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
               weight: torch.Tensor | None = None, bias: torch.Tensor | None = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> torch.Tensor:
    """BatchNorm over x [N, C, *spatial], torch.nn.functional.batch_norm's contract: training normalizes each
    channel by its batch mean and population variance (float32) and updates the running buffers in place,
    running <- (1 - momentum) running + momentum batch (the variance unbiased, n / (n - 1)); eval normalizes by
    the running statistics, which it leaves untouched. y = (x - mean) / sqrt(var + eps) * weight + bias, like x
    (dtype, shape, memory format). Differentiable with respect to x, weight and bias, twice (_BatchNormBackward)."""
    check_inputs(x, running_mean, running_var, weight, bias, training, momentum)
    return rows.autograd_apply(_BatchNormFunction, x, running_mean, running_var, weight, bias, bool(training),
                               momentum, eps)
