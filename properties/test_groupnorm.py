"""GroupNorm kernels (kind groupnorm, x [N, C, *]): gn.forward, gn.jacobian, gn.degenerate, gn.layout_invariance,
gn.independence, gn.inputs_unmodified. The checks and the bounds they use: :mod:`properties.checks.groupnorm`."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from core.boundary import HOST
from core.capabilities import PROBED_DTYPES, discover, dtype_name
from properties import evidence
from properties.checks.contracts import (
    CHANNEL_INPUT_LAYOUTS,
    CHANNEL_UPSTREAM_LAYOUTS,
    channel_input,
    strided,
)
from properties.checks.forward import new_parameter_values
from properties.checks.groupnorm import (
    check_backward_of_the_recorded_graph,
    check_forward,
    check_forward_after_an_in_place_update,
    check_forward_with_parameter_dtypes,
    check_independence,
    check_input_layout,
    check_inputs_unmodified,
    check_invalid_groups_refused,
    check_noncontiguous_upstream,
    check_vjp,
)
from properties.draws.inexact_counts import OFFSET_RATIO, SIXTEEN_BIT, inexact_count
from properties.draws.strategies import (
    CHANNELS_LAST,
    WIDE_SPATIAL,
    biases,
    effective_weights,
    epsilons,
    mixed_parameter_examples,
    offset_ratios,
    over_parameter_mixes,
    parameter_dtypes,
    replacement_values,
    rounded,
    scales,
    seeds,
    standard_values,
    storage_backward_width,
    storage_dtypes,
    valid_offset_ratio,
)
from properties.norms import FROZEN_SUBSETS, output_dtype, require_backward, skip_unless_a_strict_subset
from properties.run import profiles

# 24 and 48: 16 channels or more in groups of a size not a power of two (3 or 6 a group, as Stable Diffusion's 960
# in 32 groups of 30), where a kernel indexing groups by a shift goes wrong
CHANNELS = (1, 2, 3, 4, 6, 8, 12, 24, 32, 48, 96)  # 96: 32 groups of 3, past a block of 64 channels
# x of rank 2 to 5, as torch's GroupNorm takes; (16, 16): 256 spatial elements, a multiple of 8 (vectorized paths)
SPATIAL = ((), (1,), (5,), (1, 1), (2, 3), (4, 4), (7, 9), (2, 2, 3), (16, 16))
MORE_SAMPLES = (5, 8)  # one draw in eight: batched paths past the 1 to 3 samples otherwise drawn
# past a block of 128 channels, in groups that straddle it (Stable Diffusion's 320 and 960 channels in 32 groups of 10
# and 30): a kernel that takes each block's statistics for its part of a group
MANY_CHANNELS = (320, 960)
MANY_CHANNELS_SPATIAL = ((), (1,), (2, 2))
# channels-last x up to 81 positions (8 x 8 and 9 x 9: a vectorized NHWC path's spatial tiles of 64 and their tail)
CHANNELS_LAST_SPATIAL = ((2, 3), (4, 4), (7, 9), (2, 2, 3), (8, 8), (9, 9))
MAX_GROUP_ELEMENTS = 16384  # N C S of one example at most (cheap under Triton's interpreter)


@st.composite
def groupnorm_examples(draw, kernel, spatial: tuple[tuple[int, ...], ...] = SPATIAL,
                       channels: tuple[int, ...] = CHANNELS, instance: bool = False,
                       upstream: bool = False, every_input: bool = False, dtypes: tuple[torch.dtype, ...] | None = None,
                       parameter_dtype: torch.dtype | None = None, mixed: bool = False, least_samples: int = 1,
                       ill_conditioned: bool = False, offsets: tuple[float, ...] | None = None) -> dict:
    """x [N, C, *spatial] (N from ``least_samples`` to 3, batch-1 inference included, one draw in eight 5 or 8; C of
    ``channels``, N C S at most MAX_GROUP_ELEMENTS; offset and scale), num_groups a divisor of C (C with
    ``instance``; one strictly between 1 and C half the time where C has one), per-channel weight and bias (in
    ``parameter_dtype`` when given, else x's or with ``mixed`` another dtype the kernel takes:
    strategies.parameter_dtypes); dy with ``upstream``. |mean|/std of x up to 10, or with ``ill_conditioned`` +-1e4
    capped at what the error model covers for a group's C/G S elements (strategies.valid_offset_ratio), one draw in
    two then with 5 or 8 samples (a batched path's statistics); ``offsets``: the |mean|/std targets drawn from
    (strategies.offset_ratios otherwise)."""
    caps = discover(kernel)
    dtype = draw(storage_dtypes(kernel, dtypes))
    parameters = parameter_dtype or draw(parameter_dtypes(kernel, dtype, mixed))
    widest = storage_backward_width(kernel, dtype) if upstream else None
    spatial = [s for s in spatial if widest is None or math.prod(s) <= widest]
    chosen = draw(st.sampled_from(spatial))
    channels = draw(st.sampled_from([c for c in channels if 3 * c * math.prod(chosen) <= MAX_GROUP_ELEMENTS]
                                    or [min(channels)]))
    divisors = [g for g in range(1, channels + 1) if channels % g == 0
                and (widest is None or channels // g * math.prod(chosen) <= widest)]
    between = [g for g in divisors if 1 < g < channels]  # neither LayerNorm nor InstanceNorm: drawn half the time
    pool = between if between and draw(st.booleans()) else divisors
    groups = channels if instance else draw(st.sampled_from(pool))
    # N >= 2 where a group has one element: torch's F.group_norm refuses N (C/G) S = 1 in training mode
    # (docs/findings.md, GroupNorm)
    least = max(least_samples, 2 if channels // groups * math.prod(chosen) == 1 else 1)
    more = [n for n in MORE_SAMPLES if n * channels * math.prod(chosen) <= MAX_GROUP_ELEMENTS]
    more_every = 2 if ill_conditioned else 8
    samples = (draw(st.sampled_from(more)) if more and draw(st.integers(1, more_every)) == more_every
               else draw(st.integers(least, 3)))
    shape = (samples, channels, *chosen)
    limit = 10.0 if widest is None else 0.0  # centred groups where the storage-precision bound is finite
    if ill_conditioned and widest is None:
        limit = valid_offset_ratio(channels // groups * math.prod(chosen), dtype)
    targets = st.sampled_from([1e4, -1e4]) if ill_conditioned else offset_ratios(dtype)
    ratio = max(-limit, min(draw(targets if offsets is None else st.sampled_from(offsets)), limit))
    values = draw(scales(dtype)) * (ratio + standard_values(shape, "normal", draw(seeds())))
    example = {"x": rounded(values, dtype, caps.device), "num_groups": groups, "eps": draw(epsilons())}
    gamma = draw(effective_weights(channels, ("random", "zeros_and_negatives") if every_input else
                                   ("none", "constant", "random", "zeros_and_negatives")))
    if gamma is None and kernel.weight_offset != 0:
        gamma = torch.ones(channels, dtype=torch.float64, device=HOST)
    example["weight"] = None if gamma is None else rounded(gamma - kernel.weight_offset, parameters, caps.device)
    beta = draw(biases(channels, ("random",) if every_input else ("none", "zeros", "random")))
    example["bias"] = None if beta is None else rounded(beta, parameters, caps.device)
    if upstream:
        y_dtype = output_dtype(kernel, example["x"], example["weight"])
        example["dy"] = rounded(standard_values(shape, "normal", draw(seeds())), y_dtype, caps.device)
    return example


@pytest.mark.claim("gn.forward")
@profiles.share(1.0)
@given(data=st.data())
def test_forward_matches_the_oracle(groupnorm_kernel, data):
    evidence.check(check_forward, groupnorm_kernel, data.draw(groupnorm_examples(groupnorm_kernel), "example"))


@pytest.mark.claim("gn.forward")
@pytest.mark.parametrize("dtype", PROBED_DTYPES, ids=dtype_name)
@profiles.share(0.2)
@given(data=st.data())
def test_forward_when_ill_conditioned(groupnorm_kernel, dtype, data):
    """Groups of |mean|/std as large as the error model covers (a one-pass variance fails there), half of the draws
    with 5 or 8 samples (a batched path of its own)."""
    example = groupnorm_examples(groupnorm_kernel, dtypes=(dtype,), ill_conditioned=True)
    evidence.check(check_forward, groupnorm_kernel, data.draw(example, "example"))


@pytest.mark.claim("gn.forward")
@pytest.mark.parametrize("dtype", SIXTEEN_BIT, ids=dtype_name)
@profiles.share(0.05)
@given(data=st.data())
def test_forward_at_a_count_16_bits_cannot_hold(groupnorm_kernel, dtype, data):
    """16-bit x with groups of (C/G) S elements that x's dtype cannot hold (properties.draws.inexact_counts: 2049 in
    float16, 259 in bfloat16; one channel a group) and |mean|/std of 10: a count kept in x's dtype shifts y by 10 of
    its unit roundoffs."""
    a, b = inexact_count(dtype)
    example = groupnorm_examples(groupnorm_kernel, spatial=((a * b,),), channels=(2,), instance=True, dtypes=(dtype,),
                                 offsets=(OFFSET_RATIO, -OFFSET_RATIO))
    evidence.check(check_forward, groupnorm_kernel, data.draw(example, "example"))


@pytest.mark.claim("gn.forward")
@profiles.share(0.1)
@given(data=st.data())
def test_a_number_of_groups_that_does_not_divide_the_channels_is_refused(groupnorm_kernel, data):
    """num_groups 0, or one that leaves a remainder of C (up to twice C): the call raises an error."""
    example = data.draw(groupnorm_examples(groupnorm_kernel, channels=(4, 6, 12, 24)), "example")
    channels = example["x"].shape[1]
    groups = data.draw(st.sampled_from([g for g in range(2 * channels + 1) if g == 0 or channels % g]), "num_groups")
    evidence.check(check_invalid_groups_refused, groupnorm_kernel, {**example, "num_groups": groups})


@pytest.mark.claim("gn.jacobian")
@profiles.share(0.75)
@given(data=st.data())
def test_vjp_matches_the_blockwise_jacobian(groupnorm_kernel, data):
    require_backward(groupnorm_kernel)
    example = data.draw(groupnorm_examples(groupnorm_kernel, upstream=True), "example")
    evidence.check(check_vjp, groupnorm_kernel, example)


@pytest.mark.claim("gn.jacobian")
@profiles.share(0.1)
@given(data=st.data())
def test_backward_of_the_recorded_graph(groupnorm_kernel, data):
    """x, weight, bias or y written in place between the forward and the backward, and a second backward of one graph
    (retain_graph=True): autograd's error for a saved tensor written since, or the recorded forward's gradients
    (properties.checks.graph)."""
    require_backward(groupnorm_kernel)
    example = data.draw(groupnorm_examples(groupnorm_kernel, upstream=True, every_input=True), "example")
    evidence.check(check_backward_of_the_recorded_graph, groupnorm_kernel, example)


@pytest.mark.claim("gn.forward")
@profiles.share(0.1)
@given(data=st.data())
def test_forward_after_an_in_place_weight_update(groupnorm_kernel, data):
    """A second call after weight and bias were overwritten in place (an optimizer step) reads their new values."""
    example = data.draw(groupnorm_examples(groupnorm_kernel, every_input=True), "example")
    evidence.check(check_forward_after_an_in_place_update, groupnorm_kernel,
                   {**example, **new_parameter_values(example)})


@pytest.mark.claim("gn.forward")
@profiles.share(0.25)
@given(data=st.data())
def test_forward_in_inference_mode(groupnorm_kernel, data):
    """Under torch.inference_mode(), as a serving stack calls it (grad mode off): kernels with a path of their own
    for inference (the other forward tests call them with grad mode on)."""
    example = data.draw(groupnorm_examples(groupnorm_kernel), "example")
    evidence.check(check_forward, groupnorm_kernel, {**example, "inference": True})


@pytest.mark.claim("gn.forward")
@profiles.share(0.25)
@given(data=st.data())
def test_forward_while_recording_a_graph(groupnorm_kernel, data):
    """x, weight and bias requiring grad, as in a training step."""
    example = data.draw(groupnorm_examples(groupnorm_kernel), "example")
    evidence.check(check_forward, groupnorm_kernel, {**example, "recording": True})


@pytest.mark.claim("gn.forward")
@pytest.mark.parametrize("spatial", WIDE_SPATIAL, ids=str)
@profiles.share(0.05)
@given(data=st.data())
def test_forward_of_groups_beyond_4096_elements(groupnorm_kernel, spatial, data):
    """Groups of (C/G) S from 4097 to 49152 elements (strategies.WIDE_SPATIAL, C of 1, 2, 4): kernels loop over the
    blocks of a group there."""
    example = groupnorm_examples(groupnorm_kernel, spatial=(spatial,), channels=(1, 2, 4))
    evidence.check(check_forward, groupnorm_kernel, data.draw(example, "example"))


@pytest.mark.claim("gn.forward")
@profiles.share(0.1)
@given(data=st.data())
def test_forward_of_many_channels(groupnorm_kernel, data):
    """320 and 960 channels (MANY_CHANNELS), in groups that cross a block of 128 channels, x contiguous or
    channels-last."""
    example = data.draw(groupnorm_examples(groupnorm_kernel, spatial=MANY_CHANNELS_SPATIAL, channels=MANY_CHANNELS),
                        "example")
    if example["x"].dim() >= 4 and data.draw(st.booleans(), "channels-last"):
        example["x"] = example["x"].to(memory_format=CHANNELS_LAST[example["x"].dim()])
    evidence.check(check_forward, groupnorm_kernel, example)


@pytest.mark.claim("gn.jacobian")
@pytest.mark.parametrize("spatial", WIDE_SPATIAL, ids=str)
@profiles.share(0.05)
@given(data=st.data())
def test_vjp_of_groups_beyond_4096_elements(groupnorm_kernel, spatial, data):
    """As the forward's, in the dtypes where the backward bound has no width limit (all but a declared 16-bit
    storage-precision backward's)."""
    require_backward(groupnorm_kernel)
    dtypes = tuple(t for t in PROBED_DTYPES if storage_backward_width(groupnorm_kernel, t) is None)
    example = groupnorm_examples(groupnorm_kernel, spatial=(spatial,), channels=(1, 2, 4), upstream=True,
                                 every_input=True, dtypes=dtypes)
    evidence.check(check_vjp, groupnorm_kernel, data.draw(example, "example"))


