"""Inverted dropout: every dropout claim (proofs/claims/dropout.py) on the ``dropout_kernel`` fixture.

The checks, and the statistics each rests on: :mod:`properties.checks.dropout`,
:mod:`properties.bounds.dropout_statistics`. Each statistical test spends its share of
``dropout_statistics.BUDGET`` (false alarms per kernel and run) evenly over its examples (:func:`_alpha`); its
sizes and example counts (properties/draws/dropout_strategies.py) are those at which tests/test_dropout_statistics.py
shows its power.
Determinism, keep rate, independence and the exact values at p = 0 and p = 1 are also checked at scale, one example
each, for kernels fast enough to run it (:func:`_require_native_speed`: Triton's CPU interpreter is not, measured):
LARGE_ELEMENTS = 2^20 elements, and beyond 2^24 (GPU_ELEMENTS) where the kernel runs on a CUDA GPU
(dropout_strategies.at_scale_elements).
"""

from __future__ import annotations

import time

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from core import guard
from core.capabilities import PROBED_DTYPES, discover, dtype_name
from properties import evidence, norms
from properties.bounds import dropout_statistics as statistics
from properties.checks.contracts import (
    LAYOUTS,
    SEQUENCE_LAYOUTS,
    UPSTREAM_LAYOUTS,
    check_outputs_of_a_call_fresh,
    inside_a_larger_buffer,
    strided,
)
from properties.checks.dropout import (
    check_backward_of_the_recorded_graph,
    check_determinism,
    check_edge_probabilities,
    check_empty_batch,
    check_fresh_outputs_at_edge_probabilities,
    check_gradient,
    check_gradient_at_edge_probabilities,
    check_independence,
    check_inputs_unmodified,
    check_keep_rate,
    check_kept_values_rounded_once,
    check_layout_invariance,
    check_mask_distribution,
    check_no_row_repeats_another,
    check_seeds,
    check_values,
    check_variance_bias,
)
from properties.draws.dropout_strategies import (
    EXTREME_FRACTION,
    EXTREME_PROBABILITIES,
    INDEPENDENCE_ELEMENTS,
    INDEPENDENCE_FRACTION,
    INDEPENDENCE_WIDTHS,
    KEEP_RATE_ELEMENTS,
    KEEP_RATE_FRACTION,
    KEEP_RATE_PROBABILITIES,
    KEEP_RATE_SHARES,
    KEEP_RATE_WIDTHS,
    LARGE_PATH_ELEMENTS,
    LAYOUT_ELEMENTS,
    LAYOUT_FRACTION,
    LAYOUT_WIDTHS,
    MASK_ELEMENTS,
    MASK_FRACTION,
    MASK_WIDTHS,
    ONE_EXAMPLE,
    SEED_ELEMENTS,
    SEED_WIDTHS,
    WIDE_INDEPENDENCE_ELEMENTS,
    at_scale_elements,
    dropout_inputs,
    exact_zeros,
    mask_inputs,
    nonzero_values,
    variance_bias_inputs,
)
from properties.draws.strategies import as_a_batch_of_two, rounded, row_counts, seeds, widths, with_no_rows
from properties.run import profiles

PROBE_ELEMENTS = 2**16
LARGE_CALL_LIMIT_S = 0.5
_large_call_seconds: dict[str, float] = {}


def _require_native_speed(kernel) -> None:
    """Skip an at-scale test when one call would take more than LARGE_CALL_LIMIT_S, predicted from the fastest
    of three PROBE_ELEMENTS calls (after a warm-up call). Measured on an idle machine: Triton's CPU interpreter 0.05 s
    for 2^16 (0.8 s for 2^20), torch's CPU dropout 0.05 s for 2^20. The size above 65 536 elements that a second
    code path for large inputs would take is checked for every kernel (LARGE_PATH_ELEMENTS)."""
    if kernel.name not in _large_call_seconds:
        probe = torch.ones(PROBE_ELEMENTS, device=discover(kernel).device)
        guard.call(kernel, probe, 0.5, 0, like=probe)
        seconds = []
        for _ in range(3):
            start = time.perf_counter()
            guard.call(kernel, probe, 0.5, 0, like=probe)
            seconds.append(time.perf_counter() - start)
        _large_call_seconds[kernel.name] = min(seconds) * at_scale_elements(kernel) / PROBE_ELEMENTS
    predicted = _large_call_seconds[kernel.name]
    if predicted > LARGE_CALL_LIMIT_S:
        pytest.skip(f"{at_scale_elements(kernel)} elements: one call would take {predicted:.2f} s (the fastest of "
                    f"three {PROBE_ELEMENTS}-element calls, scaled), above {LARGE_CALL_LIMIT_S} s")


