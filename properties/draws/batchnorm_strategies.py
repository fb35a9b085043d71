"""Hypothesis strategies for the kinds with running statistics (BatchNorm, InstanceNorm): x [N, C, *spatial] of rank
2 to 5, the running buffers, per-channel weight and bias, the mode, the momentum and eps, built from
properties.draws.strategies' pieces.

x = scale (offset + z) per element, |offset| <= 10 (the running statistics' and the forward's bounds stay finite;
|mean|/std is the conditioning the bounds follow). The running buffers are [C] in the parameters' dtype (x's, or
float32 beside 16-bit x with both weight and bias: nn.BatchNorm's buffers follow its parameters; without weight and
bias x's or float32): a mean near the batch's and a positive variance, or None where the mode allows it (training). In
training mode a row of statistics has n >= 2 elements (N S per channel for BatchNorm, S per instance for
InstanceNorm; torch refuses n = 1: claim bn.degenerate, drawn on its own);
N = 1 is drawn (claim bn.single_sample: InstanceNorm), so is a constant channel (``constant``: variance 0).
"""

from __future__ import annotations

import math

import torch
from hypothesis import strategies as st

from core.capabilities import discover
from core.registry import Kernel
from properties.draws.strategies import (
    biases,
    effective_weights,
    epsilons,
    offset_ratios,
    parameter_dtypes,
    rounded,
    scales,
    seeds,
    standard_values,
    storage_backward_width,
    storage_dtypes,
    valid_offset_ratio,
)
from properties.norms import output_dtype

SAMPLES = (1, 2, 3, 4, 8, 16)  # 16: past a batched path's 8 samples
CHANNELS = (1, 2, 3, 4, 8, 12, 16)  # 12: not a multiple of 8 (a vectorized channels-last path's tail); 16: two of 8
SPATIAL = ((), (1,), (5,), (1, 1), (2, 3), (4, 4), (7, 9), (2, 2, 3))  # x of rank 2 to 5, as nn.BatchNorm1d/2d/3d
# 0 <= m <= 1 (claim bn.running_statistics); 1: the batch's own statistics; 0: the running statistics unchanged
MOMENTA = (0.1, 0.01, 0.5, 0.9, 1.0, 0.0)
MAX_OFFSET_RATIO = 10.0


