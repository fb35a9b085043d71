"""Broken BatchNorm kernels (kind batchnorm, F.batch_norm's contract over x [N, C, *]): one torch implementation
(statistics per channel over N x spatial in float32, torch's running-statistics update, autograd backward) with
exactly one thing broken, each a bug class reported against real BatchNorms; the manifest (tests/corpus/__init__.py)
lists the claims that must catch each.

    BN_BIASED_RUNNING_VARIANCE   running_var updated with the population variance, not n/(n-1) times it
                                                                                    -> bn.running_statistics
    BN_UNBIASED_NORMALIZATION    the reverse: y normalized with the unbiased variance              -> bn.forward
    BN_KERAS_MOMENTUM            the momentum convention inverted: new = m old + (1 - m) batch
                                                                                    -> bn.running_statistics
    BN_UPDATED_TWICE             the running statistics updated twice per training call
                                                                                    -> bn.running_statistics
    BN_EVAL_BATCH_STATISTICS     eval mode normalizes with the batch's statistics        -> bn.eval, bn.coupling
    BN_EVAL_UPDATES_RUNNING      eval mode updates the running statistics too                      -> bn.eval
    BN_CHANNELS_LAST_IGNORED     reads a channels-last x's memory as if contiguous: the statistics over the wrong
                                 axes                                                    -> bn.layout_invariance
    BN_STATISTICS_DETACHED       the backward treats the batch mean and variance as constants     -> bn.jacobian
    BN_PER_SAMPLE_STATISTICS     statistics per (sample, channel): InstanceNorm, no coupling
                                                                                    -> bn.forward, bn.coupling
    BN_EPS_MISSING               rsqrt(var) without eps: 0 * inf = NaN on a constant channel      -> bn.degenerate
    BN_RUNNING_VAR_NAN_AT_ONE_ELEMENT  one element a channel: y is beta, but the running variance is updated with
                                 the unbiased 0 / 0 = NaN (torch/nn#1271)                         -> bn.degenerate
    BN_ONE_SAMPLE_PASSED_THROUGH at N = 1 (no batch to normalize over) y = gamma x + beta        -> bn.single_sample
    BN_INPUT_OVERWRITTEN         normalizes x in place                                     -> bn.inputs_unmodified
    SEED_002_MANUAL              seed 002's manual implementation: per-channel statistics with the population
                                 variance, no affine map, no running statistics     -> bn.forward,
                                                                                       bn.running_statistics
    BN_WIDE_BLOCKS               a channel's statistics over more than 4096 elements merged from blocks of equal
                                 weight (corpus.wide)                                             -> bn.forward
    BN_TRAINING_STEP_WITHOUT_BIAS  with x requiring grad (a training step's forward) the bias left out -> bn.forward
    BN_MOMENTUM_ZERO_UNSET       momentum 0 read as unset (momentum or 0.1)              -> bn.running_statistics
    BN_COUNT_IN_16_BITS          a channel's count kept in 16 bits: the unbiased factor of n mod 2^16 beyond 65 536
                                                                                    -> bn.running_statistics
    BN_CHANNELS_LAST_TAIL        channels-last, C not a multiple of 8: the last partial vector of channels one
                                 channel off                                             -> bn.layout_invariance
    BN_LARGE_BATCH_MERGE         more than 8 samples: each sample's statistics merged without the spread between the
                                 samples' means (Chan's n_a n_b / n delta^2 term dropped)          -> bn.forward
    BN_EVAL_BACKWARD_AS_TRAINING eval mode's forward, the training kernel's backward: dx with the terms through the
                                 batch mean and variance, dweight from the batch's x_hat (pytorch/pytorch#586, cuDNN's
                                 backward in eval mode; pytorch/xla#913, FluxML/NNlib.jl#548, apache/mxnet#9580)
                                                                                                  -> bn.jacobian
    BN_CHANNELS_LAST_BACKWARD    channels-last x: y right, the backward reads x's memory with NCHW strides (dx and
                                 dweight wrong; pytorch/pytorch#175189, MPS BatchNorm's backward on channels_last,
                                 weight.grad orders of magnitude off; #64100)            -> bn.layout_invariance
    BN_EVAL_RECORDING_BATCH      eval mode with x requiring grad (a frozen BatchNorm fine-tuned through) normalizes
                                 with the batch's statistics (keras-team/keras#9965, #4762)        -> bn.eval
    BN_COUNT_IN_X_DTYPE          the channel's count n held in x's 16-bit dtype when the sums are divided by it
                                 (2049 -> 2048 in float16; pytorch/pytorch#70901, fixed by PR #71050: the counts of
                                 batch_norm_gather_stats_with_counts in half)                      -> bn.forward
    BN_NONCONTIGUOUS_READ_AS_NCHW  an x neither contiguous nor channels-last (a permuted view, BatchNorm1d's
                                 x.transpose(1, 2) of [N, L, C], a channel slice) read as its memory in NCHW order
                                 (pytorch/pytorch#63224, fixed by #63392)                 -> bn.layout_invariance
    BN_RUNNING_BUFFERS_COPIED    the running buffers made contiguous with .contiguous(), the update written into the
                                 copy: a strided buffer never moves (pytorch/pytorch#33867)  -> bn.running_statistics
    BN_CHANNELS_BEYOND_GRID_Y    channels from 65 535 on (a grid's y extent) never normalized nor their running
                                 statistics updated (LBANN/lbann#1610)   -> bn.forward, bn.running_statistics,
                                                                            bn.eval (at scale)
    BN_GRADS_PACKED_BY_REQUIRES_GRAD  the backward packs its gradients by needs_input_grad: with the weight frozen
                                 the bias gets none, with x frozen the weight gets dbias (DeepLink-org/DIOPI#1322)
                                                                                                  -> bn.jacobian
    BN_PARAMS_DOWNCAST_TO_X_DTYPE  16-bit x: the float32 weight, bias and running statistics rounded to x's dtype
                                 before use (apple/coreai-torch#54)                    -> bn.forward, bn.eval
    BN_EVAL_FOLDED_IN_X_DTYPE    eval mode, 16-bit x: scale = w / sqrt(var + eps) and shift = b - mean scale folded
                                 and applied in x's dtype (pytorch/TensorRT#1450)                     -> bn.eval
    BN_RUNNING_STATS_VIA_HALF    16-bit x: the float32 running buffers' update rounded to x's dtype each step
                                 (NVIDIA/apex#144)                                       -> bn.running_statistics
    BN_NO_UPDATE_WITHOUT_AFFINE  no running update when weight and bias are None (apache/mxnet#18673)
                                                                                         -> bn.running_statistics
    BN_SYNC_UNEVEN_UNWEIGHTED    the batch split over two ranks (chunk(2)), their moments merged with equal weights:
                                 wrong for an odd batch (SyncBatchNorm before pytorch/pytorch#22248)
                                                                              -> bn.forward, bn.running_statistics
    BN_SYNC_DGRAD_UNEVEN         the forward right, the backward's mean_dy and mean_dy_xmu averaged over two uneven
                                 ranks with equal weights (pytorch/pytorch#36382)                  -> bn.jacobian
    BN_UPDATE_ONLY_WITH_GRAD     a training call updates the running statistics only with grad mode on: under
                                 torch.no_grad() / inference_mode (swa_utils.update_bn, precise-BN recalibration)
                                 they never move (facebookresearch/fairscale#1035, pytorch/pytorch#96136)
                                                                                         -> bn.running_statistics
    BN_RECOMPUTE_UPDATES_TWICE   a memory-saving BatchNorm whose backward recomputes the forward, running update
                                 included: a differentiated training step moves the buffers twice
                                 (pytorch/pytorch#96136, gpleiss/efficient_densenet_pytorch#73,
                                 Tencent/YOLO-Master#262)                                -> bn.running_statistics
    BN_LARGE_BATCH_CHUNKED       training with more than 65 535 samples split into chunks of 65 535, each
                                 normalized with its own statistics and updating the running buffers once
                                 (pytorch/pytorch#2917, #19911, #16998; PaddlePaddle/Paddle#43072)
                                                                    -> bn.forward, bn.running_statistics (at scale)
    BN_CORRECT                   the control: the same implementation, nothing broken

InstanceNorm with running statistics (kind instancenorm, F.instance_norm's contract), the same implementation with
statistics per (sample, channel) and the running update averaged over the samples:

    IN_STATISTICS_OVER_BATCH     BatchNorm's statistics (over the batch too)      -> in.forward, in.independence
    IN_BIASED_RUNNING_VARIANCE   the instances' population variance averaged      -> in.running_statistics
    IN_EVAL_BATCH_STATISTICS     eval mode normalizes with the instance statistics -> in.eval
    IN_CHANNELS_LAST_IGNORED     a channels-last x read as if contiguous          -> in.layout_invariance
    IN_STATISTICS_DETACHED       the backward holds the statistics constant       -> in.jacobian
    IN_ONE_PASS_VARIANCE         each instance's variance in one pass (float32)   -> in.forward
    IN_INSTANCES_BEYOND_GRID_Y   instances n C + c from 65 535 on never normalized (a grid's y extent,
                                 LBANN/lbann#1610, PaddlePaddle/Paddle#31144)      -> in.forward (at scale)
    IN_EPS_MISSING               rsqrt(var) without eps                           -> in.degenerate
    IN_INPUT_OVERWRITTEN         normalizes x in place                            -> in.inputs_unmodified
    IN_WIDE_BLOCKS               an instance's statistics merged from blocks of equal weight -> in.forward
    IN_EVAL_BACKWARD_AS_TRAINING use_input_stats=False's forward, the training backward (as BatchNorm's)
                                                                                                  -> in.jacobian
    IN_CHANNELS_LAST_BACKWARD    channels-last x: the backward reads x's memory as NCHW (pytorch/pytorch#111824,
                                 GroupNorm/InstanceNorm on channels_last; #175189)        -> in.layout_invariance
    IN_COUNT_IN_X_DTYPE          the instance's count held in x's 16-bit dtype (as BatchNorm's)  -> in.forward
    IN_NONCONTIGUOUS_READ_AS_NCHW  an x neither contiguous nor channels-last read as NCHW memory
                                 (flagos-ai/FlagGems#296: instance pid at in_ptr + pid * N; pytorch/pytorch#63224)
                                                                                          -> in.layout_invariance
    IN_RUNNING_VAR_FROM_RSTD     the running variance updated with 1 / rstd^2 = var + eps (flagos-ai/FlagGems#4885)
                                                                                         -> in.running_statistics
    IN_NO_BUFFERS_INPUT_STATISTICS  use_input_stats=False without running buffers normalizes with the instances'
                                 statistics where torch raises (openvinotoolkit/openvino#37954, apache/tvm#14963)
                                                                                                      -> in.eval
    IN_CORRECT                   the control
"""

