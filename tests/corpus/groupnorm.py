"""Broken GroupNorm kernels (kind groupnorm, x [N, C, *]): one torch implementation (statistics per group in
float32, per-channel weight and bias, autograd backward) with exactly one thing broken; the manifest
(tests/corpus/__init__.py) lists the claims that must catch each.

    GN_STATISTICS_OVER_BATCH  group statistics over the batch axis too (N x group): wrong axis -> gn.forward,
                                                                                      gn.independence
    GN_GROUPS_INTERLEAVED     group g = channels c with c % G == g, not a run of C/G channels -> gn.forward,
                                                                                      gn.independence
    GN_CHANNELS_LAST_IGNORED  reads x's memory as if contiguous (NCHW)                    -> gn.layout_invariance
    GN_INPUT_OVERWRITTEN      normalizes x in place                                        -> gn.inputs_unmodified
    GN_VARIANCE_DETACHED      the variance a constant for autograd (its gradient dropped)  -> gn.jacobian
    GN_UNBIASED_VARIANCE      divides by m - 1: NaN on one-element groups                  -> gn.degenerate
    GN_TRAINING_STEP_WITHOUT_BIAS  with x requiring grad (a training step's forward) the bias left out -> gn.forward
    GN_WIDE_BLOCKS            a group's statistics over more than 4096 elements merged from blocks of equal weight
                              (corpus.wide)                                                -> gn.forward
    GN_GROUP_BY_SHIFT         16 channels or more: channel c's group c >> log2(C/G), right only when C/G is a power
                              of two (C = 24, 48 in groups of 3 or 6)                      -> gn.forward
    GN_CHANNEL_BLOCK_TAIL     C > 64, not a multiple of 64: the last block's groups share its first group's
                              statistics                                                   -> gn.forward
    GN_ONE_PASS_FROM_4_SAMPLES  4 to 1024 samples: the one-pass variance E[x^2] - E[x]^2 (a batched path)
                                                                                           -> gn.forward
    GN_CHANNELS_LAST_BACKWARD channels-last x: y right, the backward addresses x's memory with NCHW strides
                              (linkedin/Liger-Kernel#883; pytorch/pytorch#115940, PR #89485: GroupNorm's
                              channels-last backward)                                      -> gn.layout_invariance
    GN_COUNT_IN_X_DTYPE       the group's count held in x's 16-bit dtype when its sums are divided by it (2049 ->
                              2048 in float16; pytorch/pytorch#70901's class)              -> gn.forward
    GN_NONCONTIGUOUS_READ_AS_NCHW  an x neither contiguous nor channels-last (a permuted or sliced view) read as NCHW
                              memory (pytorch/pytorch#63224's class)                       -> gn.layout_invariance
    GN_NONDIVISIBLE_GROUPS_ACCEPTED  C % G != 0 accepted: groups of floor(C/G) channels, the rest in the last group,
                              where torch raises (pytorch/pytorch#74293, kuangliu/pytorch-groupnorm#3)  -> gn.forward
    GN_PARAMS_IN_X_DTYPE      16-bit x: float32 weight and bias rounded to x's dtype first (pytorch/pytorch#81852,
                              keras-team/keras#23070)                                      -> gn.forward, gn.jacobian
    GN_FRAMES_FOLDED_INTO_BATCH  5-D video x [N, C, T, H, W] normalized per frame, T folded into the batch
                              (mindspore-lab/mindone#169, lucidrains/video-diffusion-pytorch#23)        -> gn.forward
    GN_BACKWARD_ROWS_OF_LAST_DIM  4-D/5-D x: y right, the backward's reductions per row of the last axis (hidden =
                              dY.shape[-1]; linkedin/Liger-Kernel#1375, fixed by #1376)                -> gn.jacobian
    GN_SQUARE_IN_X_DTYPE      16-bit x: the deviations x - mean and their squares formed in x's dtype, only their sum
                              in float32 (neuroneural/brainchop-cli#56; reported_rows.py's RMS_SQUARE_IN_STORAGE for
                              GroupNorm)                                                   -> gn.forward, gn.jacobian
"""

from __future__ import annotations

import torch

from core.kernel import Kernel
from corpus.batchnorm import count_in, is_channels_last, with_gradient_of
from corpus.memory import read_as_if_contiguous, read_as_nchw_unless_dense
from corpus.wide import unweighted_block_moments

SPEC = "tests/corpus/groupnorm.py:"