# The loaded profile's example count, read at import as profiles.share reads it: inside a test, settings.default is
# the test's own settings (profiles.share's count), not the profile's.
PROFILE_EXAMPLES = settings.default.max_examples


def _alpha(claim: str, fraction: float, share: float = 1.0) -> float:
    """The false alarm of one example of a test running ``fraction`` of the profile's examples."""
    examples = max(1, round(PROFILE_EXAMPLES * fraction))
    return statistics.per_example(claim, examples, share)


def _statistical(check, kernel, example: dict, claim: str, fraction: float, share: float = 1.0) -> None:
    evidence.check(check, kernel, {**example, "alpha": _alpha(claim, fraction, share)})


@st.composite
def _small_inputs(draw, kernel) -> dict:
    """Up to 4 rows of a width up to 4096 (strategies.widths), p from dropout_strategies.drop_probabilities."""
    d = draw(widths(max_width=4096))
    return draw(dropout_inputs(kernel, (draw(row_counts(d)), d)))


@pytest.mark.claim("dropout.values")
@profiles.share(0.5)
@given(data=st.data())
def test_values_are_zero_or_rescaled(dropout_kernel, data):
    """Half the draws under torch.inference_mode(): p is the caller's there too (a functional dropout infers no eval
    mode from grad mode)."""
    example = data.draw(_small_inputs(dropout_kernel), "example")
    evidence.check(check_values, dropout_kernel, {**example, "inference": data.draw(st.booleans(), "inference")})


# p whose 1/(1-p) is not exact in float16 or bfloat16 (0.5, 0.75, 0.9 are: 2, 4, 10), so a scale rounded to x's
# dtype shows; rows of 1024 elements: hundreds of kept elements whose rounding a scale off by ~u/2 changes
INEXACT_SCALE_PROBABILITIES = (0.05, 0.1, 0.2, 0.3, 0.7)
ROUNDED_ONCE_ELEMENTS, ROUNDED_ONCE_WIDTHS = 1024, (256, 1024)


@pytest.mark.claim("dropout.values")
@pytest.mark.parametrize("dtype", PROBED_DTYPES, ids=dtype_name)
@profiles.share(0.1)
@given(data=st.data())
def test_kept_values_are_x_over_1_minus_p_rounded_once(dropout_kernel, dtype, data):
    """In each dtype: every kept element is x/(1-p) computed in float32 or wider, rounded once to x's dtype
    (check_kept_values_rounded_once): a 1/(1-p) held in x's 16-bit dtype (ATen's CPU ``noise.div_(1 - p)``) is the
    same relative error on every kept element, a bias of the kept values that their per-element bound allows."""
    example = data.draw(mask_inputs(dropout_kernel, ROUNDED_ONCE_ELEMENTS, ROUNDED_ONCE_WIDTHS,
                                    INEXACT_SCALE_PROBABILITIES, dtypes=(dtype,)), "example")
    evidence.check(check_kept_values_rounded_once, dropout_kernel, example)


@pytest.mark.claim("dropout.values")
@profiles.share(0.1)
@given(data=st.data())
def test_an_empty_batch(dropout_kernel, data):
    """x (and dy) [0, d] or [2, 0, d]: an empty y of x's shape and, with a backward, an empty dx (a mixture-of-experts
    layer's dropout on an expert given no token; a launch of zero programs, or a mask drawn by a whole-tensor op)."""
    example = data.draw(with_no_rows(data.draw(_small_inputs(dropout_kernel), "example")), "no rows")
    evidence.check(check_empty_batch, dropout_kernel, {**example, "dy": torch.zeros_like(example["x"])})


@pytest.mark.claim("dropout.edge_probabilities")
@profiles.share(0.25)
@given(data=st.data())
def test_p_zero_is_identity_and_p_one_is_zeros(dropout_kernel, data):
    example = data.draw(_small_inputs(dropout_kernel), "example")
    evidence.check(check_edge_probabilities, dropout_kernel, {"x": example["x"], "seed": example["seed"]})