from __future__ import annotations

import torch

from core.kernel import Kernel
from corpus.memory import read_as_if_contiguous, read_as_nchw_unless_dense
from corpus.wide import unweighted_block_moments

SPEC = "tests/corpus/batchnorm.py:"
GRID_Y = 65_535
SIXTEEN_BIT = (torch.float16, torch.bfloat16)


def _channels(x: torch.Tensor) -> tuple[int, ...]:
    """The axes a channel's statistics sum over: every axis but the channel axis 1."""
    return (0, *range(2, x.dim()))


def _instances(x: torch.Tensor) -> tuple[int, ...]:
    """The axes an instance's statistics sum over: the spatial ones."""
    return tuple(range(2, x.dim()))


def per_channel(t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return t.reshape((1, -1) + (1,) * (x.dim() - 2))


def with_gradient_of(value: torch.Tensor, path: torch.Tensor) -> torch.Tensor:
    """``value``'s values (bit for bit: path - path is 0 where path is finite) with ``path``'s gradient: a bug of the
    backward alone."""
    return value.detach() + (path - path.detach())


def is_channels_last(x: torch.Tensor) -> bool:
    """x [N, C, *] of rank 4 or 5 with its channels innermost in memory, not contiguous."""
    return x.dim() > 3 and x.stride(1) == 1 < x.shape[1] and not x.is_contiguous()


def count_in(dtype: torch.dtype, count: int) -> float:
    """A count of elements as a kernel keeping it in ``dtype`` holds it (rounded to 16 bits: pytorch#70901)."""
    return float(torch.tensor(float(count), dtype=dtype)) if dtype in (torch.float16, torch.bfloat16) else count


def two_ranks_unweighted(values: torch.Tensor, axes: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, population variance) over ``axes`` (keepdim) of the batch split over two ranks (``chunk(2)``), the
    ranks' moments merged with equal weights (SyncBatchNorm before pytorch/pytorch#22248): wrong for an odd batch."""
    chunks = values.chunk(2)
    means = [chunk.mean(axes, keepdim=True) for chunk in chunks]
    mean = sum(means) / len(chunks)
    variance = sum(chunk.var(axes, keepdim=True, unbiased=False) + (m - mean).square()
                   for chunk, m in zip(chunks, means, strict=True)) / len(chunks)
    return mean, variance


def _uneven_ranks_path(x: torch.Tensor, weight, bias, eps: float) -> torch.Tensor:
    """Training BatchNorm's y (in x's dtype) whose gradient is SyncBatchNorm's backward over two ranks holding the
    batch's ``chunk(2)`` with mean_dy and mean_dy_xmu each rank's mean averaged with equal weights
    (pytorch/pytorch#36382): dx = w rstd (dy - sum_i a_i dy_i - xhat sum_i a_i dy_i xhat_i), a_i = 1 / (2 n_rank(i)),
    the gradient of rstd (x - a S1 - a xhat S2) with S1 = sum x, S2 = sum xhat x (xhat, rstd held constant); right
    (a_i = 1 / n) when the ranks hold as many samples."""
    values = x.float()
    axes = _channels(x)
    with torch.no_grad():
        mean = values.mean(axes, keepdim=True)
        rstd = torch.rsqrt(values.var(axes, keepdim=True, unbiased=False) + eps)
        xhat = (values - mean) * rstd
    per_sample = values[:1, :1].numel()
    sizes = [chunk.shape[0] for chunk in values.chunk(2)]
    a = torch.cat([torch.full((size,), 1.0 / (len(sizes) * size * per_sample), device=x.device) for size in sizes])
    a = a.reshape(-1, *(1,) * (x.dim() - 1))
    z = rstd * (values - a * values.sum(axes, keepdim=True) - a * xhat * (xhat * values).sum(axes, keepdim=True))
    return _affine(xhat + (z - z.detach()), weight, bias).to(x.dtype)


class _PackedByRequiresGrad(torch.autograd.Function):
    """The identity on (x, weight, bias) (the given ones) whose backward packs the gradients of the inputs that
    require grad into the first slots, in order, then None (DeepLink-org/DIOPI#1322: batch_norm_backward's returned
    gradients not following requires_grad); a slot whose gradient has another shape than its input gets None (autograd
    would refuse it). Right when every input requires grad; with the weight frozen the bias gets none, with x frozen
    the weight gets dbias."""

    @staticmethod
    def forward(ctx, *inputs: torch.Tensor):
        ctx.shapes = [t.shape for t in inputs]
        return tuple(t.clone() for t in inputs)

    @staticmethod
    def backward(ctx, *grads: torch.Tensor):
        packed = [g for g, needed in zip(grads, ctx.needs_input_grad, strict=True) if needed]
        packed += [None] * (len(grads) - len(packed))
        return tuple(g if g is not None and g.shape == shape else None
                     for g, shape in zip(packed, ctx.shapes, strict=True))


class _RunningUpdateInBackward(torch.autograd.Function):
    """The identity on y whose backward runs the training call's running update once more, as a memory-saving
    BatchNorm recomputing its forward (running update included) to differentiate it."""

    @staticmethod
    def forward(ctx, y: torch.Tensor, values: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor,
                momentum: float, instance: bool) -> torch.Tensor:
        ctx.save_for_backward(values)
        ctx.buffers, ctx.momentum, ctx.instance = (running_mean, running_var), momentum, instance
        return y.clone()

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        (values,) = ctx.saved_tensors
        with torch.no_grad():
            running_update(values, *ctx.buffers, ctx.momentum, "", ctx.instance)
        return dy, None, None, None, None, None


def batchnorm(x, running_mean, running_var, weight, bias, training, momentum, eps, *, bug: str = "",
               instance: bool = False):
    if bug == "large_batch_chunked" and training and not instance and x.shape[0] > GRID_Y:
        # the batch split into chunks of GRID_Y samples, each a BatchNorm call of its own (its own statistics, its
        # own running update)
        return torch.cat([batchnorm(chunk, running_mean, running_var, weight, bias, training, momentum, eps)
                          for chunk in x.split(GRID_Y)])
    if bug == "no_buffers_input_statistics" and instance and not training and (
            running_mean is None or running_var is None):
        training = True  # eval without running statistics accepted: the instances' own statistics
    if bug == "grads_packed" and training:  # the training kernel's backward packs its gradients by requires_grad
        packed = iter(_PackedByRequiresGrad.apply(*(t for t in (x, weight, bias) if t is not None)))
        x, weight, bias = (None if t is None else next(packed) for t in (x, weight, bias))
        return batchnorm(x, running_mean, running_var, weight, bias, training, momentum, eps, instance=instance)
    if not training and (running_mean is None or running_var is None):  # as torch: eval needs running statistics
        raise RuntimeError("running_mean and running_var must be defined in evaluation mode")
    arguments = (running_mean, running_var, weight, bias, training, momentum, eps)
    if bug == "uneven_ranks_backward" and training and torch.is_grad_enabled() and x.shape[0] > 1 and not instance:
        # the forward right (its running update too), the backward SyncBatchNorm's over two uneven ranks
        return with_gradient_of(batchnorm(x, *arguments), _uneven_ranks_path(x, weight, bias, eps))
    if bug == "channels_last_backward" and is_channels_last(x) and torch.is_grad_enabled():
        # the forward right, the backward addressing x's channels-last memory with NCHW strides (as the forward of
        # BN_CHANNELS_LAST_IGNORED does): the gradient of the misread call, on copies of the running buffers
        y = batchnorm(x, *arguments, instance=instance)
        copies = [None if t is None else t.clone() for t in (running_mean, running_var)]
        misread = batchnorm(read_as_if_contiguous(x), *copies, *arguments[2:], instance=instance)
        return with_gradient_of(y, misread)
    row = x[:1].numel() // x.shape[1] if instance else x[:, :1].numel()  # a row of statistics' elements
    if bug == "eval_backward_as_training" and not training and torch.is_grad_enabled() and row > 1:
        # the eval forward, the training kernel's backward (through the batch's statistics; dweight from their
        # x_hat): the gradient of the training-mode call, without its running update
        y = batchnorm(x, *arguments, instance=instance)
        return with_gradient_of(y, batchnorm(x, None, None, weight, bias, True, momentum, eps, instance=instance))
    if bug == "channels_last":
        x = read_as_if_contiguous(x)
    if bug == "noncontiguous":  # only contiguous and channels-last x read right: any other view read as NCHW memory
        x = read_as_nchw_unless_dense(x)
    values = x.float()
    if bug == "channels_last_tail" and x.dim() > 2 and x.shape[1] % 8 and x.stride(1) == 1 < x.shape[1]:
        # the channels-last path's last partial vector of 8 channels reads its lanes one channel off
        tail = x.shape[1] // 8 * 8
        values = torch.cat([values[:, :tail], values[:, tail:].roll(1, dims=1)], dim=1)
    if bug == "one_sample" and training and x.shape[0] == 1:
        return _affine(values, weight, bias).to(x.dtype)
    use_batch = training or bug == "eval_batch"
    if bug == "eval_recording_batch" and torch.is_grad_enabled() and x.requires_grad:
        use_batch = True  # eval mode while recording (a frozen BatchNorm fine-tuned through): the batch's statistics
    if training and instance and x[0, 0].numel() == 1:
        raise ValueError("Expected more than 1 spatial element when training")  # as torch: no statistics to take
    if bug == "params_downcast" and x.dtype in SIXTEEN_BIT:  # float32 weight and bias rounded to x's dtype first
        weight, bias = (None if t is None else t.to(x.dtype) for t in (weight, bias))
    if bug == "eval_fold_storage" and not use_batch and x.dtype in SIXTEEN_BIT:
        # scale = w / sqrt(var + eps) and shift = b - mean scale computed, held and applied in x's dtype
        dtype = x.dtype
        rv, rm = running_var.to(dtype), running_mean.to(dtype)
        scale = (torch.ones_like(rv) if weight is None else weight.to(dtype)) / torch.sqrt(
            rv + torch.tensor(eps, dtype=dtype, device=x.device))
        shift = (torch.zeros_like(rv) if bias is None else bias.to(dtype)) - rm * scale
        return x * per_channel(scale, x) + per_channel(shift, x)
    if use_batch:
        per_instance = (bug == "per_sample") != instance and bug != "over_batch"
        axes = _instances(x) if per_instance else _channels(x)
        if bug == "wide_blocks":
            mean, variance = unweighted_block_moments(values, axes)
        elif bug == "large_batch_merge" and x.shape[0] > 8 and x.dim() > 2 and not per_instance:
            samples = _instances(x)  # each sample's channel statistics, then averaged: the between-sample term lost
            mean = values.mean(samples, keepdim=True).mean(0, keepdim=True)
            variance = values.var(samples, keepdim=True, unbiased=False).mean(0, keepdim=True)
        elif bug == "sync_unweighted" and not per_instance and x.shape[0] > 1:
            mean, variance = two_ranks_unweighted(values, axes)
        elif bug == "count_in_x_dtype":  # the sums divided by the row's count held in x's dtype
            count = count_in(x.dtype, values[:1].numel() // x.shape[1] if per_instance else values[:, 0].numel())
            mean = values.sum(axes, keepdim=True) / count
            variance = (values - mean).square().sum(axes, keepdim=True) / count
        else:
            mean = values.mean(axes, keepdim=True)
            variance = values.var(axes, keepdim=True, unbiased=bug == "unbiased_normalization")
            if bug == "one_pass":  # E[x^2] - E[x]^2 in float32: it cancels on rows of a large |mean|/std
                variance = (values.square().mean(axes, keepdim=True) - mean.square()).clamp_min(0.0)
        if bug == "detached":
            mean, variance = mean.detach(), variance.detach()
    else:
        rm, rv = running_mean, running_var
        if bug == "params_downcast" and x.dtype in SIXTEEN_BIT:  # the float32 running statistics too
            rm, rv = rm.to(x.dtype), rv.to(x.dtype)
        mean, variance = per_channel(rm.float(), x), per_channel(rv.float(), x)
    y = (values - mean) * torch.rsqrt(variance + (0.0 if bug == "eps_missing" else eps))
    if bug == "grid_y" and x.shape[0] * x.shape[1] > GRID_Y:  # instances n C + c past a grid's y extent unnormalized
        instances = torch.arange(x.shape[0] * x.shape[1], device=x.device).reshape(*x.shape[:2], *(1,) * (x.dim() - 2))
        y = torch.where(instances < GRID_Y, y, values)
    if bug == "channels_grid_y" and x.shape[1] > GRID_Y:  # channels past a grid's y extent never normalized
        y = torch.where(per_channel(torch.arange(x.shape[1], device=x.device) < GRID_Y, x), y, values)
    if bug == "recording_no_bias" and torch.is_grad_enabled() and x.requires_grad:
        bias = None  # the forward of a training step (cuDNN's is another kernel than inference's) drops the bias
    y = y if bug == "manual" else _affine(y, weight, bias)
    updates = (training or bug == "eval_updates") and not (
        bug == "no_update_without_affine" and weight is None and bias is None) and not (
        bug == "update_only_with_grad" and not torch.is_grad_enabled())
    if (bug == "recompute_updates_twice" and training and running_mean is not None and torch.is_grad_enabled()
            and y.requires_grad):  # the backward recomputes the forward, its running update included
        y = _RunningUpdateInBackward.apply(y, values.detach(), running_mean, running_var, momentum, instance)
    if updates and running_mean is not None and bug != "manual":
        with torch.no_grad():
            running_update(values, running_mean, running_var, momentum, bug, instance, storage=x.dtype, eps=eps)
            if bug == "twice":
                running_update(values, running_mean, running_var, momentum, bug, instance)
    if bug == "in_place":
        x.data.copy_(y.detach())
    return y.to(x.dtype)


def _affine(y: torch.Tensor, weight, bias) -> torch.Tensor:
    y = y if weight is None else y * per_channel(weight.float(), y)
    return y if bias is None else y + per_channel(bias.float(), y)


def running_update(values: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor, momentum: float,
            bug: str, instance: bool, *, storage: torch.dtype = torch.float32, eps: float = 0.0) -> None:
    """torch's running-statistics update, in place, broken as ``bug`` says (InstanceNorm: each instance's statistics
    averaged over the samples); ``storage``: x's dtype, ``eps``: the call's."""
    if bug == "buffers_copied":  # the update written into contiguous copies of the caller's buffers (lost if strided)
        running_mean, running_var = running_mean.contiguous(), running_var.contiguous()
    axes = _instances(values) if instance else _channels(values)
    count = values[:1].numel() // values.shape[1] if instance else values.numel() // values.shape[1]
    mean = values.mean(axes)
    # one element a channel: the unbiased variance is 0 / 0 (the bug "one_element_nan" stores that NaN, torch/nn#1271)
    variance = values.var(axes, unbiased=bug != "biased_running" and (count > 1 or bug == "one_element_nan"))
    if bug == "count_in_16_bits" and count > 65_536:  # n / (n - 1) with n kept in 16 bits: n mod 2^16
        kept = count % 65_536
        variance = values.var(axes, unbiased=False) * (kept / (kept - 1) if kept > 1 else 1.0)
    if bug == "var_from_rstd" and count > 1:  # the variance recovered from the saved rstd as 1 / rstd^2 = var + eps
        variance = (values.var(axes, unbiased=False) + eps) * (count / (count - 1))
    if bug == "sync_unweighted" and not instance and values.shape[0] > 1 and count > 1:
        moments = two_ranks_unweighted(values, axes)
        mean, variance = moments[0].reshape(-1), moments[1].reshape(-1) * (count / (count - 1))
    if instance:
        mean, variance = mean.mean(0), variance.mean(0)
    m = 1.0 - momentum if bug == "keras" else (momentum or 0.1) if bug == "momentum_zero_unset" else momentum
    new_mean = (1 - m) * running_mean.float() + m * mean
    new_var = (1 - m) * running_var.float() + m * variance
    if bug == "channels_grid_y":  # channels past a grid's y extent: their statistics never taken, never updated
        new_mean[GRID_Y:], new_var[GRID_Y:] = running_mean[GRID_Y:], running_var[GRID_Y:]
    if bug == "via_half" and storage in SIXTEEN_BIT:  # the float32 buffers' update round-tripped through x's dtype
        new_mean, new_var = new_mean.to(storage), new_var.to(storage)
    running_mean.copy_(new_mean.to(running_mean.dtype))
    running_var.copy_(new_var.to(running_var.dtype))


def _kernel(name: str, bug: str, description: str, kind: str = "batchnorm") -> Kernel:
    def fn(x, running_mean, running_var, weight, bias, training, momentum, eps):
        return batchnorm(x, running_mean, running_var, weight, bias, training, momentum, eps, bug=bug,
                          instance=kind == "instancenorm")

    return Kernel(name.lower(), kind, fn, spec=f"{SPEC}{name}", description=description)


BN_BIASED_RUNNING_VARIANCE = _kernel("BN_BIASED_RUNNING_VARIANCE", "biased_running",
                                     "running_var updated with the population variance: bn.running_statistics")
BN_UNBIASED_NORMALIZATION = _kernel("BN_UNBIASED_NORMALIZATION", "unbiased_normalization",
                                    "y normalized with the unbiased variance: bn.forward")
BN_KERAS_MOMENTUM = _kernel("BN_KERAS_MOMENTUM", "keras",
                            "Keras' momentum convention, new = m old + (1 - m) batch: bn.running_statistics")
BN_UPDATED_TWICE = _kernel("BN_UPDATED_TWICE", "twice",
                           "the running statistics updated twice per training call: bn.running_statistics")
BN_EVAL_BATCH_STATISTICS = _kernel("BN_EVAL_BATCH_STATISTICS", "eval_batch",
                                   "eval mode normalizes with the batch's statistics: bn.eval, bn.coupling")
BN_EVAL_UPDATES_RUNNING = _kernel("BN_EVAL_UPDATES_RUNNING", "eval_updates",
                                  "eval mode updates the running statistics: bn.eval")
BN_CHANNELS_LAST_IGNORED = _kernel("BN_CHANNELS_LAST_IGNORED", "channels_last",
                                   "a channels-last x read as if contiguous: bn.layout_invariance")
BN_STATISTICS_DETACHED = _kernel("BN_STATISTICS_DETACHED", "detached",
                                 "the backward holds the batch mean and variance constant: bn.jacobian")
BN_PER_SAMPLE_STATISTICS = _kernel("BN_PER_SAMPLE_STATISTICS", "per_sample",
                                   "statistics per (sample, channel), InstanceNorm's: bn.forward, bn.coupling")
BN_EPS_MISSING = _kernel("BN_EPS_MISSING", "eps_missing", "rsqrt(var) without eps: bn.degenerate")
BN_ONE_SAMPLE_PASSED_THROUGH = _kernel("BN_ONE_SAMPLE_PASSED_THROUGH", "one_sample",
                                       "at N = 1 y = gamma x + beta, no normalization: bn.single_sample")
BN_INPUT_OVERWRITTEN = _kernel("BN_INPUT_OVERWRITTEN", "in_place", "normalizes x in place: bn.inputs_unmodified")
SEED_002_MANUAL = _kernel("SEED_002_MANUAL", "manual",
                          "seed 002's manual BatchNorm, no affine map, no running statistics: bn.forward, "
                          "bn.running_statistics")
BN_WIDE_BLOCKS = _kernel("BN_WIDE_BLOCKS", "wide_blocks", "a channel's statistics over more than 4096 elements "
                         "merged from blocks of equal weight (corpus.wide): bn.forward")
BN_TRAINING_STEP_WITHOUT_BIAS = _kernel("BN_TRAINING_STEP_WITHOUT_BIAS", "recording_no_bias",
                                        "with x requiring grad (a training step) the bias is left out: bn.forward")
BN_LARGE_BATCH_MERGE = _kernel("BN_LARGE_BATCH_MERGE", "large_batch_merge",
                               "more than 8 samples: the samples' statistics merged without the spread between their "
                               "means: bn.forward")
BN_MOMENTUM_ZERO_UNSET = _kernel("BN_MOMENTUM_ZERO_UNSET", "momentum_zero_unset",
                                 "momentum 0 read as unset (momentum or 0.1): the running statistics move when they "
                                 "must stay: bn.running_statistics")
BN_CHANNELS_LAST_TAIL = _kernel("BN_CHANNELS_LAST_TAIL", "channels_last_tail",
                                "channels-last x with C not a multiple of 8: the last partial vector of channels read "
                                "one channel off: bn.layout_invariance")
BN_COUNT_IN_16_BITS = _kernel("BN_COUNT_IN_16_BITS", "count_in_16_bits",
                              "the count of a channel's elements kept in 16 bits: beyond 65 536 the running variance's "
                              "unbiased factor n / (n - 1) of n mod 2^16: bn.running_statistics")
BN_RUNNING_VAR_NAN_AT_ONE_ELEMENT = _kernel("BN_RUNNING_VAR_NAN_AT_ONE_ELEMENT", "one_element_nan",
                                            "one element a channel: y is beta, the running variance updated with the "
                                            "unbiased 0 / 0 = NaN (torch/nn#1271): bn.degenerate")
BN_EVAL_BACKWARD_AS_TRAINING = _kernel("BN_EVAL_BACKWARD_AS_TRAINING", "eval_backward_as_training",
                                       "eval mode's forward with the training backward (through the batch's "
                                       "statistics): bn.jacobian")
BN_CHANNELS_LAST_BACKWARD = _kernel("BN_CHANNELS_LAST_BACKWARD", "channels_last_backward",
                                    "channels-last x: the forward right, the backward reading x's memory as NCHW: "
                                    "bn.layout_invariance")
BN_EVAL_RECORDING_BATCH = _kernel("BN_EVAL_RECORDING_BATCH", "eval_recording_batch",
                                  "eval mode with x requiring grad normalizes with the batch's statistics: bn.eval")
BN_COUNT_IN_X_DTYPE = _kernel("BN_COUNT_IN_X_DTYPE", "count_in_x_dtype",
                              "the channel's count held in x's 16-bit dtype (8194 -> 8192) when the mean and variance "
                              "are formed: bn.forward")
BN_NONCONTIGUOUS_READ_AS_NCHW = _kernel(
    "BN_NONCONTIGUOUS_READ_AS_NCHW", "noncontiguous",
    "pytorch/pytorch#63224 (BatchNorm2d permutes data on a non-contiguous input; fixed by #63392): an x neither "
    "contiguous nor channels-last (a permuted view, BatchNorm1d's x.transpose(1, 2) of [N, L, C], a channel slice) "
    "read as its memory in NCHW order: bn.layout_invariance")
BN_RUNNING_BUFFERS_COPIED = _kernel(
    "BN_RUNNING_BUFFERS_COPIED", "buffers_copied",
    "pytorch/pytorch#33867 (cuDNN batchnorm with a non-contiguous running mean silently discards updates): the running "
    "buffers made contiguous with .contiguous(), the update written into the copy, a strided buffer never moves: "
    "bn.running_statistics")
BN_CHANNELS_BEYOND_GRID_Y = _kernel(
    "BN_CHANNELS_BEYOND_GRID_Y", "channels_grid_y",
    "LBANN/lbann#1610 (batchnorm kernels launched with the grid's y extent equal to the channel count, at most "
    "65 535): channels from 65 535 on never normalized (y = x there) and their running statistics never updated: "
    "bn.forward, bn.running_statistics, bn.eval (at scale)")
BN_GRADS_PACKED_BY_REQUIRES_GRAD = _kernel(
    "BN_GRADS_PACKED_BY_REQUIRES_GRAD", "grads_packed",
    "DeepLink-org/DIOPI#1322 (batch_norm_backward's returned gradients did not follow requires_grad): the training "
    "backward packs the gradients of the inputs that require grad into the first slots; with the weight frozen the "
    "bias gets no gradient, with x frozen the weight gets dbias: bn.jacobian")
BN_PARAMS_DOWNCAST_TO_X_DTYPE = _kernel(
    "BN_PARAMS_DOWNCAST_TO_X_DTYPE", "params_downcast",
    "apple/coreai-torch#54 (fp16 batch norm cast its float32 parameters down to fp16): with 16-bit x the float32 "
    "weight, bias and running statistics rounded to x's dtype before use: bn.forward, bn.eval")
BN_EVAL_FOLDED_IN_X_DTYPE = _kernel(
    "BN_EVAL_FOLDED_IN_X_DTYPE", "eval_fold_storage",
    "pytorch/TensorRT#1450 (batch_norm's scale and shift computed in fp16): eval mode with 16-bit x folds the running "
    "statistics into scale = w / sqrt(var + eps) and shift = b - mean scale in x's dtype and applies x scale + shift "
    "in x's dtype: bn.eval")
BN_RUNNING_STATS_VIA_HALF = _kernel(
    "BN_RUNNING_STATS_VIA_HALF", "via_half",
    "NVIDIA/apex#144 (network_to_half round-tripped the BatchNorm moments through half): with 16-bit x the float32 "
    "running buffers' update rounded to x's dtype each step: bn.running_statistics")
BN_NO_UPDATE_WITHOUT_AFFINE = _kernel(
    "BN_NO_UPDATE_WITHOUT_AFFINE", "no_update_without_affine",
    "apache/mxnet#18673 (running mean and var not updated when scale and center are False): without weight and bias "
    "the running statistics left as they were: bn.running_statistics")
BN_SYNC_UNEVEN_UNWEIGHTED = _kernel(
    "BN_SYNC_UNEVEN_UNWEIGHTED", "sync_unweighted",
    "pytorch/pytorch#22248 (SyncBatchNorm for variadic batch sizes: before it the ranks' moments were averaged as if "
    "each held as many samples): the batch split over two ranks (chunk(2)), their moments merged with equal weights, "
    "wrong for an odd batch: bn.forward, bn.running_statistics")
BN_SYNC_DGRAD_UNEVEN = _kernel(
    "BN_SYNC_DGRAD_UNEVEN", "uneven_ranks_backward",
    "pytorch/pytorch#36382 (SyncBN dgrad: the counts of variadic batch sizes not used for mean_dy and mean_dy_xmu): "
    "the forward right, the backward over two ranks (chunk(2)) averaging their mean_dy and mean_dy_xmu with equal "
    "weights, wrong for an odd batch: bn.jacobian")
BN_UPDATE_ONLY_WITH_GRAD = _kernel(
    "BN_UPDATE_ONLY_WITH_GRAD", "update_only_with_grad",
    "facebookresearch/fairscale#1035 (patch_batchnorm: a checkpointed BatchNorm accumulates statistics only when grad "
    "is enabled), pytorch/pytorch#96136: the running statistics updated only with torch.is_grad_enabled(); a "
    "training-mode call under torch.no_grad() / inference_mode (torch.optim.swa_utils.update_bn, precise-BN "
    "recalibration) normalizes with the batch's statistics but never moves the buffers (F.batch_norm updates them "
    "whatever the grad mode): bn.running_statistics")
BN_RECOMPUTE_UPDATES_TWICE = _kernel(
    "BN_RECOMPUTE_UPDATES_TWICE", "recompute_updates_twice",
    "pytorch/pytorch#96136 (torch.utils.checkpoint should avoid updating BatchNorm statistics twice), "
    "gpleiss/efficient_densenet_pytorch#73, Tencent/YOLO-Master#262: a memory-saving BatchNorm whose backward "
    "recomputes its forward, running update included: the forward alone right, every differentiated training step "
    "moves the buffers twice: bn.running_statistics")
BN_LARGE_BATCH_CHUNKED = _kernel(
    "BN_LARGE_BATCH_CHUNKED", "large_batch_chunked",
    "pytorch/pytorch#2917, #19911, #16998 and PaddlePaddle/Paddle#43072 (BatchNorm kernels failing beyond 65 535 "
    "samples; the usual workaround splits the batch): in training a batch of more than 65 535 samples processed in "
    "chunks of 65 535, each normalized with its own batch statistics and updating the running buffers once (twice "
    "for 65 536 to 131 070 samples); eval right: bn.forward, bn.running_statistics (at scale)")
BN_CORRECT = _kernel("BN_CORRECT", "", "the control: nothing broken")

IN_STATISTICS_OVER_BATCH = _kernel("IN_STATISTICS_OVER_BATCH", "over_batch",
                                   "BatchNorm's statistics: in.forward, in.independence", "instancenorm")
IN_BIASED_RUNNING_VARIANCE = _kernel("IN_BIASED_RUNNING_VARIANCE", "biased_running",
                                     "the population variance averaged: in.running_statistics", "instancenorm")
IN_EVAL_BATCH_STATISTICS = _kernel("IN_EVAL_BATCH_STATISTICS", "eval_batch",
                                   "eval mode with the instance statistics: in.eval", "instancenorm")
IN_CHANNELS_LAST_IGNORED = _kernel("IN_CHANNELS_LAST_IGNORED", "channels_last",
                                   "a channels-last x read as if contiguous: in.layout_invariance", "instancenorm")
IN_STATISTICS_DETACHED = _kernel("IN_STATISTICS_DETACHED", "detached",
                                 "the backward holds the statistics constant: in.jacobian", "instancenorm")
IN_EPS_MISSING = _kernel("IN_EPS_MISSING", "eps_missing", "rsqrt(var) without eps: in.degenerate", "instancenorm")
IN_INPUT_OVERWRITTEN = _kernel("IN_INPUT_OVERWRITTEN", "in_place", "normalizes x in place: in.inputs_unmodified",
                               "instancenorm")
IN_WIDE_BLOCKS = _kernel("IN_WIDE_BLOCKS", "wide_blocks", "an instance's statistics over more than 4096 elements "
                         "merged from blocks of equal weight (corpus.wide): in.forward", "instancenorm")
IN_ONE_PASS_VARIANCE = _kernel("IN_ONE_PASS_VARIANCE", "one_pass", "each instance's variance in one pass, E[x^2] - "
                               "E[x]^2 in float32: in.forward (ill-conditioned instances)", "instancenorm")
IN_INSTANCES_BEYOND_GRID_Y = _kernel("IN_INSTANCES_BEYOND_GRID_Y", "grid_y",
                                     "instances n C + c from 65 535 on never normalized (instances on a grid's y "
                                     "axis): in.forward (at scale)", "instancenorm")
IN_EVAL_BACKWARD_AS_TRAINING = _kernel("IN_EVAL_BACKWARD_AS_TRAINING", "eval_backward_as_training",
                                       "use_input_stats=False's forward with the training backward (through the "
                                       "instances' statistics): in.jacobian", "instancenorm")
IN_CHANNELS_LAST_BACKWARD = _kernel("IN_CHANNELS_LAST_BACKWARD", "channels_last_backward",
                                    "channels-last x: the forward right, the backward reading x's memory as NCHW: "
                                    "in.layout_invariance", "instancenorm")
IN_COUNT_IN_X_DTYPE = _kernel("IN_COUNT_IN_X_DTYPE", "count_in_x_dtype",
                              "the instance's count held in x's 16-bit dtype: in.forward", "instancenorm")
IN_NONCONTIGUOUS_READ_AS_NCHW = _kernel(
    "IN_NONCONTIGUOUS_READ_AS_NCHW", "noncontiguous",
    "flagos-ai/FlagGems#296 (instance_norm's Triton kernel addresses instance pid at in_ptr + pid * N) and "
    "pytorch/pytorch#63224's class: an x neither contiguous nor channels-last read as its memory in NCHW order: "
    "in.layout_invariance", "instancenorm")
IN_RUNNING_VAR_FROM_RSTD = _kernel(
    "IN_RUNNING_VAR_FROM_RSTD", "var_from_rstd",
    "flagos-ai/FlagGems#4885 (InstanceNorm's running variance recovered from the saved rstd as 1 / rstd^2, eps never "
    "subtracted): the running variance moves toward (var + eps) n / (n - 1): in.running_statistics", "instancenorm")
IN_NO_BUFFERS_INPUT_STATISTICS = _kernel(
    "IN_NO_BUFFERS_INPUT_STATISTICS", "no_buffers_input_statistics",
    "openvinotoolkit/openvino#37954 (the PyTorch frontend's instance_norm dispatching on whether running_mean / "
    "running_var are given, use_input_stats never read), apache/tvm#14963 (use_input_stats ignored): "
    "use_input_stats=False without running buffers silently normalizes with the instances' own statistics where torch "
    "raises (a converted model whose buffers were dropped evaluated with per-instance statistics): in.eval",
    "instancenorm")
IN_CORRECT = _kernel("IN_CORRECT", "", "the control: nothing broken", "instancenorm")
