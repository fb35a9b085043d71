"""Broken kernels modelled on real bug reports against GroupNorm, BatchNorm, InstanceNorm, LayerNorm over (C, *) and
the fused RMSNorm + quantize kernels (a red-team session's, each escaping the draws of its day): one torch
implementation per kind (statistics in float32, autograd backward; the quantized kinds as core.adapters.quantized)
with exactly one thing broken, on the path the real kernel takes by shape, layout or batch size; the manifest
(tests/corpus/__init__.py) lists the claims that must catch each.

    GN_BLOCK_STRADDLE_128     channels in blocks of 128: a group straddling a block boundary (C > 128, 128 not a
                              multiple of C/G: Stable Diffusion's C = 320, G = 32) normalized with each part's own
                              statistics (ONNX Runtime's NHWC GroupNorm, microsoft/onnxruntime#17869, #18091)
                                                                                           -> gn.forward
    GN_CHANNELS_LAST_MERGE_NO_SPREAD  channels-last x of 64 positions or more: the group's variance merged from its
                              channels' variances without the spread of their means (the NHWC => NC => NG reduction
                              of pytorch/pytorch#49821; NHWC GroupNorm bugs pytorch/pytorch#111824)
                                                                                           -> gn.layout_invariance
    GN_SPLIT_WHEN_FEW_GROUPS  declared batch_invariant: fewer than 132 groups in the batch (an H100's SMs) of more than
                              64 elements each: each group's sums split over 4 programs and merged; the same sample's
                              bits depend on N (apex's NHWC GroupNorm picks one or two passes by N G against the SM
                              count, NVIDIA/apex#1695; the split-reduction class of vllm-project/vllm#48271)
                                                                                           -> gn.batch_invariance
    GN_ATOMIC_DWEIGHT_FROM_32  declared deterministic: from 32 samples on dweight and dbias add the samples'
                              contributions in a random order each call (atomics on a large-batch path: Liger's
                              GroupNorm, karpathy/llm.c#190)                                -> gn.determinism
    GN_EPS_IN_X_DTYPE         eps rounded to x's dtype before use (in float16 1e-2 is 0.010002, 1e-12 is 0)
                                                                               -> gn.forward, gn.jacobian
    BN_CHANNELS_LAST_WELFORD_NONPOW2  channels-last x, C not a power of two, more than 4096 elements a channel: the
                              statistics over the channel's whole blocks of 4096 elements only, the partial last block
                              dropped (apex's welford_mean_var_c_last, NVIDIA/apex#1768)    -> bn.layout_invariance
    BN_EVAL_CHANNELS_LAST_HALF_C16  eval mode, 16-bit channels-last x of 16 channels or more: each element normalized
                              with the running statistics and parameters of the channel its memory offset has in NCHW
                              (pytorch/pytorch#62594: BatchNorm2d(64).eval().half() on channels-last x)
                                                                                           -> bn.layout_invariance
    BN_ATOMIC_DWEIGHT_CHANNELS_LAST  declared deterministic: channels-last x (an NHWC backward): dweight and dbias
                              add the samples' contributions in a random order each call (karpathy/llm.c#190's class)
                                                                                           -> bn.determinism
    IN_SPLIT_WHEN_FEW_INSTANCES  declared batch_invariant: GN_SPLIT_WHEN_FEW_GROUPS per instance (N C < 132 instances
                              of more than 64 elements)                                   -> in.batch_invariance
    CLN_ROWS_PER_CTA_4        from 4 samples on, samples 4 a program: samples 1-3 of each read the mean from the
                              previous sample's slot (a row-count path: pytorch/pytorch#149301, LayerNorm(x)[:-1] !=
                              LayerNorm(x[:-1]) from 23 to 24 rows; microsoft/onnxruntime#15410)
                                                                     -> cln.forward, cln.jacobian, cln.independence
    CLN_SPLIT_WHEN_FEW_SAMPLES  declared batch_invariant: GN_SPLIT_WHEN_FEW_GROUPS per sample (N < 132 samples of
                              more than 64 elements)                                      -> cln.batch_invariance
    RMS_BLOCK_SIZE_BY_TOKENS  declared batch_invariant: vLLM's fused RMSNorm, emulated: a thread block of 1024 threads
                              below 256 tokens, 256 from there, each thread summing columns t, t + T, ... then a tree
                              over warps: a row's sum changes with the batch only past 256 columns
                              (vllm-project/vllm#48271, fixed by vllm-project/vllm#48997)   -> rms.batch_invariance
    RMS_QUANT_BLOCK_SIZE_BY_TOKENS  the same, quantized                                 -> rms_quant.batch_invariance
    RMS_QUANT_WIDE_WEIGHT_INDEX  rows wider than 1024 (threads striding by 1024): the scale right, q from weight[i %
                              1024] (per-token quant kernels' wide-row path, sgl-project/sglang#8543)
                                                                                           -> rms_quant.values
    RMS_QUANT_GRID_STRIDE_SCALES  dynamic scales of 128 tokens or more (a grid of 128 programs striding over the
                              tokens): token t's scale written to scales[t % 128], scales[128:] never written (the
                              scale indexed by the program, vllm-project/compressed-tensors#394's class)
                                                                                           -> rms_quant.scales
    RMS_QUANT_SEQUENCE_AMAX   3-D x [B, S, d]: each dynamic per-token scale from the amax over the whole sequence
                              (vllm-project/compressed-tensors#394)                        -> rms_quant.scales
    RMS_QUANT_INT8_TRUNCATED  INT8 by a C cast (truncation toward zero), not rounding to nearest
                                                                         -> rms_quant.values, rms_quant.dequantized
    ADD_RMS_QUANT_RESIDUAL_IN_PLACE  x + residual written into the residual, undeclared (vLLM's fused_add_rms_norm
                              semantics behind the functional contract, vllm-project/vllm#6763)
                                                                                      -> add_rms_quant.residual_out
    ADD_RMS_QUANT_WRITES_X    y written into x, undeclared (vLLM's fused_add_rms_norm writes its output into
                              ``input``): q, the dequantized q and residual_out no longer those of the x given
                                 -> add_rms_quant.values, add_rms_quant.dequantized, add_rms_quant.residual_out
    {BN,IN,CLN,RMS_QUANT}_CONTROL_DECLARED_BITWISE  this file's implementations, nothing broken, declaring
                              batch_invariant and deterministic: the controls

Each kernel is correct in every other respect (the corpus runs a broken kernel on the claims of its entry).
"""

