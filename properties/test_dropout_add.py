"""Fused dropout + add + LayerNorm kernels (kind dropout_add_layernorm, fn(x, residual, weight, bias, eps, p, seed)):
drop_add_ln.forward (y = LN(residual_out)), drop_add_ln.values (each residual_out element is residual or
residual + x/(1-p)), drop_add_ln.variance_bias (seed 003's bias, in the branch's statistics, from the exact law of
Var(r + x m/(1-p)) over all masks of an 8-element row), and
the dropout part, its mask read exactly from residual_out: drop_add_ln.keep_rate, .independence, .seeds (the tests
of properties/bounds/dropout_statistics.py), .determinism and .gradient (the forward's mask, the 1/(1-p) scale); and the
contracts drop_add_ln.inputs_unmodified, .row_independence (the same seed: a mask drawn by position) and
.layout_invariance (strided, transposed and offset views: at p = 0 the contiguous call's result; at 0 < p < 1 the
mask's law, the values and y at the mask the kernel used).

The checks: :mod:`properties.checks.fused` and :mod:`properties.checks.dropout_add`. Each statistical test spends
its share of ``dropout_statistics.BUDGET["drop_add_ln.*"]`` evenly over its examples; its power at the sizes of
properties/draws/fused_strategies.py is derived in tests/test_dropout_add_statistics.py.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from core.boundary import HOST, host_generator
from core.capabilities import PROBED_DTYPES, dtype_name
from properties import evidence
from properties.bounds import dropout_statistics as statistics
from properties.checks.contracts import UPSTREAM_LAYOUTS, check_outputs_of_a_call_fresh, strided
from properties.checks.dropout_add import (
    LAYOUT_FRACTION,
    LAYOUTS,
    check_determinism,
    check_empty_batch,
    check_fresh_outputs_at_edge_probabilities,
    check_gradient,
    check_gradient_at_edge_probabilities,
    check_independence,
    check_keep_rate,
    check_layout_invariance,
    check_no_row_repeats_another,
    check_seeds,
    check_variance_bias,
    layout_views,
)
from properties.checks.forward import new_parameter_values
from properties.checks.fused import (
    check_backward_of_the_recorded_graph,
    check_changing_one_row,
    check_dropout_values,
    check_edge_probabilities,
    check_forward,
    check_forward_after_an_in_place_update,
    check_forward_with_parameter_dtypes,
    check_inputs_unmodified,
    check_noncontiguous,
)
from properties.draws.dropout_strategies import (
    EXTREME_FRACTION,
    EXTREME_PROBABILITIES,
    KEEP_RATE_PROBABILITIES,
    exact_zeros,
    variance_bias_inputs,
)
from properties.draws.fused_strategies import (
    INDEPENDENCE_FRACTION,
    KEEP_RATE_FRACTION,
    KEEP_RATE_SHARES,
    LARGE_PATH_SHAPE,
    MASK_SHAPES,
    SEED_FRACTION,
    SEED_SHAPES,
    add_norm_examples,
    masked_examples,
    over_residual_mixes,
    require_residual_mix,
    row_zero_changed,
)
from properties.draws.strategies import (
    as_a_batch_of_two,
    mixed_parameter_examples,
    over_parameter_mixes,
    rounded,
    seeds,
    widths,
    with_no_rows,
)
from properties.norms import as_float64, require_backward, skip_unless_a_strict_subset
from properties.run import profiles

DROP_PROBABILITIES = (0.1, 0.25, 0.5, 0.75)


@st.composite
def dropout_add_examples(draw, kernel, d=None, **options) -> dict:
    example = draw(add_norm_examples(kernel, d=d, residual="independent", **options))
    return {**example, "p": draw(st.sampled_from(DROP_PROBABILITIES)), "seed": draw(seeds())}


# The loaded profile's example count, read at import as profiles.share reads it: inside a test, settings.default is
# the test's own settings (profiles.share's count), not the profile's.
PROFILE_EXAMPLES = settings.default.max_examples


def _alpha(claim: str, fraction: float, share: float = 1.0) -> float:
    """The false alarm of one example of a test running ``fraction`` of the profile's examples and ``share`` of the
    claim's budget."""
    return statistics.per_example(claim, max(1, round(PROFILE_EXAMPLES * fraction)), share)