@pytest.mark.claim("gn.forward")
@over_parameter_mixes
@profiles.share(0.25)
@given(data=st.data())
def test_forward_with_parameters_in_another_dtype(groupnorm_kernel, mix, data):
    """float32 weight and bias with 16-bit x (autocast), 16-bit ones with float32 x: y in the output-dtype rule's
    dtype (x's, torch's), within the bound of the dtypes received."""
    example = mixed_parameter_examples(groupnorm_kernel, mix, groupnorm_examples)
    evidence.check(check_forward_with_parameter_dtypes, groupnorm_kernel, data.draw(example, "example"))


@pytest.mark.claim("gn.jacobian")
@over_parameter_mixes
@profiles.share(0.25)
@given(data=st.data())
def test_vjp_with_parameters_in_another_dtype(groupnorm_kernel, mix, data):
    """dx in x's dtype, dweight and dbias in the parameters' own dtype, each within its bound."""
    require_backward(groupnorm_kernel)
    example = mixed_parameter_examples(groupnorm_kernel, mix, groupnorm_examples, upstream=True)
    evidence.check(check_vjp, groupnorm_kernel, data.draw(example, "example"))


@pytest.mark.claim("gn.degenerate")
@profiles.share(0.5)
@given(data=st.data())
def test_instance_norm_at_spatial_size_one_gives_beta(groupnorm_kernel, data):
    example = groupnorm_examples(groupnorm_kernel, spatial=((), (1,), (1, 1)), instance=True)
    evidence.check(check_forward, groupnorm_kernel, data.draw(example, "example"))