@pytest.mark.claim("dropout.edge_probabilities")
@profiles.share(ONE_EXAMPLE)
@given(data=st.data())
def test_p_zero_is_identity_and_p_one_is_zeros_at_scale(dropout_kernel, data):
    _require_native_speed(dropout_kernel)
    example = data.draw(mask_inputs(dropout_kernel, at_scale_elements(dropout_kernel), (1024,)), "example")
    evidence.check(check_edge_probabilities, dropout_kernel, {"x": example["x"], "seed": example["seed"]})


@pytest.mark.claim("dropout.edge_probabilities")
@profiles.share(0.1)
@given(data=st.data())
def test_outputs_at_p_zero_and_one_are_fresh_tensors(dropout_kernel, data):
    """y shares no storage with x at p = 0 or p = 1 (a short-circuit returning x: its caller's ``y += residual``
    writes x; inputs_unmodified never writes y)."""
    example = data.draw(_small_inputs(dropout_kernel), "example")
    evidence.check(check_fresh_outputs_at_edge_probabilities, dropout_kernel, {"x": example["x"],
                                                                               "seed": example["seed"]})


@pytest.mark.claim("dropout.edge_probabilities")
@profiles.share(0.1)
@given(data=st.data())
def test_gradient_at_p_zero_is_dy_and_at_p_one_zeros(dropout_kernel, data):
    """The backward's own special cases: a forward that returns zeros at p = 1 and a backward that still scales by
    1/(1-p) (pytorch/pytorch#75288's guard, needed in both directions) give 0 * inf = NaN."""
    norms.require_backward(dropout_kernel)
    example = data.draw(_small_inputs(dropout_kernel), "example")
    dy = nonzero_values(tuple(example["x"].shape), data.draw(seeds(), "dy seed"), 0.0, 1.0)
    evidence.check(check_gradient_at_edge_probabilities, dropout_kernel,
                   {"x": example["x"], "seed": example["seed"],
                    "dy": rounded(dy, example["x"].dtype, str(example["x"].device))})


@pytest.mark.claim("dropout.gradient")
@profiles.share(0.25)
@given(data=st.data())
def test_gradient_is_the_forward_mask_over_one_minus_p(dropout_kernel, data):
    norms.require_backward(dropout_kernel)
    example = data.draw(_small_inputs(dropout_kernel), "example")
    dy = nonzero_values(tuple(example["x"].shape), data.draw(seeds(), "dy seed"), 0.0, 1.0)
    example["dy"] = rounded(dy, example["x"].dtype, str(example["x"].device))
    evidence.check(check_gradient, dropout_kernel, example)


@pytest.mark.claim("dropout.gradient")
@profiles.share(0.25)
@given(data=st.data())
def test_gradient_where_x_is_zero(dropout_kernel, data):
    """A quarter of x's elements exactly 0 (dropout_strategies.exact_zeros): dL/dx there is still the seed's mask
    times dy / (1 - p), the mask read from the same seed's call on x without zeros (a backward recovering the mask as
    y / x passes dy where x = 0: kaldi-asr/kaldi#3890)."""
    norms.require_backward(dropout_kernel)
    example = data.draw(_small_inputs(dropout_kernel), "example")
    x = example["x"]
    dy = nonzero_values(tuple(x.shape), data.draw(seeds(), "dy seed"), 0.0, 1.0)
    example["dy"] = rounded(dy, x.dtype, str(x.device))
    zeros = exact_zeros(tuple(x.shape), data.draw(seeds(), "zeros seed"), str(x.device))
    evidence.check(check_gradient, dropout_kernel, {**example, "zeros": zeros})


@pytest.mark.claim("dropout.gradient")
@profiles.share(ONE_EXAMPLE)
@given(data=st.data())
def test_gradient_is_the_forward_mask_at_scale(dropout_kernel, data):
    """At the at-scale size (2^20 elements, beyond 2^24 on a GPU): a backward that draws its mask again in chunks
    (a program per 2^18 elements, reseeded) where the forward drew one stream gets another mask there."""
    norms.require_backward(dropout_kernel)
    _require_native_speed(dropout_kernel)
    example = data.draw(mask_inputs(dropout_kernel, at_scale_elements(dropout_kernel), (1024,)), "example")
    dy = nonzero_values(tuple(example["x"].shape), data.draw(seeds(), "dy seed"), 0.0, 1.0)
    example["dy"] = rounded(dy, example["x"].dtype, str(example["x"].device))
    evidence.check(check_gradient, dropout_kernel, example)