@pytest.mark.claim("drop_add_ln.forward")
@profiles.share(0.5)
@given(data=st.data())
def test_y_is_the_norm_of_residual_out(dropout_add_kernel, data):
    evidence.check(check_forward, dropout_add_kernel, data.draw(dropout_add_examples(dropout_add_kernel), "example"))


@pytest.mark.claim("drop_add_ln.forward")
@profiles.share(0.25)
@given(data=st.data())
def test_y_is_the_norm_of_residual_out_in_inference_mode(dropout_add_kernel, data):
    """Under torch.inference_mode(), as a serving stack calls it (grad mode off): kernels with a path of their own
    for inference (the other forward tests call them with grad mode on)."""
    example = data.draw(dropout_add_examples(dropout_add_kernel), "example")
    evidence.check(check_forward, dropout_add_kernel, {**example, "inference": True})


@pytest.mark.claim("drop_add_ln.forward")
@profiles.share(0.1)
@given(data=st.data())
def test_forward_after_an_in_place_weight_update(dropout_add_kernel, data):
    """A second call after weight and bias were overwritten in place (an optimizer step) reads their new values."""
    example = data.draw(dropout_add_examples(dropout_add_kernel, every_input=True), "example")
    evidence.check(check_forward_after_an_in_place_update, dropout_add_kernel,
                   {**example, **new_parameter_values(example)})


@pytest.mark.claim("drop_add_ln.forward")
@over_parameter_mixes
@profiles.share(0.25)
@given(data=st.data())
def test_y_is_the_norm_of_residual_out_with_parameters_in_another_dtype(dropout_add_kernel, mix, data):
    """float32 weight and bias with 16-bit x, 16-bit ones with float32 x: y in x's dtype (the output-dtype rule)."""
    example = mixed_parameter_examples(dropout_add_kernel, mix, dropout_add_examples)
    evidence.check(check_forward_with_parameter_dtypes, dropout_add_kernel, data.draw(example, "example"))


@pytest.mark.claim("drop_add_ln.values")
@profiles.share(0.5)
@given(data=st.data())
def test_each_element_is_dropped_or_rescaled(dropout_add_kernel, data):
    """Half the draws under torch.inference_mode(): p is the caller's there too."""
    example = data.draw(dropout_add_examples(dropout_add_kernel), "example")
    evidence.check(check_dropout_values, dropout_add_kernel,
                   {**example, "inference": data.draw(st.booleans(), "inference")})


@pytest.mark.claim("drop_add_ln.values")
@profiles.share(0.25)
@given(data=st.data())
def test_p_zero_keeps_every_element_and_p_one_drops_every_one(dropout_add_kernel, data):
    example = data.draw(dropout_add_examples(dropout_add_kernel), "example")
    evidence.check(check_edge_probabilities, dropout_add_kernel, {k: v for k, v in example.items() if k != "p"})


@pytest.mark.claim("drop_add_ln.values")
@profiles.share(0.1)
@given(data=st.data())
def test_outputs_at_p_zero_and_one_are_fresh_tensors(dropout_add_kernel, data):
    """At p = 0 and p = 1, y and residual_out share no storage with an input (a short-circuit returning the residual
    where every element is dropped, or x where none is)."""
    example = data.draw(dropout_add_examples(dropout_add_kernel, every_input=True), "example")
    evidence.check(check_fresh_outputs_at_edge_probabilities, dropout_add_kernel,
                   {k: v for k, v in example.items() if k != "p"})


@pytest.mark.claim("drop_add_ln.variance_bias")
@profiles.share(0.25)
@given(data=st.data())
def test_variance_bias_of_the_norms_input(dropout_add_kernel, data):
    example = data.draw(variance_bias_inputs(dropout_add_kernel), "example")
    x = example["x"]
    fraction = torch.rand(x.shape, generator=host_generator(data.draw(seeds(), "residual seed")),
                          dtype=torch.float64, device=HOST) * 2 - 1
    residual = rounded(x.to(HOST, torch.float64) * fraction, x.dtype, x.device)  # |residual| <= |x|: exact mask
    alpha = _alpha("drop_add_ln.variance_bias", 0.25)
    plan = statistics.VarianceBiasPlan(as_float64(x)[0], example["p"], alpha, residual=as_float64(residual)[0])
    assume(plan.feasible)
    evidence.check(check_variance_bias, dropout_add_kernel,
                   {**example, "residual": residual, "eps": 1e-5, "alpha": alpha})


