"""Broken channel-wise LayerNorm kernels (kind channel_layernorm, LayerNorm over each sample's (C, *) elements of
x [N, C, *], weight and bias [C, *]): one torch implementation (statistics per sample in float32, element-wise weight
and bias, autograd backward) with exactly one thing broken; the manifest (tests/corpus/__init__.py) lists the claims
that must catch each.

    CLN_LAST_AXIS_ONLY          statistics over the last axis only (nn.LayerNorm(x.shape[-1:]))      -> cln.forward
    CLN_STATISTICS_OVER_BATCH   statistics over the whole batch                -> cln.forward, cln.independence
    CLN_CHANNELS_LAST_IGNORED   reads a channels-last x's memory as if contiguous          -> cln.layout_invariance
    CLN_VARIANCE_DETACHED       the variance a constant for autograd                               -> cln.jacobian
    CLN_INPUT_OVERWRITTEN       normalizes x in place                                      -> cln.inputs_unmodified
    CLN_TRAINING_STEP_WITHOUT_BIAS  with x requiring grad (a training step's forward) the bias left out -> cln.forward
    CLN_ONE_PASS_VARIANCE       each sample's variance in one pass, E[x^2] - E[x]^2 (float32)          -> cln.forward
    CLN_CHANNEL_BLOCKS_UNWEIGHTED  C > 64, not a multiple of 64: blocks of 64 channels merged with equal weights (the
                                fixed channel blocks of onnxruntime's GroupNorm, microsoft/onnxruntime#17869)
                                                                                                   -> cln.forward
    CLN_SAMPLES_BEYOND_GRID_Y   samples from 65 535 on never normalized (a grid's y extent, PaddlePaddle/Paddle#31144)
                                                                                        -> cln.forward (at scale)
    CLN_CHANNELS_LAST_BACKWARD  channels-last x: y right, the backward addresses x's memory with NCHW strides (the
                                class of pytorch/pytorch#175189, #111824 and linkedin/Liger-Kernel#883 in LayerNorm
                                over (C, *))                                           -> cln.layout_invariance
    CLN_COUNT_IN_X_DTYPE        the sample's count C S held in x's 16-bit dtype when its sums are divided by it
                                (2049 -> 2048 in float16; pytorch/pytorch#70901's class)           -> cln.forward
    CLN_NONCONTIGUOUS_READ_AS_NCHW  an x neither contiguous nor channels-last (a permuted or sliced view) read as
                                NCHW memory (pytorch/pytorch#63224's class)               -> cln.layout_invariance
    CLN_PARAMS_IN_X_DTYPE       16-bit x: the float32 [C, *] weight and bias rounded to x's dtype first
                                (pytorch/pytorch#81852's class)                         -> cln.forward, cln.jacobian
    CLN_CORRECT                 the control
"""

from __future__ import annotations

import torch

from core.kernel import Kernel
from corpus.batchnorm import count_in, is_channels_last, with_gradient_of
from corpus.memory import read_as_if_contiguous, read_as_nchw_unless_dense

SPEC = "tests/corpus/channel_layernorm.py:"
CHANNEL_BLOCK = 64
GRID_Y = 65_535


def _channel_layernorm(x, weight, bias, eps, *, bug: str = ""):
    if bug == "channels_last_backward" and is_channels_last(x) and torch.is_grad_enabled():
        # the forward right, the backward the gradient of the call on x's memory read with NCHW strides
        return with_gradient_of(_channel_layernorm(x, weight, bias, eps),
                                _channel_layernorm(read_as_if_contiguous(x), weight, bias, eps))
    if bug == "channels_last":
        x = read_as_if_contiguous(x)
    if bug == "noncontiguous":  # only contiguous and channels-last x read right: any other view read as NCHW memory
        x = read_as_nchw_unless_dense(x)
    if bug == "params_in_x_dtype" and x.dtype in (torch.float16, torch.bfloat16):
        weight, bias = (None if t is None else t.to(x.dtype) for t in (weight, bias))  # rounded to x's dtype first
    values = x.float()
    axes = {"last_axis": (-1,), "batch": tuple(range(x.dim()))}.get(bug, tuple(range(1, x.dim())))
    mean = values.mean(axes, keepdim=True)
    variance = values.var(axes, keepdim=True, unbiased=False)
    if bug == "count_in_x_dtype":  # the sums divided by the sample's count held in x's dtype
        count = count_in(x.dtype, x[0].numel())
        mean = values.sum(axes, keepdim=True) / count
        variance = (values - mean).square().sum(axes, keepdim=True) / count
    if bug == "one_pass":  # E[x^2] - E[x]^2 in float32: it cancels on samples of a large |mean|/std
        variance = (values.square().mean(axes, keepdim=True) - mean.square()).clamp_min(0.0)
    if bug == "channel_blocks" and x.shape[1] > CHANNEL_BLOCK and x.shape[1] % CHANNEL_BLOCK:
        # blocks of 64 channels, their moments merged with equal weights: the partial last block over-weighted
        blocks = values.split(CHANNEL_BLOCK, dim=1)
        means = [block.mean(axes, keepdim=True) for block in blocks]
        mean = sum(means) / len(blocks)
        variance = sum(block.var(axes, keepdim=True, unbiased=False) + (m - mean) ** 2
                       for block, m in zip(blocks, means, strict=True)) / len(blocks)
    if bug == "detached":
        variance = variance.detach()
    y = (values - mean) * torch.rsqrt(variance + eps)
    if bug == "grid_y" and x.shape[0] > GRID_Y:  # samples past a grid's y extent never normalized
        y = torch.where((torch.arange(x.shape[0], device=x.device) < GRID_Y).reshape(-1, *(1,) * (x.dim() - 1)),
                        y, values)
    y = y if weight is None else y * weight.float()
    if bug == "recording_no_bias" and torch.is_grad_enabled() and x.requires_grad:
        bias = None  # the forward of a training step (another kernel than inference's) drops the bias
    y = (y if bias is None else y + bias.float()).to(x.dtype)
    if bug == "in_place":
        x.data.copy_(y.detach())
    return y