def channels_last_example(example: dict) -> dict:
    """The example with x channels-last; one channel (contiguous in channels-last memory too) made two: x and -x,
    the parameters repeated (and dy, dy and -dy)."""
    if example["x"].shape[1] == 1:
        for name in ("x", "dy"):
            if name in example:
                example[name] = torch.cat([example[name], -example[name]], dim=1)
        for name in ("weight", "bias"):
            example[name] = None if example[name] is None else example[name].repeat(2)
    return {**example, "x": example["x"].to(memory_format=CHANNELS_LAST[example["x"].dim()])}


@pytest.mark.claim("gn.layout_invariance")
@profiles.share(0.5)
@given(data=st.data())
def test_channels_last_input(groupnorm_kernel, data):
    example = data.draw(groupnorm_examples(groupnorm_kernel, spatial=CHANNELS_LAST_SPATIAL, mixed=True), "example")
    evidence.check(check_input_layout, groupnorm_kernel, channels_last_example(example))


@pytest.mark.claim("gn.layout_invariance")
@profiles.share(0.5)
@given(data=st.data())
def test_channels_last_backward(groupnorm_kernel, data):
    """Channels-last x: y and (for one contiguous dy) dx, dweight, dbias those of the contiguous call (a backward
    that reads x or its x_hat with NCHW strides)."""
    require_backward(groupnorm_kernel)
    example = groupnorm_examples(groupnorm_kernel, spatial=CHANNELS_LAST_SPATIAL, upstream=True, every_input=True,
                                 mixed=True)
    evidence.check(check_input_layout, groupnorm_kernel, channels_last_example(data.draw(example, "example")))