@pytest.mark.claim("drop_add_ln.keep_rate")
@profiles.share(KEEP_RATE_FRACTION)
@given(data=st.data())
def test_keep_rate(dropout_add_kernel, data):
    example = data.draw(masked_examples(dropout_add_kernel, MASK_SHAPES, KEEP_RATE_PROBABILITIES), "example")
    alpha = _alpha("drop_add_ln.keep_rate", KEEP_RATE_FRACTION, KEEP_RATE_SHARES["drawn"])
    evidence.check(check_keep_rate, dropout_add_kernel, {**example, "alpha": alpha})


@pytest.mark.claim("drop_add_ln.keep_rate")
@pytest.mark.parametrize("dtype", PROBED_DTYPES, ids=dtype_name)
@profiles.share(EXTREME_FRACTION)
@given(data=st.data())
def test_keep_rate_at_extreme_probabilities_in_each_dtype(dropout_add_kernel, dtype, data):
    """p = 2^-30, 0.001 and 0.999 in each dtype (dropout_strategies.EXTREME_PROBABILITIES: a uniform drawn in
    bfloat16, a keep threshold that wraps)."""
    example = masked_examples(dropout_add_kernel, MASK_SHAPES, EXTREME_PROBABILITIES, dtypes=(dtype,))
    alpha = _alpha("drop_add_ln.keep_rate", EXTREME_FRACTION, KEEP_RATE_SHARES["extreme"] / len(PROBED_DTYPES))
    evidence.check(check_keep_rate, dropout_add_kernel, {**data.draw(example, "example"), "alpha": alpha})


@pytest.mark.claim("drop_add_ln.independence")
@profiles.share(INDEPENDENCE_FRACTION)
@given(data=st.data())
def test_mask_bits_are_independent(dropout_add_kernel, data):
    """x and residual [R, d], then the same as [2, R / 2, d] (strategies.as_a_batch_of_two: rows r and r + R / 2 one
    position of two batch elements), each at 0.3 of the claim's false-alarm budget (the rest: rows beyond 65 535,
    properties/test_many_rows.py, and test_no_row_repeats_another_at_any_shift, 0.2 each)."""
    example = data.draw(masked_examples(dropout_add_kernel, MASK_SHAPES), "example")
    alpha = _alpha("drop_add_ln.independence", INDEPENDENCE_FRACTION, 0.3)
    for shaped in (example, as_a_batch_of_two(example)):
        evidence.check(check_independence, dropout_add_kernel, {**shaped, "alpha": alpha})


# Rows of 64 columns and more (a vectorized path's per-row random offset), 2^16 elements
LAGGED_SHAPES, LAGGED_FRACTION = ((1024, 64), (655, 100), (128, 512), (8, 8192)), 0.1


@pytest.mark.claim("drop_add_ln.independence")
@profiles.share(LAGGED_FRACTION)
@given(data=st.data())
def test_no_row_repeats_another_at_any_shift(dropout_add_kernel, data):
    """Rows r and r + k, k <= 8, at every shift (dropout_statistics.lagged_rows_finding): per-row random offsets
    advanced by less than a row consumes (flagos-ai/FlagGems#85: half the row) repeat row r's draws in row r + 1
    shifted. At 0.2 of the claim's false-alarm budget (the drawn shapes 0.3 each, rows beyond 65 535 0.2)."""
    example = data.draw(masked_examples(dropout_add_kernel, LAGGED_SHAPES), "example")
    alpha = _alpha("drop_add_ln.independence", LAGGED_FRACTION, 0.2)
    evidence.check(check_no_row_repeats_another, dropout_add_kernel, {**example, "alpha": alpha})