def _groupnorm(x, num_groups, weight, bias, eps, *, bug: str = ""):
    if bug == "channels_last_backward" and is_channels_last(x) and torch.is_grad_enabled():
        # the forward right, the backward the gradient of the call on x's memory read with NCHW strides
        return with_gradient_of(_groupnorm(x, num_groups, weight, bias, eps),
                                _groupnorm(read_as_if_contiguous(x), num_groups, weight, bias, eps))
    if bug == "channels_last":
        x = read_as_if_contiguous(x)
    if bug == "noncontiguous":  # only contiguous and channels-last x read right: any other view read as NCHW memory
        x = read_as_nchw_unless_dense(x)
    if bug == "frames_folded" and x.dim() == 5:  # video [N, C, T, H, W]: each frame a sample of its own
        n, c, t, h, w = x.shape
        y = _groupnorm(x.transpose(1, 2).reshape(n * t, c, h, w), num_groups, weight, bias, eps)
        return y.reshape(n, t, c, h, w).transpose(1, 2)
    if bug == "backward_rows_of_last_dim" and x.dim() >= 4 and torch.is_grad_enabled():
        # y right; the backward that of a norm over each row of the last axis (W where H W was meant)
        values = x.float()
        mean, variance = values.mean(-1, keepdim=True), values.var(-1, keepdim=True, unbiased=False)
        shape = (1, x.shape[1]) + (1,) * (x.dim() - 2)
        rows = (values - mean) * torch.rsqrt(variance + eps)
        rows = rows if weight is None else rows * weight.float().reshape(shape)
        rows = rows if bias is None else rows + bias.float().reshape(shape)
        return with_gradient_of(_groupnorm(x, num_groups, weight, bias, eps), rows.to(x.dtype))
    n, channels = x.shape[:2]
    if bug == "nondivisible" and num_groups > 0 and channels % num_groups:  # accepted: floor(C/G) channels a group
        return _groups_of_the_floor(x, num_groups, weight, bias, eps)
    refuse_invalid_groups(x, num_groups)
    if bug == "params_in_x_dtype" and x.dtype in (torch.float16, torch.bfloat16):
        weight, bias = (None if t is None else t.to(x.dtype) for t in (weight, bias))  # rounded to x's dtype first
    values = x.float()
    per_group = channels // num_groups
    if bug == "shift" and channels >= 16 and per_group & (per_group - 1):
        # an NHWC kernel's group index c >> (bit_length(C/G) - 1), clamped to the last group: the channels are
        # regrouped in runs of a power of two, wrong where C/G is not one
        group_of = (torch.arange(channels, device=x.device) >> (per_group.bit_length() - 1)).clamp(max=num_groups - 1)
        return _groups_of(x, group_of, num_groups, weight, bias, eps)
    if bug == "interleaved":  # [N, C/G, G, S]: the groups along the faster channel axis
        grouped = values.reshape(n, channels // num_groups, num_groups, -1).transpose(1, 2).reshape(n, num_groups, -1)
    else:
        grouped = values.reshape(n, num_groups, -1)
    axes = (0, -1) if bug == "batch" else (-1,)  # the batch axis reduced too: BatchNorm's axis, per group
    if bug == "wide_blocks":
        mean, variance = unweighted_block_moments(grouped, axes)
    elif bug == "channel_block_tail" and channels > 64 and channels % 64:
        # channels in blocks of 64: the last partial block's statistics taken over its first group only
        mean = grouped.mean(axes, keepdim=True)
        variance = grouped.var(axes, keepdim=True, unbiased=False)
        tail = (channels // 64 * 64) // per_group
        mean = torch.cat([mean[:, :tail], mean[:, tail:tail + 1].expand(-1, num_groups - tail, -1)], dim=1)
        variance = torch.cat([variance[:, :tail], variance[:, tail:tail + 1].expand(-1, num_groups - tail, -1)], dim=1)
    elif bug == "count_in_x_dtype":  # the sums divided by the group's count held in x's dtype
        count = count_in(x.dtype, grouped.shape[-1])
        mean = grouped.sum(axes, keepdim=True) / count
        variance = (grouped - mean).square().sum(axes, keepdim=True) / count
    elif bug == "square_in_x_dtype" and x.dtype in (torch.float16, torch.bfloat16):
        mean = grouped.mean(axes, keepdim=True)
        deviations = grouped.to(x.dtype) - mean.to(x.dtype)  # the bug: x - mean and its square in x's dtype
        variance = (deviations * deviations).float().mean(axes, keepdim=True)
    elif bug == "one_pass_from_4_samples" and 4 <= n <= 1024:
        mean = grouped.mean(axes, keepdim=True)
        variance = (grouped.square().mean(axes, keepdim=True) - mean.square()).clamp_min(0.0)
    else:
        mean = grouped.mean(axes, keepdim=True)
        variance = grouped.var(axes, keepdim=True, unbiased=bug == "unbiased")
    if bug == "detached":
        variance = variance.detach()
    y = (grouped - mean) * torch.rsqrt(variance + eps)
    if bug == "interleaved":
        y = y.reshape(n, num_groups, channels // num_groups, -1).transpose(1, 2)
    y = y.reshape(values.shape)
    shape = (1, channels) + (1,) * (x.dim() - 2)
    y = y if weight is None else y * weight.float().reshape(shape)
    if bug == "recording_no_bias" and torch.is_grad_enabled() and x.requires_grad:
        bias = None  # the forward of a training step (another kernel than inference's) drops the bias
    y = (y if bias is None else y + bias.float().reshape(shape)).to(x.dtype)
    if bug == "in_place":
        x.data.copy_(y.detach())
    return y


def refuse_invalid_groups(x: torch.Tensor, num_groups: int) -> None:
    """Raises, as torch does, for a num_groups that is not a positive divisor of x's channels (gn.forward's test of
    an invalid num_groups): a kernel that reshapes x to [N, G, -1] would accept one where G divides C x spatial."""
    if num_groups <= 0 or x.shape[1] % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {tuple(x.shape)} and num_groups={num_groups}")


def _groups_of_the_floor(x, num_groups, weight, bias, eps):
    """C % G != 0 accepted: groups of floor(C/G) channels, the remaining channels in the last group."""
    channels = x.shape[1]
    group_of = (torch.arange(channels, device=x.device) // max(channels // num_groups, 1)).clamp(max=num_groups - 1)
    return _groups_of(x, group_of, num_groups, weight, bias, eps)


def _groups_of(x, group_of: torch.Tensor, num_groups: int, weight, bias, eps):
    """x normalized over the channels ``group_of`` puts in each of ``num_groups`` groups (a channel's group index),
    per-channel weight and bias, in float32, rounded to x's dtype."""
    values = x.float()
    y = torch.empty_like(values)
    for g in range(num_groups):
        members = (group_of == g).nonzero().flatten()
        if members.numel():
            part = values[:, members]
            axes = tuple(range(1, part.dim()))
            mean, variance = part.mean(axes, keepdim=True), part.var(axes, keepdim=True, unbiased=False)
            y[:, members] = (part - mean) * torch.rsqrt(variance + eps)
    shape = (1, x.shape[1]) + (1,) * (x.dim() - 2)
    y = y if weight is None else y * weight.float().reshape(shape)
    return (y if bias is None else y + bias.float().reshape(shape)).to(x.dtype)


def _kernel(name: str, bug: str, description: str) -> Kernel:
    def fn(x, num_groups, weight, bias, eps):
        return _groupnorm(x, num_groups, weight, bias, eps, bug=bug)

    return Kernel(name.lower(), "groupnorm", fn, spec=f"{SPEC}{name}", description=description)


GN_STATISTICS_OVER_BATCH = _kernel("GN_STATISTICS_OVER_BATCH", "batch",
                                   "group statistics over the batch axis too: gn.forward, gn.independence")
GN_GROUPS_INTERLEAVED = _kernel("GN_GROUPS_INTERLEAVED", "interleaved",
                                "groups of every G-th channel, not runs of C/G channels: gn.forward, gn.independence")
GN_CHANNELS_LAST_IGNORED = _kernel("GN_CHANNELS_LAST_IGNORED", "channels_last",
                                   "channels-last layout ignored: gn.layout_invariance")
GN_INPUT_OVERWRITTEN = _kernel("GN_INPUT_OVERWRITTEN", "in_place", "writes y into x: gn.inputs_unmodified")
GN_VARIANCE_DETACHED = _kernel("GN_VARIANCE_DETACHED", "detached",
                               "variance term missing from the backward: gn.jacobian")
GN_UNBIASED_VARIANCE = _kernel("GN_UNBIASED_VARIANCE", "unbiased",
                               "unbiased variance: NaN on one-element groups: gn.degenerate")
GN_WIDE_BLOCKS = _kernel("GN_WIDE_BLOCKS", "wide_blocks", "a group's statistics over more than 4096 elements merged "
                         "from blocks of equal weight (corpus.wide): gn.forward")
GN_TRAINING_STEP_WITHOUT_BIAS = _kernel("GN_TRAINING_STEP_WITHOUT_BIAS", "recording_no_bias",
                                        "with x requiring grad (a training step) the bias is left out: gn.forward")
GN_GROUP_BY_SHIFT = _kernel("GN_GROUP_BY_SHIFT", "shift", "16 channels or more: channel c's group is c >> "
                            "log2(C/G), wrong where C/G is not a power of two (an NHWC kernel's index): gn.forward")
GN_ONE_PASS_FROM_4_SAMPLES = _kernel("GN_ONE_PASS_FROM_4_SAMPLES", "one_pass_from_4_samples",
                                     "4 to 1024 samples (a batched path): the variance E[x^2] - E[x]^2 in float32, "
                                     "cancelling for groups far from zero: gn.forward")
GN_CHANNEL_BLOCK_TAIL = _kernel("GN_CHANNEL_BLOCK_TAIL", "channel_block_tail",
                                "more than 64 channels, not a multiple of 64: the groups of the last partial block "
                                "of 64 channels all take its first group's statistics: gn.forward")
GN_CHANNELS_LAST_BACKWARD = _kernel("GN_CHANNELS_LAST_BACKWARD", "channels_last_backward",
                                    "channels-last x: the forward right, the backward reading x's memory as NCHW: "
                                    "gn.layout_invariance")
GN_COUNT_IN_X_DTYPE = _kernel("GN_COUNT_IN_X_DTYPE", "count_in_x_dtype",
                              "the group's count held in x's 16-bit dtype: gn.forward")
GN_NONCONTIGUOUS_READ_AS_NCHW = _kernel(
    "GN_NONCONTIGUOUS_READ_AS_NCHW", "noncontiguous",
    "pytorch/pytorch#63224's class (a norm kernel with contiguous and channels-last paths only): any other layout of "
    "x, a permuted or sliced view, read as its memory in NCHW order: gn.layout_invariance")
GN_NONDIVISIBLE_GROUPS_ACCEPTED = _kernel(
    "GN_NONDIVISIBLE_GROUPS_ACCEPTED", "nondivisible",
    "pytorch/pytorch#74293 (report an error if num_channels is not divisible by num_groups) and "
    "kuangliu/pytorch-groupnorm#3 (\"robust when C not divisible by G\"): C % G != 0 accepted silently, groups of "
    "floor(C/G) channels with the rest in the last group, where torch raises: gn.forward")
GN_PARAMS_IN_X_DTYPE = _kernel(
    "GN_PARAMS_IN_X_DTYPE", "params_in_x_dtype",
    "pytorch/pytorch#81852 (mixed dtypes for GroupNorm: float32 gamma and beta beside bfloat16 x) and "
    "keras-team/keras#23070 (GroupNormalization's gamma and beta read in float16 under mixed precision): float32 "
    "weight and bias rounded to x's 16-bit dtype first: gn.forward, gn.jacobian")
GN_FRAMES_FOLDED_INTO_BATCH = _kernel(
    "GN_FRAMES_FOLDED_INTO_BATCH", "frames_folded",
    "mindspore-lab/mindone#169 (temporal GroupNorm: the transpose and reshape around it) and "
    "lucidrains/video-diffusion-pytorch#23: a 5-D video x [N, C, T, H, W] normalized per frame (T folded into the "
    "batch), not over each group's C/G x T x H x W elements: gn.forward")
GN_BACKWARD_ROWS_OF_LAST_DIM = _kernel(
    "GN_BACKWARD_ROWS_OF_LAST_DIM", "backward_rows_of_last_dim",
    "linkedin/Liger-Kernel#1375 (fixed by #1376: group_norm_backward took hidden_size = dY.shape[-1], W where H W was "
    "meant, for 4-D and 5-D x): the forward right, the backward's reductions per row of the last axis: gn.jacobian")
GN_SQUARE_IN_X_DTYPE = _kernel(
    "GN_SQUARE_IN_X_DTYPE", "square_in_x_dtype",
    "neuroneural/brainchop-cli#56 (GroupNorm's per-element square runs in float16 before the float32 accumulation: "
    "conv outputs above ~256 overflow, 256^2 > 65504): for 16-bit x the deviations x - mean and their squares formed "
    "in x's dtype, only their sum in float32 (float16 squares overflow to inf or underflow to subnormals; bfloat16 "
    "loses mantissa): gn.forward, gn.jacobian")
GN_CORRECT = _kernel("GN_CORRECT", "", "the same implementation, unbroken: the control")