@pytest.mark.claim("dropout.gradient")
@profiles.share(0.1)
@given(data=st.data())
def test_backward_of_the_recorded_graph(dropout_kernel, data):
    """x or y (an in-place add to the dropout's output) written in place between the forward and the backward, and a
    second backward of one graph (retain_graph=True): autograd's error for a saved tensor written since, or the
    recorded forward's gradients (properties.checks.graph)."""
    norms.require_backward(dropout_kernel)
    example = data.draw(_small_inputs(dropout_kernel), "example")
    dy = nonzero_values(tuple(example["x"].shape), data.draw(seeds(), "dy seed"), 0.0, 1.0)
    example["dy"] = rounded(dy, example["x"].dtype, str(example["x"].device))
    evidence.check(check_backward_of_the_recorded_graph, dropout_kernel, example)


@pytest.mark.claim("dropout.layout_invariance")
@profiles.share(0.25)
@given(data=st.data())
def test_gradient_with_an_upstream_gradient_in_any_layout(dropout_kernel, data):
    """dy strided, transposed or expanded (autograd's upstream gradient of a summed loss has stride 0): dL/dx is
    still the forward's mask times dy / (1 - p) (check_gradient)."""
    norms.require_backward(dropout_kernel)
    example = data.draw(_small_inputs(dropout_kernel), "example")
    dy = nonzero_values(tuple(example["x"].shape), data.draw(seeds(), "dy seed"), 0.0, 1.0)
    dy = rounded(dy, example["x"].dtype, str(example["x"].device))
    example["dy"] = strided(dy, data.draw(st.sampled_from(UPSTREAM_LAYOUTS), "layout"))
    evidence.check(check_gradient, dropout_kernel, example)


# x's layouts for the gradient: strided, transposed, batch-first views of sequence-first tensors, a slice of a longer
# sequence, a view with a storage offset and a longer row stride
X_LAYOUTS = (*LAYOUTS, *SEQUENCE_LAYOUTS, "offset")