@pytest.mark.claim("drop_add_ln.seeds")
@profiles.share(SEED_FRACTION)
@given(data=st.data())
def test_different_seeds_give_independent_masks(dropout_add_kernel, data):
    example = data.draw(masked_examples(dropout_add_kernel, SEED_SHAPES), "example")
    evidence.check(check_seeds, dropout_add_kernel, {**example, "alpha": _alpha("drop_add_ln.seeds", SEED_FRACTION)})


@pytest.mark.claim("drop_add_ln.determinism")
@profiles.share(0.25)
@given(data=st.data())
def test_same_seed_same_outputs(dropout_add_kernel, data):
    evidence.check(check_determinism, dropout_add_kernel, data.draw(masked_examples(dropout_add_kernel), "example"))


@pytest.mark.claim("drop_add_ln.determinism")
@profiles.share(1 / 20)
@given(data=st.data())
def test_same_seed_same_outputs_above_65536_elements(dropout_add_kernel, data):
    example = data.draw(masked_examples(dropout_add_kernel, (LARGE_PATH_SHAPE,)), "example")
    evidence.check(check_determinism, dropout_add_kernel, example)


@pytest.mark.claim("drop_add_ln.gradient")
@profiles.share(0.5)
@given(data=st.data())
def test_gradient_uses_the_forward_mask(dropout_add_kernel, data):
    require_backward(dropout_add_kernel)
    example = data.draw(masked_examples(dropout_add_kernel, upstream=True), "example")
    evidence.check(check_gradient, dropout_add_kernel, example)


@pytest.mark.claim("drop_add_ln.gradient")
@over_residual_mixes
@profiles.share(0.1)
@given(data=st.data())
def test_gradient_beside_a_float32_residual(dropout_add_kernel, mix, data):
    """A float32 residual stream beside 16-bit x (flash-attention's residual_in_fp32): dx in x's dtype with the
    forward's mask, dresidual in float32 (a dresidual rounded through x's dtype fails), y in x's or the residual's
    dtype (torch's promotion)."""
    require_backward(dropout_add_kernel)
    require_residual_mix(dropout_add_kernel, mix)
    example = masked_examples(dropout_add_kernel, upstream=True, dtypes=mix[:1], residual_dtype=mix[1])
    evidence.check(check_gradient, dropout_add_kernel, data.draw(example, "example"))


# Rows past one program per SM (108 on an A100, 132 on an H100): a persistent backward's rows per program
GRID_ROWS_SHAPES = ((131, 64), (263, 32), (133, 1000))


@pytest.mark.claim("drop_add_ln.gradient")
@profiles.share(0.1)
@given(data=st.data())
def test_gradient_of_more_rows_than_a_grid_of_programs(dropout_add_kernel, data):
    """131 to 263 rows: a persistent backward's dweight/dbias partial sums over rows_per_program rows each (a rows
    per program rounded down leaves the last rows out of dweight)."""
    require_backward(dropout_add_kernel)
    example = data.draw(masked_examples(dropout_add_kernel, GRID_ROWS_SHAPES, upstream=True), "example")
    evidence.check(check_gradient, dropout_add_kernel, example)


# Rows past a backward's one block of 1024 columns (its row means of g and g x_hat per block)
WIDE_GRADIENT_SHAPES = ((2, 1025), (1, 2048), (2, 4096))


@pytest.mark.claim("drop_add_ln.gradient")
@profiles.share(0.1)
@given(data=st.data())
def test_gradient_of_rows_wider_than_1024(dropout_add_kernel, data):
    require_backward(dropout_add_kernel)
    example = data.draw(masked_examples(dropout_add_kernel, WIDE_GRADIENT_SHAPES, upstream=True), "example")
    evidence.check(check_gradient, dropout_add_kernel, example)


# The inputs left frozen (not requiring grad) by test_gradients_when_only_some_inputs_require_grad.
FROZEN = (("x",), ("residual",), ("x", "residual"), ("weight",), ("bias",), ("weight", "bias"))


