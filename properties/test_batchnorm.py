"""The kinds with running statistics over x [N, C, *]: BatchNorm (kind batchnorm, F.batch_norm's contract): bn.forward,
bn.running_statistics, bn.eval, bn.coupling, bn.jacobian, bn.degenerate, bn.single_sample, bn.layout_invariance,
bn.inputs_unmodified; InstanceNorm with running statistics (kind instancenorm, F.instance_norm's contract): the same
checks as in.forward, in.running_statistics, in.eval, in.independence, in.jacobian, in.degenerate,
in.layout_invariance, in.inputs_unmodified. The checks and the bounds they use: :mod:`properties.checks.batchnorm`;
the draws: :mod:`properties.draws.batchnorm_strategies`."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.capabilities import PROBED_DTYPES, discover, dtype_name
from properties import evidence
from properties.checks import batchnorm as checks
from properties.checks.contracts import (
    CHANNEL_INPUT_LAYOUTS,
    CHANNEL_UPSTREAM_LAYOUTS,
    channel_input,
    inside_a_larger_buffer,
    strided,
)
from properties.checks.forward import new_parameter_values
from properties.draws.batchnorm_strategies import batchnorm_examples
from properties.draws.inexact_counts import OFFSET_RATIO, SIXTEEN_BIT, inexact_count
from properties.draws.strategies import (
    CHANNELS_LAST,
    WIDE_SPATIAL,
    mixed_parameter_examples,
    over_parameter_mixes,
    replacement_values,
    seeds,
    storage_backward_width,
)
from properties.norms import FROZEN_SUBSETS, require_backward, skip_unless_a_strict_subset
from properties.run import profiles

SPATIAL_LAYOUTS = ((2, 3), (4, 4), (7, 9), (2, 2, 3))  # 4-D and 5-D x, which have a channels-last layout
# channels-last x of 12 to 64 channels (an NHWC path vectorized over 8 or 16 channels, and its tail at 12 and 24) and
# of 4608 elements a channel with 2 samples (48 x 48: past one block of 4096 of a channel's N S, not a whole number
# of them), in each mode
WIDE_LAYOUT_CHANNELS = (12, 16, 24, 64)
WIDE_LAYOUT_SPATIAL = ((4, 4), (48, 48))
MAX_LAYOUT_ELEMENTS = 2 * 24 * 48 * 48


def buffers_in_larger_storage(example: dict) -> dict:
    """The example with its running buffers every other element of a tensor of NaN, from its second element
    (contracts.inside_a_larger_buffer): buffers a model keeps as views (a slice of one flat buffer of all its
    statistics), which a kernel that copies them to contiguous tensors updates in the copies only (pytorch#33867)."""
    return {**example, **{name: inside_a_larger_buffer(example[name], "every other element")
                          for name in checks.BUFFERS}}


@pytest.mark.claim("bn.forward", "in.forward")
@profiles.share(1.0)
@given(data=st.data())
def test_training_forward_matches_the_oracle(running_norm_kernel, data):
    example = data.draw(batchnorm_examples(running_norm_kernel, training=True, mixed=True), "example")
    evidence.check(checks.check_forward, running_norm_kernel, example)


@pytest.mark.claim("bn.forward", "in.forward")
@profiles.share(0.1)
@given(data=st.data())
def test_forward_after_an_in_place_weight_update(running_norm_kernel, data):
    """A second call after weight and bias were overwritten in place (an optimizer step) reads their new values."""
    example = data.draw(batchnorm_examples(running_norm_kernel, training=True, every_input=True), "example")
    evidence.check(checks.check_forward_after_an_in_place_update, running_norm_kernel,
                   {**example, **new_parameter_values(example)})


@pytest.mark.claim("bn.forward", "in.forward")
@profiles.share(0.25)
@given(data=st.data())
def test_training_forward_in_inference_mode(running_norm_kernel, data):
    """Under torch.inference_mode(), as a serving stack calls it (grad mode off): kernels with a path of their own
    for inference (the other forward tests call them with grad mode on)."""
    example = data.draw(batchnorm_examples(running_norm_kernel, training=True, mixed=True), "example")
    evidence.check(checks.check_forward, running_norm_kernel, {**example, "inference": True})


@pytest.mark.claim("bn.forward", "in.forward")
@profiles.share(0.25)
@given(data=st.data())
def test_training_forward_while_recording_a_graph(running_norm_kernel, data):
    """x, weight and bias requiring grad, as in a training step."""
    example = data.draw(batchnorm_examples(running_norm_kernel, training=True, mixed=True), "example")
    evidence.check(checks.check_forward, running_norm_kernel, {**example, "recording": True})


@pytest.mark.claim("bn.forward", "in.forward")
@pytest.mark.parametrize("spatial", WIDE_SPATIAL, ids=str)
@profiles.share(0.05)
@given(data=st.data())
def test_training_forward_beyond_4096_elements_a_row(running_norm_kernel, spatial, data):
    """Rows of statistics (a channel's N S, an instance's S) from 4097 to 36864 elements (strategies.WIDE_SPATIAL,
    N of 2, 3): kernels loop over the blocks of a channel there."""
    example = batchnorm_examples(running_norm_kernel, training=True, samples=(2, 3), channels=(1, 2, 3),
                                 spatial=(spatial,), mixed=True)
    evidence.check(checks.check_forward, running_norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("bn.forward", "in.forward")
@over_parameter_mixes
@profiles.share(0.25)
@given(data=st.data())
def test_forward_with_parameters_in_another_dtype(running_norm_kernel, mix, data):
    """float32 weight and bias with 16-bit x, 16-bit ones with float32 x: y in the output-dtype rule's dtype, within
    the bound of the dtypes received."""
    example = mixed_parameter_examples(running_norm_kernel, mix, batchnorm_examples, training=True)
    evidence.check(checks.check_forward_with_parameter_dtypes, running_norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("bn.running_statistics", "in.running_statistics")
@profiles.share(1.0)
@given(data=st.data())
def test_one_training_call_updates_the_running_statistics_once(running_norm_kernel, data):
    """Half the draws with the buffers every other element of a larger tensor (buffers_in_larger_storage): the
    update lands in the caller's tensors; the call a forward, a forward under torch.inference_mode() (a
    recalibration pass) or a recorded forward and its backward (checks.check_running_statistics' ``call``)."""
    example = data.draw(batchnorm_examples(running_norm_kernel, training=True, buffers=True, mixed=True), "example")
    if data.draw(st.booleans(), "buffers in a larger storage"):
        example = buffers_in_larger_storage(example)
    call = data.draw(st.sampled_from(("forward", "inference", "backward")), "call")
    evidence.check(checks.check_running_statistics, running_norm_kernel, {**example, "call": call})


@pytest.mark.claim("bn.running_statistics", "in.running_statistics")
@profiles.share(1 / 20)
@given(data=st.data())
def test_the_running_statistics_of_more_than_65536_elements_a_statistic(running_norm_kernel, data):
    """65 539 elements a channel (an instance for InstanceNorm; 3 past 2^16): a count n kept in 16 bits wraps to 3,
    and the unbiased factor n / (n - 1) of the running variance with it."""
    example = batchnorm_examples(running_norm_kernel, training=True, buffers=True, samples=(1,), channels=(2,),
                                 spatial=((65_539,),))
    evidence.check(checks.check_running_statistics, running_norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("bn.eval", "in.eval")
@profiles.share(0.75)
@given(data=st.data())
def test_eval_mode_is_the_affine_map_of_the_running_statistics(running_norm_kernel, data):
    """Half the draws with the buffers every other element of a larger tensor (buffers_in_larger_storage)."""
    example = data.draw(batchnorm_examples(running_norm_kernel, training=False, mixed=True), "example")
    if data.draw(st.booleans(), "buffers in a larger storage"):
        example = buffers_in_larger_storage(example)
    evidence.check(checks.check_eval, running_norm_kernel, example)


@pytest.mark.claim("bn.eval", "in.eval")
@profiles.share(0.1)
@given(data=st.data())
def test_eval_mode_without_running_statistics_is_refused(running_norm_kernel, data):
    """Eval mode, running_mean and running_var None: an error, never an output (x of several elements an instance:
    statistics a kernel could take from the input exist)."""
    example = data.draw(batchnorm_examples(running_norm_kernel, training=False, spatial=((5,), (2, 3), (4, 4))),
                        "example")
    evidence.check(checks.check_eval_without_running_statistics_refused, running_norm_kernel,
                   {**example, "running_mean": None, "running_var": None})


@pytest.mark.claim("bn.eval", "in.eval")
@profiles.share(0.25)
@given(data=st.data())
def test_eval_mode_while_recording_a_graph(running_norm_kernel, data):
    """x, weight and bias requiring grad (a frozen BatchNorm in a network being fine-tuned): still the running
    statistics, not the training kernel's batch statistics."""
    example = batchnorm_examples(running_norm_kernel, training=False, mixed=True)
    evidence.check(checks.check_eval, running_norm_kernel, {**data.draw(example, "example"), "recording": True})


@pytest.mark.claim("bn.jacobian", "in.jacobian")
@profiles.share(0.5)
@given(data=st.data())
def test_eval_vjp_is_the_derivative_of_the_affine_map(running_norm_kernel, data):
    """Eval mode: the running statistics are constants, so the gradients are the per-channel affine map's (no terms
    through the batch's statistics, which a training backward run on an eval forward adds)."""
    require_backward(running_norm_kernel)
    example = batchnorm_examples(running_norm_kernel, training=False, upstream=True, mixed=True)
    evidence.check(checks.check_eval_vjp, running_norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("bn.coupling", "in.independence")
@profiles.share(0.5)
@given(data=st.data())
def test_replacing_one_sample_moves_the_others_in_training_only(running_norm_kernel, data):
    example = data.draw(batchnorm_examples(running_norm_kernel, samples=(2, 3, 4, 8), mixed=True), "example")
    other = replacement_values(example["x"], data.draw(seeds(), "other seed"))
    evidence.check(checks.check_coupling, running_norm_kernel, {**example, "other": other})


@pytest.mark.claim("bn.jacobian", "in.jacobian")
@profiles.share(0.75)
@given(data=st.data())
def test_vjp_matches_the_batch_jacobian(running_norm_kernel, data):
    require_backward(running_norm_kernel)
    example = batchnorm_examples(running_norm_kernel, training=True, upstream=True, mixed=True)
    evidence.check(checks.check_vjp, running_norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("bn.jacobian", "in.jacobian")
@profiles.share(0.1)
@given(data=st.data())
def test_backward_of_the_recorded_graph(running_norm_kernel, data):
    """x, weight, bias or y written in place between the forward and the backward, and a second backward of one graph
    (retain_graph=True): autograd's error for a saved tensor written since, or the recorded forward's gradients
    (properties.checks.graph)."""
    require_backward(running_norm_kernel)
    example = batchnorm_examples(running_norm_kernel, training=True, upstream=True, every_input=True)
    evidence.check(checks.check_backward_of_the_recorded_graph, running_norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("bn.jacobian", "in.jacobian")
@pytest.mark.parametrize("spatial", WIDE_SPATIAL, ids=str)
@profiles.share(0.05)
@given(data=st.data())
def test_vjp_beyond_4096_elements_a_row(running_norm_kernel, spatial, data):
    """As the forward's, in the dtypes where the backward bound has no width limit (all but a declared 16-bit
    storage-precision backward's)."""
    require_backward(running_norm_kernel)
    dtypes = tuple(t for t in PROBED_DTYPES if storage_backward_width(running_norm_kernel, t) is None)
    example = batchnorm_examples(running_norm_kernel, training=True, samples=(2, 3), channels=(1, 2, 3),
                                 spatial=(spatial,), upstream=True, every_input=True, dtypes=dtypes)
    evidence.check(checks.check_vjp, running_norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("bn.forward", "in.forward")
@pytest.mark.parametrize("dtype", PROBED_DTYPES, ids=dtype_name)
@profiles.share(0.1)
@given(data=st.data())
def test_training_forward_when_ill_conditioned(running_norm_kernel, dtype, data):
    """Training mode, rows of statistics of |mean|/std as large as the error model covers (a one-pass variance fails
    there; the other draws stop at 10)."""
    example = batchnorm_examples(running_norm_kernel, training=True, dtypes=(dtype,), ill_conditioned=True)
    evidence.check(checks.check_forward, running_norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("bn.forward", "in.forward")
@pytest.mark.parametrize("dtype", SIXTEEN_BIT, ids=dtype_name)
@profiles.share(0.05)
@given(data=st.data())
def test_training_forward_at_a_count_16_bits_cannot_hold(running_norm_kernel, dtype, data):
    """16-bit x with rows of statistics of n elements that x's dtype cannot hold (properties.draws.inexact_counts:
    2049 in float16, 259 in bfloat16; BatchNorm's N S, InstanceNorm's S) and |mean|/std of 10: a count kept in x's
    dtype (pytorch#70901) shifts y by 10 of its unit roundoffs."""
    a, b = inexact_count(dtype)
    samples, spatial = ((a,), ((b,),)) if running_norm_kernel.record.batch_statistics else ((2,), ((a * b,),))
    example = batchnorm_examples(running_norm_kernel, training=True, samples=samples, channels=(2,), spatial=spatial,
                                 dtypes=(dtype,), offsets=(OFFSET_RATIO, -OFFSET_RATIO))
    evidence.check(checks.check_forward, running_norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("bn.degenerate", "in.degenerate")
@profiles.share(0.25)
@given(data=st.data())
def test_constant_channels_give_beta(running_norm_kernel, data):
    example = batchnorm_examples(running_norm_kernel, training=True, constant=True)
    evidence.check(checks.check_forward, running_norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("bn.degenerate", "in.degenerate")
@profiles.share(0.25)
@given(data=st.data())
def test_one_element_per_channel_is_refused_or_gives_beta(running_norm_kernel, data):
    example = batchnorm_examples(running_norm_kernel, training=True, samples=(1,), spatial=((), (1,), (1, 1)), least=1)
    example = data.draw(example, "example")
    evidence.check(checks.check_one_element_per_channel, running_norm_kernel, example)


@pytest.mark.claim("bn.single_sample")
@profiles.share(0.25)
@given(data=st.data())
def test_one_sample_is_instance_norm(batchnorm_kernel, data):
    example = batchnorm_examples(batchnorm_kernel, training=True, samples=(1,), spatial=((5,), (2, 3), (4, 4)))
    evidence.check(checks.check_forward, batchnorm_kernel, data.draw(example, "example"))


@pytest.mark.claim("bn.layout_invariance", "in.layout_invariance")
@profiles.share(0.5)
@given(data=st.data())
def test_channels_last_input(running_norm_kernel, data):
    # one channel is contiguous in channels-last memory too: two or more
    example = batchnorm_examples(running_norm_kernel, spatial=SPATIAL_LAYOUTS, channels=(2, 3, 4, 8), mixed=True)
    example = data.draw(example, "example")
    example["x"] = example["x"].to(memory_format=CHANNELS_LAST[example["x"].dim()])
    evidence.check(checks.check_input_layout, running_norm_kernel, example)


@pytest.mark.claim("bn.layout_invariance", "in.layout_invariance")
@pytest.mark.parametrize("dtype", PROBED_DTYPES, ids=dtype_name)
@pytest.mark.parametrize("training", (True, False), ids=("training", "eval"))
@profiles.share(0.1)
@given(data=st.data())
def test_channels_last_input_of_many_channels(running_norm_kernel, dtype, training, data):
    """Channels-last x of 12 to 64 channels or of 4608 elements a channel (WIDE_LAYOUT_CHANNELS, WIDE_LAYOUT_SPATIAL),
    each dtype and mode."""
    spatial = data.draw(st.sampled_from(WIDE_LAYOUT_SPATIAL), "spatial")
    channels = [c for c in WIDE_LAYOUT_CHANNELS if 2 * c * spatial[0] * spatial[1] <= MAX_LAYOUT_ELEMENTS]
    example = batchnorm_examples(running_norm_kernel, training=training, samples=(2,), channels=tuple(channels),
                                 spatial=(spatial,), dtypes=(dtype,))
    example = data.draw(example, "example")
    example["x"] = example["x"].to(memory_format=CHANNELS_LAST[example["x"].dim()])
    evidence.check(checks.check_input_layout, running_norm_kernel, example)


@pytest.mark.claim("bn.layout_invariance", "in.layout_invariance")
@profiles.share(0.5)
@given(data=st.data())
def test_channels_last_backward(running_norm_kernel, data):
    """Channels-last x, either mode: y, the running statistics and (for one contiguous dy) dx, dweight, dbias those
    of the contiguous call (a backward that reads x or its x_hat with NCHW strides)."""
    require_backward(running_norm_kernel)
    example = batchnorm_examples(running_norm_kernel, spatial=SPATIAL_LAYOUTS, channels=(2, 3, 4, 8), upstream=True,
                                 every_input=True, mixed=True)
    example = data.draw(example, "example")
    example["x"] = example["x"].to(memory_format=CHANNELS_LAST[example["x"].dim()])
    evidence.check(checks.check_input_layout, running_norm_kernel, example)


@pytest.mark.claim("bn.layout_invariance", "in.layout_invariance")
@pytest.mark.parametrize("dtype", PROBED_DTYPES, ids=dtype_name)
@pytest.mark.parametrize("training", (True, False), ids=("training", "eval"))
@profiles.share(0.05)
@given(data=st.data())
def test_channels_last_backward_of_many_channels(running_norm_kernel, dtype, training, data):
    """As test_channels_last_input_of_many_channels, with the backward (one contiguous dy), within the widths where a
    declared 16-bit storage-precision backward's bound is finite."""
    require_backward(running_norm_kernel)
    example = batchnorm_examples(running_norm_kernel, training=training, samples=(2,), channels=WIDE_LAYOUT_CHANNELS,
                                 spatial=WIDE_LAYOUT_SPATIAL, dtypes=(dtype,), upstream=True, every_input=True,
                                 max_elements=MAX_LAYOUT_ELEMENTS)
    example = data.draw(example, "example")
    example["x"] = example["x"].to(memory_format=CHANNELS_LAST[example["x"].dim()])
    evidence.check(checks.check_input_layout, running_norm_kernel, example)


@pytest.mark.claim("bn.layout_invariance", "in.layout_invariance")
@profiles.share(0.5)
@given(data=st.data())
def test_strided_input(running_norm_kernel, data):
    """Either mode, x with its channels innermost (a [N, L, C] activation seen as [N, C, L]), transposed, a slice of
    more channels, every other sample or element, NaN between its elements (contracts.CHANNEL_INPUT_LAYOUTS): y, the
    running statistics and, with a backward, (for one contiguous dy) dx, dweight, dbias those of the contiguous call
    (pytorch#63224: BatchNorm of a permuted input; FlagGems#296: instance_norm addressing x as if contiguous)."""
    backward = discover(running_norm_kernel).backward
    example = batchnorm_examples(running_norm_kernel, upstream=backward, every_input=backward, mixed=True)
    example = data.draw(example, "example")
    layout = data.draw(st.sampled_from(CHANNEL_INPUT_LAYOUTS), "layout")
    evidence.check(checks.check_input_layout, running_norm_kernel,
                   {**example, "x": channel_input(example["x"], layout)})


@pytest.mark.claim("bn.jacobian", "in.jacobian")
@pytest.mark.parametrize("frozen", FROZEN_SUBSETS, ids="+".join)
@pytest.mark.parametrize("training", (True, False), ids=("training", "eval"))
@profiles.share(0.05)
@given(data=st.data())
def test_vjp_when_only_some_inputs_require_grad(running_norm_kernel, frozen, training, data):
    """``frozen`` not requiring grad (norms.FROZEN_SUBSETS; a frozen BatchNorm's parameters in fine-tuning), either
    mode: each input that requires grad gets its gradient, as the batch VJP's (training) or the affine map's
    (eval)."""
    require_backward(running_norm_kernel)
    skip_unless_a_strict_subset(running_norm_kernel, frozen, ("x", "weight", "bias"))
    example = batchnorm_examples(running_norm_kernel, training=training, upstream=True, every_input=True)
    check = checks.check_vjp if training else checks.check_eval_vjp
    evidence.check(check, running_norm_kernel, {**data.draw(example, "example"), "frozen": frozen})


@pytest.mark.claim("bn.layout_invariance", "in.layout_invariance")
@profiles.share(0.5)
@given(data=st.data())
def test_strided_upstream_gradient(running_norm_kernel, data):
    """Training mode, dy strided, transposed, channels-last or expanded (autograd's upstream gradient of a sum has
    stride 0); weight and bias present (the gradients of every input)."""
    require_backward(running_norm_kernel)
    example = batchnorm_examples(running_norm_kernel, training=True, upstream=True, every_input=True, mixed=True)
    example = data.draw(example, "example")
    dy = strided(example["dy"], data.draw(st.sampled_from(CHANNEL_UPSTREAM_LAYOUTS), "layout"))
    evidence.check(checks.check_noncontiguous_upstream, running_norm_kernel, {**example, "dy": dy})


@pytest.mark.claim("bn.layout_invariance", "in.layout_invariance")
@profiles.share(0.1)
@given(data=st.data())
def test_channels_last_upstream_gradient_of_one_sample(running_norm_kernel, data):
    """x [1, C, H, W], dy channels-last, either mode: one sample is a path of its own (torch's CPU instance_norm,
    which views x as [1, N C, H, W], returns wrong gradients there: docs/findings.md [R14])."""
    require_backward(running_norm_kernel)
    example = batchnorm_examples(running_norm_kernel, upstream=True, every_input=True, samples=(1,),
                                 spatial=((2, 3), (3, 5)))
    example = data.draw(example, "example")
    dy = strided(example["dy"], "channels last")
    evidence.check(checks.check_noncontiguous_upstream, running_norm_kernel, {**example, "dy": dy})


@pytest.mark.claim("bn.inputs_unmodified", "in.inputs_unmodified")
@profiles.share(0.5)
@given(data=st.data())
def test_inputs_unmodified(running_norm_kernel, data):
    require_backward(running_norm_kernel)
    example = batchnorm_examples(running_norm_kernel, upstream=True, every_input=True, mixed=True)
    evidence.check(checks.check_inputs_unmodified, running_norm_kernel, data.draw(example, "example"))