from __future__ import annotations

import itertools
import os

import torch
import torch.nn.functional as F

import corpus.batchnorm
from core.adapters.quantized import MINIMUM_SCALE, quantize, rms_float32
from core.kernel import Kernel, Quantization
from corpus.bitwise import left_to_right

SPEC = "tests/corpus/reported.py:"
CHANNEL_BLOCK = 128  # ONNX Runtime's NHWC GroupNorm: channels in blocks of 128
SPATIAL_TILE = 64  # an NHWC path's tile of positions
SM_COUNT = 132  # H100 SXM: fewer programs than this and a reduction is split over several
SPLIT_ABOVE, SPLIT_PARTS = 64, 4  # reductions longer than 64 split over 4 programs
ATOMIC_FROM = 32  # the samples from which a large-batch dweight reduction adds with atomics
WELFORD_BLOCK = 4096  # apex's channels-last Welford: elements a channel per block
HALF_CHANNELS_LAST_FROM = 16  # the channels from which a vectorized 16-bit channels-last eval path runs
ROWS_PER_PROGRAM = 4
BLOCK_SWITCH_TOKENS, WIDE_BLOCK, NARROW_BLOCK, WARP = 256, 1024, 256, 32  # vLLM's RMSNorm thread block
WEIGHT_STRIDE = 1024  # the threads of a block striding over a wide row
GRID = 128  # the programs of a grid-stride loop over the tokens
DECLARED = Quantization(minimum_scale=MINIMUM_SCALE)


# --- helpers shared by the kinds ---------------------------------------------------------------------------------


def _channels_last(x: torch.Tensor) -> bool:
    """x [N, C, H, W, ...] in channels-last memory (the channels adjacent), not also contiguous."""
    return x.dim() >= 4 and x.shape[1] > 1 and x.stride(1) == 1 and not x.is_contiguous()


def _split(programs: int, length: int) -> bool:
    """Whether a kernel splits each reduction over several programs: too few programs to fill the SMs, each with a
    long reduction."""
    return programs < SM_COUNT and length > SPLIT_ABOVE