@pytest.mark.claim("drop_add_ln.gradient")
@pytest.mark.parametrize("frozen", FROZEN, ids="+".join)
@profiles.share(0.05)
@given(data=st.data())
def test_gradients_when_only_some_inputs_require_grad(dropout_add_kernel, frozen, data):
    """``frozen`` not requiring grad (a frozen branch or residual stream, frozen norm weights): each input that
    requires grad gets its gradient (a dresidual returned only when x requires grad fails)."""
    require_backward(dropout_add_kernel)
    skip_unless_a_strict_subset(dropout_add_kernel, frozen, ("x", "residual", "weight", "bias"))
    example = data.draw(masked_examples(dropout_add_kernel, upstream=True, every_input=True), "example")
    evidence.check(check_gradient, dropout_add_kernel, {**example, "frozen": frozen})


@pytest.mark.claim("drop_add_ln.forward")
@profiles.share(0.1)
@given(data=st.data())
def test_an_empty_batch(dropout_add_kernel, data):
    """x, the residual, dy and dh [0, d] or [2, 0, d]: empty y and residual_out, dweight = dbias = 0, no error."""
    example = data.draw(masked_examples(dropout_add_kernel, upstream=True, every_input=True), "example")
    evidence.check(check_empty_batch, dropout_add_kernel, data.draw(with_no_rows(example), "no rows"))


@pytest.mark.claim("drop_add_ln.gradient")
@profiles.share(0.1)
@given(data=st.data())
def test_gradient_at_p_zero_and_one(dropout_add_kernel, data):
    """p = 0: dx is J^T dy + dh; p = 1: dx is 0 exactly (or p = 1 refused), the residual's gradient J^T dy + dh."""
    require_backward(dropout_add_kernel)
    example = data.draw(masked_examples(dropout_add_kernel, upstream=True), "example")
    evidence.check(check_gradient_at_edge_probabilities, dropout_add_kernel,
                   {name: value for name, value in example.items() if name != "p"})


@pytest.mark.claim("drop_add_ln.gradient")
@profiles.share(0.1)
@given(data=st.data())
def test_backward_of_the_recorded_graph(dropout_add_kernel, data):
    """x, the residual, the parameters, y or residual_out written in place between the forward and the backward, and a
    second backward of one graph (retain_graph=True): autograd's error for a saved tensor written since, or the
    recorded forward's gradients (properties.checks.graph)."""
    require_backward(dropout_add_kernel)
    example = data.draw(masked_examples(dropout_add_kernel, upstream=True, every_input=True), "example")
    evidence.check(check_backward_of_the_recorded_graph, dropout_add_kernel, example)


@pytest.mark.claim("drop_add_ln.gradient")
@over_parameter_mixes
@profiles.share(0.25)
@given(data=st.data())
def test_gradient_uses_the_forward_mask_with_parameters_in_another_dtype(dropout_add_kernel, mix, data):
    """The forward's mask and 1/(1-p) in dx; dweight and dbias in the parameters' own dtype, within their bound."""
    require_backward(dropout_add_kernel)
    example = mixed_parameter_examples(dropout_add_kernel, mix, masked_examples, upstream=True)
    evidence.check(check_gradient, dropout_add_kernel, data.draw(example, "example"))


@pytest.mark.claim("drop_add_ln.layout_invariance")
@profiles.share(0.25)
@given(data=st.data())
def test_gradient_with_upstream_gradients_in_any_layout(dropout_add_kernel, data):
    """dy and dh strided, transposed or expanded (autograd's upstream gradient of a summed loss has stride 0): the
    gradients are still the forward's mask and J^T dy + dh (check_gradient)."""
    require_backward(dropout_add_kernel)
    example = data.draw(masked_examples(dropout_add_kernel, upstream=True), "example")
    layout = data.draw(st.sampled_from(UPSTREAM_LAYOUTS), "layout")
    example.update(dy=strided(example["dy"], layout), dh=strided(example["dh"], layout))
    evidence.check(check_gradient, dropout_add_kernel, example)