def _kernel(name: str, bug: str, description: str) -> Kernel:
    def fn(x, weight, bias, eps):
        return _channel_layernorm(x, weight, bias, eps, bug=bug)

    return Kernel(name.lower(), "channel_layernorm", fn, spec=f"{SPEC}{name}", description=description)


CLN_LAST_AXIS_ONLY = _kernel("CLN_LAST_AXIS_ONLY", "last_axis", "statistics over the last axis only: cln.forward")
CLN_STATISTICS_OVER_BATCH = _kernel("CLN_STATISTICS_OVER_BATCH", "batch",
                                    "statistics over the whole batch: cln.forward, cln.independence")
CLN_CHANNELS_LAST_IGNORED = _kernel("CLN_CHANNELS_LAST_IGNORED", "channels_last",
                                    "a channels-last x read as if contiguous: cln.layout_invariance")
CLN_VARIANCE_DETACHED = _kernel("CLN_VARIANCE_DETACHED", "detached",
                                "the variance a constant for autograd: cln.jacobian")
CLN_INPUT_OVERWRITTEN = _kernel("CLN_INPUT_OVERWRITTEN", "in_place", "normalizes x in place: cln.inputs_unmodified")
CLN_TRAINING_STEP_WITHOUT_BIAS = _kernel("CLN_TRAINING_STEP_WITHOUT_BIAS", "recording_no_bias",
                                         "with x requiring grad (a training step) the bias is left out: cln.forward")
CLN_ONE_PASS_VARIANCE = _kernel("CLN_ONE_PASS_VARIANCE", "one_pass",
                                "each sample's variance in one pass, E[x^2] - E[x]^2 in float32: cln.forward")
CLN_CHANNEL_BLOCKS_UNWEIGHTED = _kernel("CLN_CHANNEL_BLOCKS_UNWEIGHTED", "channel_blocks",
                                        "more than 64 channels, not a multiple of 64: blocks of 64 channels merged "
                                        "with equal weights: cln.forward")
CLN_SAMPLES_BEYOND_GRID_Y = _kernel("CLN_SAMPLES_BEYOND_GRID_Y", "grid_y",
                                    "samples from 65 535 on never normalized (samples on a grid's y axis): "
                                    "cln.forward (at scale)")
CLN_CHANNELS_LAST_BACKWARD = _kernel("CLN_CHANNELS_LAST_BACKWARD", "channels_last_backward",
                                     "channels-last x: the forward right, the backward reading x's memory as NCHW: "
                                     "cln.layout_invariance")
CLN_COUNT_IN_X_DTYPE = _kernel("CLN_COUNT_IN_X_DTYPE", "count_in_x_dtype",
                               "the sample's count held in x's 16-bit dtype: cln.forward")
CLN_NONCONTIGUOUS_READ_AS_NCHW = _kernel(
    "CLN_NONCONTIGUOUS_READ_AS_NCHW", "noncontiguous",
    "pytorch/pytorch#63224's class: a LayerNorm over (C, *) with contiguous and channels-last paths only reads any "
    "other layout of x (a permuted or sliced view) as its memory in NCHW order: cln.layout_invariance")
CLN_PARAMS_IN_X_DTYPE = _kernel(
    "CLN_PARAMS_IN_X_DTYPE", "params_in_x_dtype",
    "pytorch/pytorch#81852's class (float32 LayerNorm parameters beside 16-bit x under autocast): the [C, *] weight "
    "and bias rounded to x's dtype first: cln.forward, cln.jacobian")
CLN_CORRECT = _kernel("CLN_CORRECT", "", "the control: nothing broken")