def _split_moments(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and population variance over the last axis, [..., 1], each sum the :data:`SPLIT_PARTS` partial sums of
    as many programs merged in order: the same value as torch's ``mean``/``var``, other float32 bits."""

    def total(values: torch.Tensor) -> torch.Tensor:
        parts = [part.sum(-1) for part in torch.tensor_split(values, SPLIT_PARTS, -1)]
        return left_to_right(torch.stack(parts, -1), -1).unsqueeze(-1)

    count = rows.shape[-1]
    mean = total(rows) / count
    centred = rows - mean
    return mean, total(centred * centred) / count


def _per_sample(parameter: torch.Tensor, x: torch.Tensor, atomic: bool) -> torch.Tensor:
    """A per-channel parameter in float32, broadcast over x [N, C, *]; ``atomic``: one copy of it per sample, the
    copies taken in an order of the samples drawn anew each call, so that autograd sums the samples' contributions to
    its gradient in that order (as atomic adds arrive): the same forward, dweight's bits changing from call to call."""
    p = corpus.batchnorm.per_channel(parameter.float(), x)
    if not atomic:
        return p
    generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(7), "little"))
    order = torch.randperm(x.shape[0], generator=generator).to(x.device)
    return p.expand(x.shape[0], *p.shape[1:])[order]


def _affine(y: torch.Tensor, weight, bias, x: torch.Tensor, atomic: bool = False) -> torch.Tensor:
    """y * weight + bias per channel of x [N, C, *], in float32, cast to x's dtype (:func:`_per_sample`)."""
    y = y if weight is None else y * _per_sample(weight, x, atomic)
    return (y if bias is None else y + _per_sample(bias, x, atomic)).to(x.dtype)


# --- GroupNorm ----------------------------------------------------------------------------------------------------


def _group_moments(values: torch.Tensor, num_groups: int, bug: str, channels_last: bool):
    """Each sample's group statistics of x [N, C, *] in float32, per channel [N, C, 1, ...]."""
    n, channels = values.shape[:2]
    per_group = channels // num_groups
    grouped = values.reshape(n, num_groups, -1)
    spatial = grouped.shape[-1] // per_group
    if bug == "block_straddle" and channels > CHANNEL_BLOCK and CHANNEL_BLOCK % per_group:
        # each segment of a group inside one block of 128 channels normalized with its own statistics
        bounds = sorted({*range(0, channels, per_group), *range(0, channels, CHANNEL_BLOCK), channels})
        means, variances = [], []
        for lo, hi in itertools.pairwise(bounds):
            segment = values[:, lo:hi].reshape(n, -1)
            means.append(segment.mean(-1, keepdim=True).expand(-1, hi - lo))
            variances.append(segment.var(-1, keepdim=True, unbiased=False).expand(-1, hi - lo))
        mean, variance = torch.cat(means, 1), torch.cat(variances, 1)
    else:
        if bug == "merge_no_spread" and channels_last and spatial >= SPATIAL_TILE and per_group > 1:
            # NHWC => NC => NG: the group's moments merged from its channels' (equal counts), the spread of the
            # channels' means around the group's mean dropped from the variance
            channel_wise = values.reshape(n, num_groups, per_group, -1)
            mean = channel_wise.mean(-1).mean(-1, keepdim=True)
            variance = channel_wise.var(-1, unbiased=False).mean(-1, keepdim=True)
        elif bug == "split" and _split(n * num_groups, grouped.shape[-1]):
            mean, variance = _split_moments(grouped)
        else:
            mean, variance = grouped.mean(-1, keepdim=True), grouped.var(-1, keepdim=True, unbiased=False)
        mean, variance = (t.repeat_interleave(per_group, 1) for t in (mean, variance))
    trailing = (1,) * (values.dim() - 2)
    return mean.reshape(n, channels, *trailing), variance.reshape(n, channels, *trailing)


def _groupnorm(x, num_groups, weight, bias, eps, *, bug: str = ""):
    values = x.float()
    if bug == "eps_in_x_dtype":
        eps = float(torch.tensor(eps, dtype=x.dtype))
    mean, variance = _group_moments(values, num_groups, bug, _channels_last(x))
    y = (values - mean) * torch.rsqrt(variance + eps)
    return _affine(y, weight, bias, x, atomic=bug == "atomic_from_32" and x.shape[0] >= ATOMIC_FROM)