@st.composite
def batchnorm_examples(draw, kernel: Kernel, *, training: bool | None = None, buffers: bool | None = None,
                       samples: tuple[int, ...] = SAMPLES, channels: tuple[int, ...] = CHANNELS,
                       spatial: tuple[tuple[int, ...], ...] = SPATIAL,
                       upstream: bool = False, every_input: bool = False, mixed: bool = False,
                       constant: bool = False, least: int = 2, dtypes: tuple[torch.dtype, ...] | None = None,
                       parameter_dtype: torch.dtype | None = None, ill_conditioned: bool = False,
                       offsets: tuple[float, ...] | None = None, max_elements: int | None = None) -> dict:
    """One example keyed by role (core.kinds), in ``training`` mode (drawn when None) with running buffers when
    ``buffers`` (drawn when None; always in eval mode); ``upstream``: dy in the output's dtype; ``every_input``:
    weight and bias present and random; ``mixed``/``parameter_dtype``: weight and bias in another dtype the kernel
    takes (strategies.parameter_dtypes); ``constant``: every channel constant; ``least``: the fewest elements per
    row of statistics in training mode (2: torch refuses 1); ``ill_conditioned``: |mean|/std of 1e4, capped at what
    the error model covers for a row of statistics (strategies.valid_offset_ratio; MAX_OFFSET_RATIO otherwise);
    ``offsets``: the |mean|/std targets drawn from (strategies.offset_ratios otherwise). With a 16-bit
    storage-precision backward's width limit (``upstream``, either mode), the sample counts that leave some spatial
    shape within it; ``max_elements``: the channels that keep N C S within it (the fewest otherwise)."""
    caps = discover(kernel)
    training = draw(st.booleans()) if training is None else training
    with_buffers = (not training or draw(st.booleans())) if buffers is None else buffers
    dtype = draw(storage_dtypes(kernel, dtypes))
    parameters = parameter_dtype or draw(parameter_dtypes(kernel, dtype, mixed))
    widest = storage_backward_width(kernel, dtype) if upstream else None

    def fitting(n: int) -> list[tuple[int, ...]]:
        per_row = n if kernel.record.batch_statistics else 1  # a row of statistics: N S or S elements
        return [s for s in spatial if (not training or per_row * math.prod(s) >= least)
                and (widest is None or per_row * math.prod(s) <= widest)]

    n_samples = draw(st.sampled_from([n for n in samples if fitting(n)] or samples))
    per_row = n_samples if kernel.record.batch_statistics else 1
    fits = fitting(n_samples)
    chosen = draw(st.sampled_from(fits))
    if max_elements is not None:
        channels = tuple(c for c in channels if n_samples * c * math.prod(chosen) <= max_elements) or (min(channels),)
    shape = (n_samples, draw(st.sampled_from(channels)), *chosen)
    channels = shape[1]
    limit = valid_offset_ratio(per_row * math.prod(shape[2:]), dtype) if ill_conditioned else MAX_OFFSET_RATIO
    targets = st.sampled_from([1e4, -1e4]) if ill_conditioned else offset_ratios(dtype)
    ratio = max(-limit, min(draw(targets if offsets is None else st.sampled_from(offsets)), limit))
    if widest is not None and widest < 1024:
        ratio = 0.0  # a 16-bit storage-precision backward's bound is finite on centred channels only
    scale = draw(scales(dtype))
    if constant:
        levels = scale * (ratio + standard_values((channels,), "normal", draw(seeds())))
        values = levels.reshape(1, channels, *(1,) * (len(shape) - 2)).expand(shape)
    else:
        values = scale * (ratio + standard_values(shape, "normal", draw(seeds())))
    example = {"x": rounded(values.contiguous(), dtype, caps.device), "training": training,
               "momentum": draw(st.sampled_from(MOMENTA)), "eps": draw(epsilons())}
    # weight and bias in another dtype than x come together, with the buffers in theirs (the mix the probe took:
    # torch's CPU kernels refuse a lone float32 bias, or float32 buffers beside 16-bit parameters); in x's dtype each
    # may be absent, the buffers in x's dtype, or without either in float32 too (F.instance_norm under autocast)
    every_input = every_input or parameters != dtype
    gamma = draw(effective_weights(channels, ("random", "zeros_and_negatives") if every_input else
                                   ("none", "constant", "random", "zeros_and_negatives")))
    example["weight"] = None if gamma is None else rounded(gamma, parameters, caps.device)
    beta = draw(biases(channels, ("random",) if every_input else ("none", "zeros", "random")))
    example["bias"] = None if beta is None else rounded(beta, parameters, caps.device)
    alone = example["weight"] is None and example["bias"] is None
    buffer_dtype = draw(st.sampled_from([dtype, torch.float32])) if alone and with_buffers else parameters
    buffers = draw(running_buffers(channels, scale, ratio, buffer_dtype, caps.device)) if with_buffers else (None, None)
    example["running_mean"], example["running_var"] = buffers
    if upstream:
        y_dtype = output_dtype(kernel, example["x"], example["weight"])
        example["dy"] = rounded(standard_values(shape, "normal", draw(seeds())), y_dtype, caps.device)
    return example


@st.composite
def running_buffers(draw, channels: int, scale: float, ratio: float, dtype: torch.dtype, device: str
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Running mean ~ scale (ratio + N(0, 1)) and running variance ~ scale^2 U(1/4, 4) per channel, in the
    parameters' dtype (nn.BatchNorm keeps its buffers in its parameters' dtype; torch's CPU batch_norm refuses
    buffers in another)."""
    mean = scale * (ratio + standard_values((channels,), "normal", draw(seeds())))
    spread = standard_values((channels,), "uniform", draw(seeds())).abs()
    variance = scale**2 * (0.25 + 3.75 * torch.clamp(spread, 0.0, 1.0))
    return rounded(mean, dtype, device), rounded(variance, dtype, device)