@pytest.mark.claim("dropout.layout_invariance")
@profiles.share(0.25)
@given(data=st.data())
def test_gradient_of_x_in_any_layout(dropout_kernel, data):
    """x strided, transposed, a view of a sequence-first tensor or into a larger buffer (X_LAYOUTS), differentiated in
    that layout: dL/dx is the mask of this call's y times dy / (1 - p) (a forward keying its mask by x's memory
    offsets and a backward by the logical ones disagree: pytorch/pytorch#47176)."""
    norms.require_backward(dropout_kernel)
    example = data.draw(_small_inputs(dropout_kernel), "example")
    x = example["x"]
    if x.dim() == 2 and x.shape[0] >= 2 and data.draw(st.booleans(), "as [2, rows / 2, d]"):
        x = x[: x.shape[0] // 2 * 2].reshape(2, x.shape[0] // 2, x.shape[-1])
    dy = nonzero_values(tuple(x.shape), data.draw(seeds(), "dy seed"), 0.0, 1.0)
    layout = data.draw(st.sampled_from(X_LAYOUTS), "layout")
    laid_out = inside_a_larger_buffer(x) if layout == "offset" else strided(x, layout)
    evidence.check(check_gradient, dropout_kernel,
                   {**example, "x": laid_out, "dy": rounded(dy, x.dtype, str(x.device))})


@pytest.mark.claim("dropout.keep_rate")
@profiles.share(KEEP_RATE_FRACTION)
@given(data=st.data())
def test_keep_rate(dropout_kernel, data):
    example = data.draw(mask_inputs(dropout_kernel, KEEP_RATE_ELEMENTS, KEEP_RATE_WIDTHS, KEEP_RATE_PROBABILITIES),
                        "example")
    _statistical(check_keep_rate, dropout_kernel, example, "dropout.keep_rate", KEEP_RATE_FRACTION,
                 share=KEEP_RATE_SHARES["drawn"])


@pytest.mark.claim("dropout.keep_rate")
@profiles.share(ONE_EXAMPLE)
@given(data=st.data())
def test_keep_rate_at_scale(dropout_kernel, data):
    _require_native_speed(dropout_kernel)
    example = data.draw(mask_inputs(dropout_kernel, at_scale_elements(dropout_kernel), (1024,),
                                    KEEP_RATE_PROBABILITIES), "example")
    _statistical(check_keep_rate, dropout_kernel, example, "dropout.keep_rate", ONE_EXAMPLE,
                 share=KEEP_RATE_SHARES["at scale"])


@pytest.mark.claim("dropout.keep_rate")
@pytest.mark.parametrize("dtype", PROBED_DTYPES, ids=dtype_name)
@profiles.share(EXTREME_FRACTION)
@given(data=st.data())
def test_keep_rate_at_extreme_probabilities_in_each_dtype(dropout_kernel, dtype, data):
    """p = 2^-30, 0.001 and 0.999 in each dtype (dropout_strategies.EXTREME_PROBABILITIES: a uniform drawn in
    bfloat16, a keep threshold that wraps)."""
    example = data.draw(mask_inputs(dropout_kernel, KEEP_RATE_ELEMENTS, KEEP_RATE_WIDTHS, EXTREME_PROBABILITIES,
                                    dtypes=(dtype,)), "example")
    _statistical(check_keep_rate, dropout_kernel, example, "dropout.keep_rate", EXTREME_FRACTION,
                 share=KEEP_RATE_SHARES["extreme"] / len(PROBED_DTYPES))


@pytest.mark.claim("dropout.mask_distribution")
@profiles.share(MASK_FRACTION)
@given(data=st.data())
def test_per_row_kept_counts_are_binomial(dropout_kernel, data):
    example = data.draw(mask_inputs(dropout_kernel, MASK_ELEMENTS, MASK_WIDTHS), "example")
    _statistical(check_mask_distribution, dropout_kernel, example, "dropout.mask_distribution", MASK_FRACTION)


@pytest.mark.claim("dropout.independence")
@profiles.share(INDEPENDENCE_FRACTION)
@given(data=st.data())
def test_bits_are_independent(dropout_kernel, data):
    """x [R, d], then the same x as [2, R / 2, d] (strategies.as_a_batch_of_two: rows r and r + R / 2, which the
    test compares, one position of two batch elements), each at half the example's false-alarm share."""
    example = data.draw(mask_inputs(dropout_kernel, INDEPENDENCE_ELEMENTS, INDEPENDENCE_WIDTHS), "example")
    for shaped in (example, as_a_batch_of_two(example)):
        _statistical(check_independence, dropout_kernel, shaped, "dropout.independence", INDEPENDENCE_FRACTION,
                     share=0.25)


@pytest.mark.claim("dropout.independence")
@profiles.share(ONE_EXAMPLE)
@given(data=st.data())
def test_bits_are_independent_at_scale(dropout_kernel, data):
    _require_native_speed(dropout_kernel)
    example = data.draw(mask_inputs(dropout_kernel, at_scale_elements(dropout_kernel), (1024,)), "example")
    _statistical(check_independence, dropout_kernel, example, "dropout.independence", ONE_EXAMPLE, share=0.15)


@pytest.mark.claim("dropout.independence")
@profiles.share(ONE_EXAMPLE)
@given(data=st.data())
def test_rows_wider_than_4096_are_independent(dropout_kernel, data):
    """8 rows of 8192 (a kernel that offsets its random numbers by the column only above some width, 4096 or less,
    gives every row one mask: the rows' agreement shows it)."""
    example = data.draw(mask_inputs(dropout_kernel, WIDE_INDEPENDENCE_ELEMENTS, (8192,)), "example")
    _statistical(check_independence, dropout_kernel, example, "dropout.independence", ONE_EXAMPLE, share=0.15)


# Rows of 64 columns and more (a vectorized path's per-row random offset), 2^16 elements: 1024 rows of 64 to 8 of 8192
LAGGED_ELEMENTS, LAGGED_WIDTHS, LAGGED_FRACTION = 2**16, (64, 100, 512, 8192), 0.1


@pytest.mark.claim("dropout.independence")
@profiles.share(LAGGED_FRACTION)
@given(data=st.data())
def test_no_row_repeats_another_at_any_shift(dropout_kernel, data):
    """Rows r and r + k, k <= 8, at every shift (dropout_statistics.lagged_rows_finding): a per-row random offset
    advanced by less than the row consumes (flagos-ai/FlagGems#85, #27: half the row) repeats row r's draws in row
    r + 1 shifted, where one column of two rows and the counts of two rows see only chance. At 0.2 of the claim's
    false-alarm budget (the at-scale and the 8192-wide tests 0.15 each, the drawn shapes 0.5)."""
    example = data.draw(mask_inputs(dropout_kernel, LAGGED_ELEMENTS, LAGGED_WIDTHS), "example")
    _statistical(check_no_row_repeats_another, dropout_kernel, example, "dropout.independence", LAGGED_FRACTION,
                 share=0.2)


@pytest.mark.claim("dropout.seeds")
@profiles.share(MASK_FRACTION)
@given(data=st.data())
def test_different_seeds_give_independent_masks(dropout_kernel, data):
    example = data.draw(mask_inputs(dropout_kernel, SEED_ELEMENTS, SEED_WIDTHS), "example")
    _statistical(check_seeds, dropout_kernel, example, "dropout.seeds", MASK_FRACTION)


@pytest.mark.claim("dropout.layout_invariance")
@profiles.share(LAYOUT_FRACTION)
@given(data=st.data())
def test_non_contiguous_input_gets_the_same_mask_law(dropout_kernel, data):
    example = data.draw(mask_inputs(dropout_kernel, LAYOUT_ELEMENTS, LAYOUT_WIDTHS), "example")
    _statistical(check_layout_invariance, dropout_kernel, example, "dropout.layout_invariance", LAYOUT_FRACTION)


@pytest.mark.claim("dropout.variance_bias")
@profiles.share(MASK_FRACTION)
@given(data=st.data())
def test_variance_bias(dropout_kernel, data):
    example = data.draw(variance_bias_inputs(dropout_kernel), "example")
    alpha = _alpha("dropout.variance_bias", MASK_FRACTION)
    assume(statistics.VarianceBiasPlan(norms.as_float64(example["x"])[0], example["p"], alpha).feasible)
    evidence.check(check_variance_bias, dropout_kernel, {**example, "alpha": alpha})


@pytest.mark.claim("dropout.determinism")
@profiles.share(0.25)
@given(data=st.data())
def test_same_seed_same_output(dropout_kernel, data):
    evidence.check(check_determinism, dropout_kernel, data.draw(_small_inputs(dropout_kernel), "example"))


@pytest.mark.claim("dropout.determinism")
@profiles.share(ONE_EXAMPLE)
@given(data=st.data())
def test_same_seed_same_output_above_65536_elements(dropout_kernel, data):
    example = data.draw(mask_inputs(dropout_kernel, LARGE_PATH_ELEMENTS, (256, 1024)), "example")
    evidence.check(check_determinism, dropout_kernel, example)


@pytest.mark.claim("dropout.determinism")
@profiles.share(ONE_EXAMPLE)
@given(data=st.data())
def test_same_seed_same_output_at_scale(dropout_kernel, data):
    _require_native_speed(dropout_kernel)
    example = data.draw(mask_inputs(dropout_kernel, at_scale_elements(dropout_kernel), (1024,)), "example")
    evidence.check(check_determinism, dropout_kernel, example)


@pytest.mark.claim("dropout.inputs_unmodified")
@profiles.share(0.25)
@given(data=st.data())
def test_input_unmodified(dropout_kernel, data):
    """Half the draws under torch.inference_mode() (an in-place path when no gradient is needed)."""
    example = data.draw(_small_inputs(dropout_kernel), "example")
    evidence.check(check_inputs_unmodified, dropout_kernel, {**example, "inference": data.draw(st.booleans())})


@pytest.mark.claim("dropout.inputs_unmodified")
@profiles.share(0.25)
@given(data=st.data())
def test_outputs_are_fresh_tensors(dropout_kernel, data):
    """A second call (on -x) leaves the first call's output as it was, half the draws under torch.inference_mode()."""
    example = data.draw(_small_inputs(dropout_kernel), "example")
    evidence.check(check_outputs_of_a_call_fresh, dropout_kernel,
                   {**example, "other": -example["x"], "inference": data.draw(st.booleans(), "inference")})
