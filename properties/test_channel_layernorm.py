"""LayerNorm over each sample's (C, *) elements (kind channel_layernorm, nn.LayerNorm(x.shape[1:]) of x [N, C, *],
weight and bias [C, *]): cln.forward, cln.jacobian, cln.independence, cln.layout_invariance, cln.inputs_unmodified.

Its kind record's scope is the sample, so properties.norms and properties.bounds.tolerance give its reference and
bounds on the view [N, 1, C S] with the element-wise weight: GroupNorm's checks (properties.checks.groupnorm) with one
group apply as they are, each sample one group."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

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
    check_independence,
    check_input_layout,
    check_inputs_unmodified,
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
    offset_ratios,
    parameter_dtypes,
    replacement_values,
    rounded,
    scales,
    seeds,
    standard_values,
    storage_dtypes,
    valid_offset_ratio,
)
from properties.norms import FROZEN_SUBSETS, output_dtype, require_backward, skip_unless_a_strict_subset
from properties.run import profiles

CHANNELS = (1, 2, 3, 4, 8)
MORE_SAMPLES = (5, 8)  # one draw in eight: a path that takes several samples a program (from 4 on)
LARGE_BATCH, LARGE_BATCH_SAMPLE = 4099, (2, 32)  # samples of 64 elements past 4096 samples
SPATIAL = ((), (1,), (5,), (2, 3), (4, 4), (7, 9), (2, 2, 3))  # x of rank 2 to 5
MAX_OFFSET_RATIO = 10.0


@st.composite
def channel_layernorm_examples(draw, kernel, spatial: tuple[tuple[int, ...], ...] = SPATIAL,
                               channels: tuple[int, ...] = CHANNELS, upstream: bool = False,
                               every_input: bool = False, mixed: bool = False, least_samples: int = 1,
                               samples: int | None = None, dtypes: tuple[torch.dtype, ...] | None = None,
                               ill_conditioned: bool = False, offsets: tuple[float, ...] | None = None) -> dict:
    """x [N, C, *spatial] (N ``samples``, else from ``least_samples`` to 3, batch-1 inference included, one draw in
    eight 5 or 8; offset and scale), weight and
    bias [C, *spatial] (element-wise, in x's dtype or with ``mixed`` another the kernel takes), eps; dy with
    ``upstream``; ``dtypes``: x's among them; ``ill_conditioned``: |mean|/std of 1e4, capped at what the error model
    covers for a sample (strategies.valid_offset_ratio; MAX_OFFSET_RATIO otherwise); ``offsets``: the |mean|/std
    targets drawn from (strategies.offset_ratios otherwise). ``num_groups`` is 1: each sample is one group of the
    GroupNorm checks."""
    caps = discover(kernel)
    dtype = draw(storage_dtypes(kernel, dtypes))
    parameters = draw(parameter_dtypes(kernel, dtype, mixed))
    if samples is None:
        samples = draw(st.sampled_from(MORE_SAMPLES) if draw(st.integers(1, 8)) == 8 else
                       st.integers(least_samples, 3))
    shape = (samples, draw(st.sampled_from(channels)), *draw(st.sampled_from(spatial)))
    limit = valid_offset_ratio(math.prod(shape[1:]), dtype) if ill_conditioned else MAX_OFFSET_RATIO
    targets = st.sampled_from([1e4, -1e4]) if ill_conditioned else offset_ratios(dtype)
    ratio = max(-limit, min(draw(targets if offsets is None else st.sampled_from(offsets)), limit))
    values = draw(scales(dtype)) * (ratio + standard_values(shape, "normal", draw(seeds())))
    example = {"x": rounded(values, dtype, caps.device), "num_groups": 1, "eps": draw(epsilons())}
    width = math.prod(shape[1:])
    every_input = every_input or parameters != dtype
    gamma = draw(effective_weights(width, ("random", "zeros_and_negatives") if every_input else
                                   ("none", "constant", "random", "zeros_and_negatives")))
    beta = draw(biases(width, ("random",) if every_input else ("none", "zeros", "random")))
    example["weight"] = None if gamma is None else rounded(gamma.reshape(shape[1:]), parameters, caps.device)
    example["bias"] = None if beta is None else rounded(beta.reshape(shape[1:]), parameters, caps.device)
    if upstream:
        y_dtype = output_dtype(kernel, example["x"], example["weight"])
        example["dy"] = rounded(standard_values(shape, "normal", draw(seeds())), y_dtype, caps.device)
    return example


@pytest.mark.claim("cln.forward")
@profiles.share(1.0)
@given(data=st.data())
def test_forward_matches_the_oracle(channel_layernorm_kernel, data):
    example = channel_layernorm_examples(channel_layernorm_kernel, mixed=True)
    evidence.check(check_forward, channel_layernorm_kernel, data.draw(example, "example"))


@pytest.mark.claim("cln.jacobian")
@profiles.share(0.75)
@given(data=st.data())
def test_vjp_matches_the_jacobian(channel_layernorm_kernel, data):
    require_backward(channel_layernorm_kernel)
    example = channel_layernorm_examples(channel_layernorm_kernel, upstream=True, mixed=True)
    evidence.check(check_vjp, channel_layernorm_kernel, data.draw(example, "example"))


@pytest.mark.claim("cln.forward")
@pytest.mark.parametrize("dtype", PROBED_DTYPES, ids=dtype_name)
@profiles.share(0.1)
@given(data=st.data())
def test_forward_when_ill_conditioned(channel_layernorm_kernel, dtype, data):
    """Samples of |mean|/std as large as the error model covers (a one-pass variance fails there; the other draws
    stop at 10)."""
    example = channel_layernorm_examples(channel_layernorm_kernel, dtypes=(dtype,), ill_conditioned=True)
    evidence.check(check_forward, channel_layernorm_kernel, data.draw(example, "example"))


@pytest.mark.claim("cln.forward")
@pytest.mark.parametrize("dtype", SIXTEEN_BIT, ids=dtype_name)
@profiles.share(0.05)
@given(data=st.data())
def test_forward_at_a_count_16_bits_cannot_hold(channel_layernorm_kernel, dtype, data):
    """16-bit x with samples of C S elements that x's dtype cannot hold (properties.draws.inexact_counts: 2049 = 3 x
    683 in float16, 259 = 7 x 37 in bfloat16) and |mean|/std of 10: a count kept in x's dtype shifts y by 10 of its
    unit roundoffs."""
    a, b = inexact_count(dtype)
    example = channel_layernorm_examples(channel_layernorm_kernel, spatial=((b,),), channels=(a,), dtypes=(dtype,),
                                         offsets=(OFFSET_RATIO, -OFFSET_RATIO))
    evidence.check(check_forward, channel_layernorm_kernel, data.draw(example, "example"))


# Model channel counts (ConvNeXt-T's 96 stem channels; 320), past a kernel's block of 64 channels and not a multiple
# of it: blocks of channels whose moments are merged
MANY_CHANNELS, MANY_CHANNELS_SPATIAL = (96, 320), ((), (4, 4))


@pytest.mark.claim("cln.forward")
@profiles.share(0.1)
@given(data=st.data())
def test_forward_of_model_channel_counts(channel_layernorm_kernel, data):
    example = channel_layernorm_examples(channel_layernorm_kernel, spatial=MANY_CHANNELS_SPATIAL,
                                         channels=MANY_CHANNELS)
    evidence.check(check_forward, channel_layernorm_kernel, data.draw(example, "example"))


@pytest.mark.claim("cln.forward")
@profiles.share(0.05)
@given(data=st.data())
def test_forward_of_a_large_batch(channel_layernorm_kernel, data):
    """4099 samples of 2 x 32 (LARGE_BATCH): a path taken past some number of samples."""
    example = channel_layernorm_examples(channel_layernorm_kernel, spatial=(LARGE_BATCH_SAMPLE[1:],),
                                         channels=LARGE_BATCH_SAMPLE[:1], samples=LARGE_BATCH)
    evidence.check(check_forward, channel_layernorm_kernel, data.draw(example, "example"))


@pytest.mark.claim("cln.jacobian")
@profiles.share(0.1)
@given(data=st.data())
def test_backward_of_the_recorded_graph(channel_layernorm_kernel, data):
    """x, weight, bias or y written in place between the forward and the backward, and a second backward of one graph
    (retain_graph=True): autograd's error for a saved tensor written since, or the recorded forward's gradients
    (properties.checks.graph)."""
    require_backward(channel_layernorm_kernel)
    example = channel_layernorm_examples(channel_layernorm_kernel, upstream=True, every_input=True)
    evidence.check(check_backward_of_the_recorded_graph, channel_layernorm_kernel, data.draw(example, "example"))


@pytest.mark.claim("cln.forward")
@profiles.share(0.1)
@given(data=st.data())
def test_forward_after_an_in_place_weight_update(channel_layernorm_kernel, data):
    """A second call after weight and bias were overwritten in place (an optimizer step) reads their new values."""
    example = data.draw(channel_layernorm_examples(channel_layernorm_kernel, every_input=True), "example")
    evidence.check(check_forward_after_an_in_place_update, channel_layernorm_kernel,
                   {**example, **new_parameter_values(example)})


@pytest.mark.claim("cln.forward")
@profiles.share(0.25)
@given(data=st.data())
def test_forward_in_inference_mode(channel_layernorm_kernel, data):
    """Under torch.inference_mode(), as a serving stack calls it (grad mode off): kernels with a path of their own
    for inference (the other forward tests call them with grad mode on)."""
    example = data.draw(channel_layernorm_examples(channel_layernorm_kernel), "example")
    evidence.check(check_forward, channel_layernorm_kernel, {**example, "inference": True})


@pytest.mark.claim("cln.forward")
@profiles.share(0.25)
@given(data=st.data())
def test_forward_while_recording_a_graph(channel_layernorm_kernel, data):
    """x, weight and bias requiring grad, as in a training step."""
    example = data.draw(channel_layernorm_examples(channel_layernorm_kernel), "example")
    evidence.check(check_forward, channel_layernorm_kernel, {**example, "recording": True})


@pytest.mark.claim("cln.forward")
@pytest.mark.parametrize("spatial", WIDE_SPATIAL, ids=str)
@profiles.share(0.05)
@given(data=st.data())
def test_forward_of_samples_beyond_4096_elements(channel_layernorm_kernel, spatial, data):
    """Samples of C S from 4097 to 49152 elements (strategies.WIDE_SPATIAL, C of 1, 2, 4): kernels loop over the
    blocks of a sample there."""
    example = channel_layernorm_examples(channel_layernorm_kernel, spatial=(spatial,), channels=(1, 2, 4))
    evidence.check(check_forward, channel_layernorm_kernel, data.draw(example, "example"))


@pytest.mark.claim("cln.jacobian")
@pytest.mark.parametrize("spatial", WIDE_SPATIAL, ids=str)
@profiles.share(0.05)
@given(data=st.data())
def test_vjp_of_samples_beyond_4096_elements(channel_layernorm_kernel, spatial, data):
    require_backward(channel_layernorm_kernel)
    example = channel_layernorm_examples(channel_layernorm_kernel, spatial=(spatial,), channels=(1, 2, 4),
                                         upstream=True, every_input=True)
    evidence.check(check_vjp, channel_layernorm_kernel, data.draw(example, "example"))


@pytest.mark.claim("cln.layout_invariance")
@profiles.share(0.5)
@given(data=st.data())
def test_channels_last_input(channel_layernorm_kernel, data):
    example = channel_layernorm_examples(channel_layernorm_kernel, spatial=((2, 3), (4, 4), (2, 2, 3)),
                                         channels=(2, 3, 4, 8), mixed=True)
    example = data.draw(example, "example")
    example["x"] = example["x"].to(memory_format=CHANNELS_LAST[example["x"].dim()])
    evidence.check(check_input_layout, channel_layernorm_kernel, example)


@pytest.mark.claim("cln.layout_invariance")
@profiles.share(0.5)
@given(data=st.data())
def test_channels_last_backward(channel_layernorm_kernel, data):
    """Channels-last x: y and (for one contiguous dy) dx, dweight, dbias those of the contiguous call (a backward
    that reads x or its x_hat with NCHW strides)."""
    require_backward(channel_layernorm_kernel)
    example = channel_layernorm_examples(channel_layernorm_kernel, spatial=((2, 3), (4, 4), (2, 2, 3)),
                                         channels=(2, 3, 4, 8), upstream=True, every_input=True, mixed=True)
    example = data.draw(example, "example")
    example["x"] = example["x"].to(memory_format=CHANNELS_LAST[example["x"].dim()])
    evidence.check(check_input_layout, channel_layernorm_kernel, example)


@pytest.mark.claim("cln.layout_invariance")
@profiles.share(0.5)
@given(data=st.data())
def test_strided_input(channel_layernorm_kernel, data):
    """x with its channels innermost (a [N, L, C] activation seen as [N, C, L]), transposed, a slice of more
    channels, every other sample or element, NaN between its elements (contracts.CHANNEL_INPUT_LAYOUTS): y and, with
    a backward, (for one contiguous dy) dx, dweight, dbias those of the contiguous call (pytorch#63224, FlagGems#296:
    x read as if contiguous)."""
    backward = discover(channel_layernorm_kernel).backward
    example = channel_layernorm_examples(channel_layernorm_kernel, upstream=backward, every_input=backward, mixed=True)
    example = data.draw(example, "example")
    layout = data.draw(st.sampled_from(CHANNEL_INPUT_LAYOUTS), "layout")
    evidence.check(check_input_layout, channel_layernorm_kernel, {**example, "x": channel_input(example["x"], layout)})


@pytest.mark.claim("cln.jacobian")
@pytest.mark.parametrize("frozen", FROZEN_SUBSETS, ids="+".join)
@profiles.share(0.05)
@given(data=st.data())
def test_vjp_when_only_some_inputs_require_grad(channel_layernorm_kernel, frozen, data):
    """``frozen`` not requiring grad (norms.FROZEN_SUBSETS): each input that requires grad gets its gradient, as the
    oracle's."""
    require_backward(channel_layernorm_kernel)
    skip_unless_a_strict_subset(channel_layernorm_kernel, frozen, ("x", "weight", "bias"))
    example = channel_layernorm_examples(channel_layernorm_kernel, upstream=True, every_input=True)
    evidence.check(check_vjp, channel_layernorm_kernel, {**data.draw(example, "example"), "frozen": frozen})