@pytest.mark.claim("gn.layout_invariance")
@profiles.share(0.5)
@given(data=st.data())
def test_strided_input(groupnorm_kernel, data):
    """x with its channels innermost (a [N, L, C] activation seen as [N, C, L]), transposed, a slice of more
    channels, every other sample or element, NaN between its elements (contracts.CHANNEL_INPUT_LAYOUTS): y and, with
    a backward, (for one contiguous dy) dx, dweight, dbias those of the contiguous call (pytorch#63224, FlagGems#296:
    x read as if contiguous)."""
    backward = discover(groupnorm_kernel).backward
    example = groupnorm_examples(groupnorm_kernel, upstream=backward, every_input=backward, mixed=True)
    example = data.draw(example, "example")
    layout = data.draw(st.sampled_from(CHANNEL_INPUT_LAYOUTS), "layout")
    evidence.check(check_input_layout, groupnorm_kernel, {**example, "x": channel_input(example["x"], layout)})


@pytest.mark.claim("gn.jacobian")
@pytest.mark.parametrize("frozen", FROZEN_SUBSETS, ids="+".join)
@profiles.share(0.05)
@given(data=st.data())
def test_vjp_when_only_some_inputs_require_grad(groupnorm_kernel, frozen, data):
    """``frozen`` not requiring grad (norms.FROZEN_SUBSETS): each input that requires grad gets its gradient, as the
    oracle's."""
    require_backward(groupnorm_kernel)
    skip_unless_a_strict_subset(groupnorm_kernel, frozen, ("x", "weight", "bias"))
    example = data.draw(groupnorm_examples(groupnorm_kernel, upstream=True, every_input=True), "example")
    evidence.check(check_vjp, groupnorm_kernel, {**example, "frozen": frozen})