@pytest.mark.claim("drop_add_ln.layout_invariance")
@profiles.share(0.25)
@given(data=st.data())
def test_gradient_of_x_and_the_residual_in_any_layout(dropout_add_kernel, data):
    """x and the residual strided, transposed or views into larger buffers (dropout_add.layout_views), differentiated
    in those layouts: dx is the mask of this call's residual_out times J^T dy + dh over 1 - p (a forward keying its
    mask by row * stride + column and a backward by row * d + column disagree: pytorch/pytorch#47176's class)."""
    require_backward(dropout_add_kernel)
    example = data.draw(masked_examples(dropout_add_kernel, upstream=True), "example")
    layout = data.draw(st.sampled_from(LAYOUTS), "layout")
    x, residual, weight, bias = layout_views(example["x"], example["residual"], example["weight"], example["bias"],
                                             layout)
    evidence.check(check_gradient, dropout_add_kernel,
                   {**example, "x": x, "residual": residual, "weight": weight, "bias": bias})


@pytest.mark.claim("drop_add_ln.gradient")
@profiles.share(0.25)
@given(data=st.data())
def test_gradient_where_x_is_zero(dropout_add_kernel, data):
    """A quarter of x's elements exactly 0 (dropout_strategies.exact_zeros): dx there is still the seed's mask times
    J^T dy + dh over 1 - p, the mask read from the same seed's call on x without zeros (a backward recovering the mask
    as residual_out != residual drops a kept zero's gradient: ROCm/tensorflow-upstream#1012)."""
    require_backward(dropout_add_kernel)
    example = data.draw(masked_examples(dropout_add_kernel, upstream=True), "example")
    x = example["x"]
    zeros = exact_zeros(tuple(x.shape), data.draw(seeds(), "zeros seed"), str(x.device))
    evidence.check(check_gradient, dropout_add_kernel, {**example, "zeros": zeros})


@pytest.mark.claim("drop_add_ln.inputs_unmodified")
@profiles.share(0.5)
@given(data=st.data())
def test_inputs_unmodified(dropout_add_kernel, data):
    """Half the draws a forward under torch.inference_mode() (an in-place path when no gradient is needed)."""
    example = data.draw(dropout_add_examples(dropout_add_kernel, upstream=True, every_input=True, mixed=True),
                        "example")
    evidence.check(check_inputs_unmodified, dropout_add_kernel, {**example, "inference": data.draw(st.booleans())})


@pytest.mark.claim("drop_add_ln.inputs_unmodified")
@profiles.share(0.25)
@given(data=st.data())
def test_outputs_are_fresh_tensors(dropout_add_kernel, data):
    """A second call (on -x) leaves y and residual_out of the first as they were, half the draws under
    torch.inference_mode()."""
    example = data.draw(dropout_add_examples(dropout_add_kernel), "example")
    evidence.check(check_outputs_of_a_call_fresh, dropout_add_kernel,
                   {**example, "other": -example["x"], "inference": data.draw(st.booleans(), "inference")})


@pytest.mark.claim("drop_add_ln.row_independence")
@profiles.share(0.25)
@given(data=st.data())
def test_changing_one_row_changes_no_other(dropout_add_kernel, data):
    example = data.draw(dropout_add_examples(dropout_add_kernel, mixed=True), "example")
    evidence.check(check_changing_one_row, dropout_add_kernel, data.draw(row_zero_changed(example), "changed"))


@pytest.mark.claim("drop_add_ln.layout_invariance")
@profiles.share(0.5)
@given(data=st.data())
def test_p_zero_in_any_layout_is_the_contiguous_call(dropout_add_kernel, data):
    example = data.draw(dropout_add_examples(dropout_add_kernel, d=widths().filter(lambda d: d >= 2), mixed=True),
                        "example")
    layout = data.draw(st.sampled_from(LAYOUTS), "layout")
    x, residual, weight, bias = layout_views(example["x"], example["residual"], example["weight"],
                                             example.get("bias"), layout)
    evidence.check(check_noncontiguous, dropout_add_kernel, {**example, "x": x, "residual": residual,
                                                             "weight": weight, "bias": bias, "p": 0.0})


@pytest.mark.claim("drop_add_ln.layout_invariance")
@profiles.share(LAYOUT_FRACTION)
@given(data=st.data())
def test_mask_law_values_and_norm_in_any_layout(dropout_add_kernel, data):
    example = data.draw(masked_examples(dropout_add_kernel, MASK_SHAPES), "example")
    evidence.check(check_layout_invariance, dropout_add_kernel,
                   {**example, "alpha": _alpha("drop_add_ln.layout_invariance", LAYOUT_FRACTION)})