@pytest.mark.claim("cln.layout_invariance")
@profiles.share(0.5)
@given(data=st.data())
def test_strided_upstream_gradient(channel_layernorm_kernel, data):
    """dy strided, transposed, channels-last or expanded (autograd's upstream gradient of a sum has stride 0)."""
    require_backward(channel_layernorm_kernel)
    # two samples at least: a dy of one element has no non-contiguous layout
    example = channel_layernorm_examples(channel_layernorm_kernel, upstream=True, mixed=True, least_samples=2)
    example = data.draw(example, "example")
    dy = strided(example["dy"], data.draw(st.sampled_from(CHANNEL_UPSTREAM_LAYOUTS), "layout"))
    evidence.check(check_noncontiguous_upstream, channel_layernorm_kernel, {**example, "dy": dy})


@pytest.mark.claim("cln.independence")
@profiles.share(0.5)
@given(data=st.data())
def test_samples_are_independent(channel_layernorm_kernel, data):
    example = data.draw(channel_layernorm_examples(channel_layernorm_kernel, mixed=True, least_samples=2), "example")
    other = replacement_values(example["x"], data.draw(seeds(), "other seed"))
    evidence.check(check_independence, channel_layernorm_kernel, {**example, "other": other})


@pytest.mark.claim("cln.inputs_unmodified")
@profiles.share(0.5)
@given(data=st.data())
def test_inputs_unmodified(channel_layernorm_kernel, data):
    require_backward(channel_layernorm_kernel)
    example = channel_layernorm_examples(channel_layernorm_kernel, upstream=True, every_input=True, mixed=True)
    evidence.check(check_inputs_unmodified, channel_layernorm_kernel, data.draw(example, "example"))