# --- BatchNorm, InstanceNorm ----------------------------------------------------------------------------------------


def _memory_channel(x: torch.Tensor) -> torch.Tensor:
    """For each element of a channels-last x [N, C, *], the channel its memory offset o has in NCHW: (o // S) % C,
    S the positions of a sample's channel."""
    n, channels, *spatial = x.shape
    positions = x[0, 0].numel()
    offsets = torch.arange(x.numel(), device=x.device).reshape(n, *spatial, channels).movedim(-1, 1)
    return offsets // positions % channels


def _batch_moments(values: torch.Tensor, x: torch.Tensor, instance: bool, bug: str):
    """The batch statistics the bug takes instead of torch's, per channel (per instance), or None where it does not
    apply."""
    n, channels = x.shape[:2]
    per_channel = values.numel() // channels
    if bug == "welford_nonpow2" and _channels_last(x) and channels & (channels - 1) and per_channel > WELFORD_BLOCK:
        rows = values.transpose(0, 1).reshape(channels, -1)  # each channel's elements in N H W order
        kept = rows[:, :rows.shape[1] // WELFORD_BLOCK * WELFORD_BLOCK]  # the partial last block dropped
        mean, variance = kept.mean(1), kept.var(1, unbiased=False)
        return corpus.batchnorm.per_channel(mean, x), corpus.batchnorm.per_channel(variance, x)
    if bug == "split" and instance and _split(n * channels, x[0, 0].numel()):
        mean, variance = _split_moments(values.reshape(n, channels, -1))
        trailing = (1,) * (x.dim() - 2)
        return mean.reshape(n, channels, *trailing), variance.reshape(n, channels, *trailing)
    return None


def _running_norm(x, running_mean, running_var, weight, bias, training, momentum, eps, *, instance: bool,
                  bug: str = ""):
    """tests/corpus/batchnorm.py's control (its statistics and running update), the affine map applied here."""
    values = x.float()
    batch = training or running_mean is None
    if (bug == "eval_channels_last_half" and not batch and _channels_last(x) and x.element_size() == 2
            and x.shape[1] >= HALF_CHANNELS_LAST_FROM):
        channel = _memory_channel(x)  # the bug: the per-channel tensors read at the wrong channel

        def at(t: torch.Tensor) -> torch.Tensor:
            return t.float()[channel]

        y = (values - at(running_mean)) * torch.rsqrt(at(running_var) + eps)
        y = y if weight is None else y * at(weight)
        return (y if bias is None else y + at(bias)).to(x.dtype)
    moments = _batch_moments(values, x, instance, bug) if batch else None
    if moments is None:
        y = corpus.batchnorm.batchnorm(values, running_mean, running_var, None, None, training, momentum, eps,
                                       instance=instance)
    else:
        mean, variance = moments
        y = (values - mean) * torch.rsqrt(variance + eps)
        if training and running_mean is not None:
            with torch.no_grad():
                corpus.batchnorm.running_update(values, running_mean, running_var, momentum, "", instance)
    return _affine(y, weight, bias, x, atomic=bug == "atomic_channels_last" and _channels_last(x))


# --- LayerNorm over (C, *) ------------------------------------------------------------------------------------------


def _channel_layernorm(x, weight, bias, eps, *, bug: str = ""):
    n = x.shape[0]
    rows = x.float().reshape(n, -1)
    if bug == "split" and _split(n, rows.shape[1]):
        mean, variance = _split_moments(rows)
    else:
        mean, variance = rows.mean(-1, keepdim=True), rows.var(-1, keepdim=True, unbiased=False)
    if bug == "rows_per_program" and n >= ROWS_PER_PROGRAM:
        # samples 4 a program; each but the first of a program reads its mean from the previous sample's slot
        sample = torch.arange(n, device=x.device)
        mean = mean[torch.where(sample % ROWS_PER_PROGRAM == 0, sample, sample - 1)]
    y = ((rows - mean) * torch.rsqrt(variance + eps)).reshape(x.shape)
    y = y if weight is None else y * weight.float()
    return (y if bias is None else y + bias.float()).to(x.dtype)


# --- RMSNorm, quantized ---------------------------------------------------------------------------------------------


def _thread_block_sum(values: torch.Tensor, threads: int) -> torch.Tensor:
    """The float32 sum over the last axis as a CUDA block of ``threads`` threads: thread t adds columns t, t + T, ...
    in order, then a tree over each warp's 32 lanes and a tree over the warps' sums (a CUB BlockReduce)."""
    d = values.shape[-1]
    steps = -(-d // threads)
    padded = F.pad(values, (0, steps * threads - d)).unflatten(-1, (steps, threads))
    per_thread = left_to_right(padded, -2)

    def tree(lanes: torch.Tensor) -> torch.Tensor:
        while lanes.shape[-1] > 1:
            half = lanes.shape[-1] // 2
            lanes = lanes[..., :half] + lanes[..., half:]
        return lanes[..., 0]

    warps = tree(per_thread.unflatten(-1, (threads // WARP, WARP)))
    return tree(F.pad(warps, (0, WARP - warps.shape[-1])))


def _rmsnorm(h, weight, eps: float, bug: str = "") -> torch.Tensor:
    """RMS(h) * weight in float32: core.adapters.quantized's, or with ``block_size_by_tokens`` vLLM's thread block
    sum, of 1024 threads below 256 tokens and 256 from there."""
    if bug != "block_size_by_tokens":
        return rms_float32(h, weight, eps)
    values = h.float()
    tokens = values[..., 0].numel()
    threads = WIDE_BLOCK if tokens < BLOCK_SWITCH_TOKENS else NARROW_BLOCK
    mean_square = _thread_block_sum(values * values, threads).unsqueeze(-1) / values.shape[-1]
    y = values * torch.rsqrt(mean_square + eps)
    return y if weight is None else y * weight.float()


def _rms_quant(x, weight, eps, scale, quant_dtype, *, bug: str = ""):
    """core.adapters.quantized's rmsnorm_quant (y rounded to x's dtype, then q = Q(y / s)) with the bug."""
    y = _rmsnorm(x, weight, eps, bug).to(x.dtype).float()
    if bug == "sequence_amax" and scale is None and x.dim() == 3:
        _, per_sequence = quantize(y.flatten(-2), None, quant_dtype)  # the amax over (S, d)
        scale = per_sequence.unsqueeze(-1).expand(*y.shape[:-1], 1).contiguous()
    q, s = quantize(y, scale, quant_dtype)
    if bug == "wide_weight_index" and weight is not None and x.shape[-1] > WEIGHT_STRIDE:
        wrapped = weight[torch.arange(x.shape[-1], device=weight.device) % WEIGHT_STRIDE]
        q, _ = quantize(rms_float32(x, wrapped, eps).to(x.dtype).float(), s, quant_dtype)
    if bug == "int8_truncated" and not quant_dtype.is_floating_point:
        limits = torch.iinfo(quant_dtype)
        q = torch.trunc(y / s.float()).clamp(limits.min, limits.max).to(quant_dtype)
    if bug == "grid_stride_scales" and scale is None and s[..., 0].numel() >= GRID:
        flat = s.reshape(-1)
        written = torch.empty_like(flat)  # scales[GRID:] never written
        last = torch.arange(flat.numel() - GRID, flat.numel(), device=flat.device)  # each slot's last writer
        written[last % GRID] = flat[last]
        s = written.reshape(s.shape)
    return q, s


def _add_rms_quant(x, residual, weight, eps, scale, quant_dtype, *, bug: str = ""):
    """core.adapters.quantized's add_rmsnorm_quant: residual_out = x + residual in the residual's dtype, then
    :func:`_rms_quant` of it, with the bug."""
    h = x if residual is None else (x.float() + residual.float()).to(residual.dtype)
    y = rms_float32(h, weight, eps).to(x.dtype)
    q, s = quantize(y.float(), scale, quant_dtype)
    if bug == "residual_in_place" and residual is not None:
        h = residual.copy_(h)
    if bug == "writes_x":
        x.copy_(y)
    return q, s, h


# --- the kernels ----------------------------------------------------------------------------------------------------

def _function(kind: str, bug: str):
    """The kind's function (core.kinds' signature) with the bug."""

    def groupnorm(x, num_groups, weight, bias, eps):
        return _groupnorm(x, num_groups, weight, bias, eps, bug=bug)

    def batchnorm(x, running_mean, running_var, weight, bias, training, momentum, eps):
        return _running_norm(x, running_mean, running_var, weight, bias, training, momentum, eps, instance=False,
                             bug=bug)

    def instancenorm(x, running_mean, running_var, weight, bias, training, momentum, eps):
        return _running_norm(x, running_mean, running_var, weight, bias, training, momentum, eps, instance=True,
                             bug=bug)

    def channel_layernorm(x, weight, bias, eps):
        return _channel_layernorm(x, weight, bias, eps, bug=bug)

    def rmsnorm(x, weight, eps):
        return _rmsnorm(x, weight, eps, bug).to(x.dtype)

    def rmsnorm_quant(x, weight, eps, scale, quant_dtype):
        return _rms_quant(x, weight, eps, scale, quant_dtype, bug=bug)

    def add_rmsnorm_quant(x, residual, weight, eps, scale, quant_dtype):
        return _add_rms_quant(x, residual, weight, eps, scale, quant_dtype, bug=bug)

    return locals()[kind]


def _kernel(name: str, kind: str, bug: str, description: str, **declarations) -> Kernel:
    if kind.endswith("_quant"):
        declarations.setdefault("quantization", DECLARED)
    return Kernel(name.lower(), kind, _function(kind, bug), spec=f"{SPEC}{name}", description=description,
                  **declarations)


def _control(name: str, kind: str) -> Kernel:
    return _kernel(name, kind, "", "this file's implementation, nothing broken, declared batch invariant and "
                   "deterministic: the control", batch_invariant=True, deterministic=True)


GN_BLOCK_STRADDLE_128 = _kernel(
    "GN_BLOCK_STRADDLE_128", "groupnorm", "block_straddle",
    "channels in blocks of 128: a group straddling a block's boundary normalized with each part's own statistics "
    "(microsoft/onnxruntime#17869, #18091): gn.forward")
GN_CHANNELS_LAST_MERGE_NO_SPREAD = _kernel(
    "GN_CHANNELS_LAST_MERGE_NO_SPREAD", "groupnorm", "merge_no_spread",
    "channels-last x of 64 positions or more: the group variance merged from its channels' without the spread of "
    "their means (pytorch/pytorch#49821's NHWC reduction): gn.layout_invariance")
GN_SPLIT_WHEN_FEW_GROUPS = _kernel(
    "GN_SPLIT_WHEN_FEW_GROUPS", "groupnorm", "split",
    "fewer than 132 groups of more than 64 elements: each group's sums split over 4 programs (NVIDIA/apex#1695): "
    "gn.batch_invariance", batch_invariant=True)
GN_ATOMIC_DWEIGHT_FROM_32 = _kernel(
    "GN_ATOMIC_DWEIGHT_FROM_32", "groupnorm", "atomic_from_32",
    "from 32 samples on dweight and dbias summed over the samples in a random order each call (atomics, "
    "karpathy/llm.c#190): gn.determinism", deterministic=True)
GN_EPS_IN_X_DTYPE = _kernel(
    "GN_EPS_IN_X_DTYPE", "groupnorm", "eps_in_x_dtype",
    "eps rounded to x's dtype (1e-12 is 0 in float16): gn.forward, gn.jacobian")
BN_CHANNELS_LAST_WELFORD_NONPOW2 = _kernel(
    "BN_CHANNELS_LAST_WELFORD_NONPOW2", "batchnorm", "welford_nonpow2",
    "channels-last x, C not a power of two, more than 4096 elements a channel: the statistics of its whole blocks "
    "of 4096 only (NVIDIA/apex#1768): bn.layout_invariance")
BN_EVAL_CHANNELS_LAST_HALF_C16 = _kernel(
    "BN_EVAL_CHANNELS_LAST_HALF_C16", "batchnorm", "eval_channels_last_half",
    "eval mode, 16-bit channels-last x of 16 channels or more: each element normalized as the channel of its memory "
    "offset in NCHW (pytorch/pytorch#62594): bn.layout_invariance")
BN_ATOMIC_DWEIGHT_CHANNELS_LAST = _kernel(
    "BN_ATOMIC_DWEIGHT_CHANNELS_LAST", "batchnorm", "atomic_channels_last",
    "channels-last x: dweight and dbias summed over the samples in a random order each call (atomics in an NHWC "
    "backward): bn.determinism", deterministic=True)
IN_SPLIT_WHEN_FEW_INSTANCES = _kernel(
    "IN_SPLIT_WHEN_FEW_INSTANCES", "instancenorm", "split",
    "fewer than 132 instances of more than 64 elements: each instance's sums split over 4 programs: "
    "in.batch_invariance", batch_invariant=True)
CLN_ROWS_PER_CTA_4 = _kernel(
    "CLN_ROWS_PER_CTA_4", "channel_layernorm", "rows_per_program",
    "from 4 samples on, 4 a program: samples 1-3 of each read the previous sample's mean (pytorch/pytorch#149301): "
    "cln.forward, cln.jacobian, cln.independence")
CLN_SPLIT_WHEN_FEW_SAMPLES = _kernel(
    "CLN_SPLIT_WHEN_FEW_SAMPLES", "channel_layernorm", "split",
    "fewer than 132 samples of more than 64 elements: each sample's sums split over 4 programs: "
    "cln.batch_invariance", batch_invariant=True)
RMS_BLOCK_SIZE_BY_TOKENS = _kernel(
    "RMS_BLOCK_SIZE_BY_TOKENS", "rmsnorm", "block_size_by_tokens",
    "a thread block of 1024 threads below 256 tokens, 256 from there (vllm-project/vllm#48271): rms.batch_invariance",
    batch_invariant=True)
RMS_QUANT_BLOCK_SIZE_BY_TOKENS = _kernel(
    "RMS_QUANT_BLOCK_SIZE_BY_TOKENS", "rmsnorm_quant", "block_size_by_tokens",
    "a thread block of 1024 threads below 256 tokens, 256 from there (vllm-project/vllm#48271): "
    "rms_quant.batch_invariance", batch_invariant=True)
RMS_QUANT_WIDE_WEIGHT_INDEX = _kernel(
    "RMS_QUANT_WIDE_WEIGHT_INDEX", "rmsnorm_quant", "wide_weight_index",
    "rows wider than 1024: the scale right, q from weight[i % 1024] (sgl-project/sglang#8543): rms_quant.values")
RMS_QUANT_GRID_STRIDE_SCALES = _kernel(
    "RMS_QUANT_GRID_STRIDE_SCALES", "rmsnorm_quant", "grid_stride_scales",
    "128 tokens or more: token t's scale written to scales[t % 128], the rest never written: rms_quant.scales")
RMS_QUANT_SEQUENCE_AMAX = _kernel(
    "RMS_QUANT_SEQUENCE_AMAX", "rmsnorm_quant", "sequence_amax",
    "3-D x: each token's dynamic scale from the sequence's amax (vllm-project/compressed-tensors#394): "
    "rms_quant.scales")
RMS_QUANT_INT8_TRUNCATED = _kernel(
    "RMS_QUANT_INT8_TRUNCATED", "rmsnorm_quant", "int8_truncated",
    "INT8 truncated toward zero, not rounded: rms_quant.values, rms_quant.dequantized")
ADD_RMS_QUANT_RESIDUAL_IN_PLACE = _kernel(
    "ADD_RMS_QUANT_RESIDUAL_IN_PLACE", "add_rmsnorm_quant", "residual_in_place",
    "x + residual written into the residual, undeclared (vllm-project/vllm#6763): add_rms_quant.residual_out")
ADD_RMS_QUANT_WRITES_X = _kernel(
    "ADD_RMS_QUANT_WRITES_X", "add_rmsnorm_quant", "writes_x",
    "y written into x, undeclared (vLLM's fused_add_rms_norm): add_rms_quant.values, add_rms_quant.dequantized, "
    "add_rms_quant.residual_out")
BN_CONTROL_DECLARED_BITWISE = _control("BN_CONTROL_DECLARED_BITWISE", "batchnorm")
IN_CONTROL_DECLARED_BITWISE = _control("IN_CONTROL_DECLARED_BITWISE", "instancenorm")
CLN_CONTROL_DECLARED_BITWISE = _control("CLN_CONTROL_DECLARED_BITWISE", "channel_layernorm")
RMS_QUANT_CONTROL_DECLARED_BITWISE = _control("RMS_QUANT_CONTROL_DECLARED_BITWISE", "rmsnorm_quant")