@pytest.mark.claim("gn.layout_invariance")
@profiles.share(0.5)
@given(data=st.data())
def test_strided_upstream_gradient(groupnorm_kernel, data):
    """dy strided, transposed, channels-last or expanded (autograd's upstream gradient of a sum has stride 0); weight
    and bias present (the gradients of every input)."""
    require_backward(groupnorm_kernel)
    # two samples at least: a dy of one element has no non-contiguous layout
    example = data.draw(groupnorm_examples(groupnorm_kernel, upstream=True, every_input=True, least_samples=2),
                        "example")
    dy = strided(example["dy"], data.draw(st.sampled_from(CHANNEL_UPSTREAM_LAYOUTS), "layout"))
    evidence.check(check_noncontiguous_upstream, groupnorm_kernel, {**example, "dy": dy})


@pytest.mark.claim("gn.independence")
@profiles.share(0.5)
@given(data=st.data())
def test_samples_and_groups_are_independent(groupnorm_kernel, data):
    example = data.draw(groupnorm_examples(groupnorm_kernel, mixed=True, least_samples=2), "example")
    other = replacement_values(example["x"], data.draw(seeds(), "other seed"))
    evidence.check(check_independence, groupnorm_kernel, {**example, "other": other})


@pytest.mark.claim("gn.inputs_unmodified")
@profiles.share(0.5)
@given(data=st.data())
def test_inputs_unmodified(groupnorm_kernel, data):
    example = data.draw(groupnorm_examples(groupnorm_kernel, upstream=True, every_input=True, mixed=True), "example")
    evidence.check(check_inputs_unmodified, groupnorm_kernel, example)
