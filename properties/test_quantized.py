"""The quantized-output kinds (layernorm_quant, rmsnorm_quant, add_rmsnorm_quant): {ln_quant,rms_quant,add_rms_quant}
.values, .scales, .saturation, .dequantized, .inputs_unmodified, and add_rms_quant.residual_out.

The checks, and the derivation each rests on: :mod:`properties.checks.quantized` (claims in
proofs/claims/quantization.py); the draws: :mod:`properties.draws.quant_strategies` (each declared format, static
and dynamic scales, all-zero rows, saturating static scales, amax / fmax around the declared floor, FP8 subnormal
v), and here: x and the residual as strided views, a NaN/inf row, a second call on other values.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from core.boundary import HOST, to_kernel
from proofs.quantization import FORMATS
from properties import evidence
from properties.checks.contracts import LAYOUTS, SEQUENCE_LAYOUTS, inside_a_larger_buffer, strided
from properties.checks.forward import new_parameter_values
from properties.checks.quantized import (
    check_dequantized,
    check_empty_batch,
    check_inputs_unmodified,
    check_nonfinite_row,
    check_outputs_fresh,
    check_residual_out,
    check_saturation,
    check_scales,
    check_values,
    check_values_after_an_in_place_update,
)
from properties.draws.quant_strategies import floor_examples, quant_examples, subnormal_examples, tie_examples
from properties.draws.strategies import rounded, seeds, standard_values, widths, with_no_rows
from properties.run import profiles


@pytest.mark.claim("ln_quant.values", "rms_quant.values", "add_rms_quant.values")
@profiles.share(1.0)
@given(data=st.data())
def test_q_is_the_format_rounding_of_y_over_the_scale(quant_norm_kernel, data):
    example = data.draw(quant_examples(quant_norm_kernel), "example")
    evidence.check(check_values, quant_norm_kernel, example)


@pytest.mark.claim("ln_quant.values", "rms_quant.values", "add_rms_quant.values")
@profiles.share(0.25)
@given(data=st.data())
def test_exact_ties_round_as_declared(quant_norm_kernel, data):
    """y exactly halfway between two values of the format (quant_strategies.tie_examples): ties to even (FP8, INT8 by
    default) or away from zero (INT8's declared "half_away"); the other rule gives the other neighbour (an INT8
    rounding by floor(v + 0.5) or a conversion that rounds ties away, tenstorrent/tt-metal#56525,
    triton-lang/triton#11897). Random rows put a tie on y with probability 0: the draws above cannot tell them."""
    evidence.check(check_values, quant_norm_kernel, data.draw(tie_examples(quant_norm_kernel), "example"))


@pytest.mark.claim("ln_quant.values", "rms_quant.values", "add_rms_quant.values")
@pytest.mark.parametrize("scale_kind", ("static", "dynamic"))
@profiles.share(0.125)
@given(data=st.data())
def test_q_after_an_in_place_update_of_the_parameters_and_scale(quant_norm_kernel, scale_kind, data):
    """weight, bias and (static) the scale overwritten in place between two calls (the same tensors, new values),
    each declared scale kind in every run."""
    example = data.draw(quant_examples(quant_norm_kernel, scales=(scale_kind,)), "example")
    new = new_parameter_values(example)
    if example["scale"] is not None:
        new["new_scale"] = to_kernel(1.5 * example["scale"].double(), torch.float32, example["scale"].device)
    evidence.check(check_values_after_an_in_place_update, quant_norm_kernel, {**example, **new})


@pytest.mark.claim("ln_quant.values", "rms_quant.values", "add_rms_quant.values")
@pytest.mark.parametrize("scale_kind", ("static", "dynamic"))
@profiles.share(0.1)
@given(data=st.data())
def test_an_empty_batch(quant_norm_kernel, scale_kind, data):
    """x (and the residual) [0, d] or [2, 0, d], in each format (a dynamic scale's amax over no element)."""
    example = data.draw(quant_examples(quant_norm_kernel, scales=(scale_kind,), rows=st.just(1)), "example")
    evidence.check(check_empty_batch, quant_norm_kernel, data.draw(with_no_rows(example), "no rows"))


@pytest.mark.claim("ln_quant.scales", "rms_quant.scales", "add_rms_quant.scales")
@profiles.share(0.75)
@given(data=st.data())
def test_the_scales_are_amax_over_the_format_maximum(quant_norm_kernel, data):
    example = data.draw(quant_examples(quant_norm_kernel), "example")
    evidence.check(check_scales, quant_norm_kernel, example)


@pytest.mark.claim("ln_quant.scales", "rms_quant.scales", "add_rms_quant.scales")
@pytest.mark.parametrize("quant_format", list(FORMATS))
@profiles.share(0.25)
@given(data=st.data())
def test_the_dynamic_scale_in_each_format(quant_norm_kernel, quant_format, data):
    """Each declared format's own fmax, whatever the draws above chose (a constant of the wrong format, e.g.
    float8_e4m3fnuz's 240 for e4m3fn's 448, is wrong in that format only)."""
    example = data.draw(quant_examples(quant_norm_kernel, scales=("dynamic",), formats=(quant_format,)), "example")
    evidence.check(check_scales, quant_norm_kernel, example)


# The gains of a weight that makes |y| large: a per-token amax clamped to an upper bound (vLLM's scale_ub, 1200 in
# Meta's FP8 Llama recipe: vllm-project/vllm#48868) or kept in a format too narrow for it shows only past there,
# and O(1) weights keep |y| below 4 sqrt(d)
LARGE_OUTPUT_GAINS = (1e2, 1e3, 1e4)


@pytest.mark.claim("ln_quant.scales", "rms_quant.scales", "add_rms_quant.scales")
@profiles.share(0.25)
@given(data=st.data())
def test_the_dynamic_scale_of_large_outputs(quant_norm_kernel, data):
    """The weight (ones where none is drawn) times 100 to 10^4 (LARGE_OUTPUT_GAINS), the bias too, the gain capped
    so that |y| <= gain (max |weight| sqrt(d) + max |bias|) stays below a quarter of x's largest finite value (|x_hat|
    <= sqrt(d)): |y| in the thousands or more, still amax / fmax."""
    example = data.draw(quant_examples(quant_norm_kernel, scales=("dynamic",)), "example")
    x, weight, bias = example["x"], example["weight"], example.get("bias")
    d = x.shape[-1]
    values = torch.ones(d, dtype=torch.float64, device=HOST) if weight is None else weight.double().cpu()
    shifts = None if bias is None else bias.double().cpu()
    largest = values.abs().max().item() * math.sqrt(d) + (0.0 if shifts is None else shifts.abs().max().item())
    gain = data.draw(st.sampled_from(LARGE_OUTPUT_GAINS), "gain")
    gain = min(gain, torch.finfo(x.dtype).max / 4 / largest) if largest > 0 else gain
    example["weight"] = rounded(gain * values, x.dtype if weight is None else weight.dtype, str(x.device))
    if shifts is not None:
        example["bias"] = rounded(gain * shifts, bias.dtype, str(x.device))
    evidence.check(check_scales, quant_norm_kernel, example)


# Rows wider than a kernel's one block of 1024 columns (a per-token amax taken over the first block alone): the
# largest |y| of a row lies beyond the first 1024 columns with probability 3/4 or 7/8; 1536 and 3584 (model widths)
# end in a partial block, which a loop over whole blocks drops from the amax or the statistics (ROCm/aiter#5044):
# the largest |y| of one of WIDE_QUANT_TOKENS rows lies in the last 512 columns of 1536 with probability 1 - (2/3)^16;
# 1030: a partial last vector of 8 as well (a vectorized path's unhandled tail, ROCm/aiter#5044, flashinfer#4480)
WIDE_QUANT_WIDTHS = (4096, 1536, 8192, 3584, 1030)
WIDE_QUANT_TOKENS = 16
MANY_TOKENS = (129, 257)


@pytest.mark.claim("ln_quant.scales", "rms_quant.scales", "add_rms_quant.scales")
@pytest.mark.parametrize("d", WIDE_QUANT_WIDTHS)
@profiles.share(0.05)
@given(data=st.data())
def test_the_dynamic_scale_of_rows_wider_than_1024(quant_norm_kernel, d, data):
    example = quant_examples(quant_norm_kernel, scales=("dynamic",), d=st.just(d), rows=st.just(WIDE_QUANT_TOKENS))
    evidence.check(check_scales, quant_norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("ln_quant.values", "rms_quant.values", "add_rms_quant.values")
@pytest.mark.parametrize("d", WIDE_QUANT_WIDTHS)
@profiles.share(0.05)
@given(data=st.data())
def test_q_of_rows_wider_than_1024(quant_norm_kernel, d, data):
    """q of rows past a kernel's one block of 1024 columns, static and dynamic scales, a random weight (and bias) (a
    wide-row path that reads the weight or y of its later blocks wrongly while its scale is right: the scale tests
    above cannot see it)."""
    example = quant_examples(quant_norm_kernel, d=st.just(d), rows=st.just(WIDE_QUANT_TOKENS), every_input=True)
    evidence.check(check_values, quant_norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("ln_quant.scales", "rms_quant.scales", "add_rms_quant.scales")
@profiles.share(0.1)
@given(data=st.data())
def test_the_scales_of_more_than_128_tokens(quant_norm_kernel, data):
    """Per-token scales of 129 and 257 tokens (past a grid of 128 programs that strides over the tokens: a scale
    written at the program's index instead of the token's leaves the later tokens' unwritten)."""
    example = quant_examples(quant_norm_kernel, scales=("dynamic",), rows=st.sampled_from(MANY_TOKENS))
    evidence.check(check_scales, quant_norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("ln_quant.saturation", "rms_quant.saturation", "add_rms_quant.saturation")
@profiles.share(0.5)
@given(data=st.data())
def test_values_beyond_the_format_saturate(quant_norm_kernel, data):
    example = data.draw(quant_examples(quant_norm_kernel, scales=("static",), saturating=True), "example")
    evidence.check(check_saturation, quant_norm_kernel, example)


@pytest.mark.claim("ln_quant.dequantized", "rms_quant.dequantized", "add_rms_quant.dequantized")
@profiles.share(0.5)
@given(data=st.data())
def test_the_dequantized_output_is_within_half_a_quantum_of_the_norm(quant_norm_kernel, data):
    example = data.draw(quant_examples(quant_norm_kernel), "example")
    evidence.check(check_dequantized, quant_norm_kernel, example)


@pytest.mark.claim("add_rms_quant.residual_out")
@profiles.share(0.5)
@given(data=st.data())
def test_residual_out_is_the_sum_in_its_declared_dtype(add_quant_norm_kernel, data):
    example = data.draw(quant_examples(add_quant_norm_kernel), "example")
    evidence.check(check_residual_out, add_quant_norm_kernel, example)


@pytest.mark.claim("ln_quant.inputs_unmodified", "rms_quant.inputs_unmodified", "add_rms_quant.inputs_unmodified")
@profiles.share(0.1)
@given(data=st.data())
def test_inputs_unmodified(quant_norm_kernel, data):
    """Half the draws under torch.inference_mode() (a serving path that uses x as scratch)."""
    example = data.draw(quant_examples(quant_norm_kernel), "example")
    evidence.check(check_inputs_unmodified, quant_norm_kernel, {**example, "inference": data.draw(st.booleans())})


# The draws below catch their bug on almost every example (a layout, a NaN, a second call, a floor, a subnormal):
# two examples each in the ci profile (40 in thorough)
EDGE_DRAWS_SHARE = 0.1


@pytest.mark.claim("ln_quant.scales", "rms_quant.scales", "add_rms_quant.scales")
@profiles.share(EDGE_DRAWS_SHARE)
@given(data=st.data())
def test_the_dynamic_scale_around_the_declared_floor(quant_norm_kernel, data):
    """amax / fmax at 1/4, 1/2 and 2 times the declared floor on non-zero rows (quant_strategies.floor_examples): the
    scale is max(amax / fmax, floor), not the floor for all-zero rows only (vLLM's min_scaling_factor)."""
    evidence.check(check_scales, quant_norm_kernel, data.draw(floor_examples(quant_norm_kernel), "example"))


@pytest.mark.claim("ln_quant.values", "rms_quant.values", "add_rms_quant.values")
@pytest.mark.parametrize("scale_kind", ("static", "dynamic"))
@profiles.share(EDGE_DRAWS_SHARE)
@given(data=st.data())
def test_q_in_the_fp8_subnormal_range(quant_norm_kernel, scale_kind, data):
    """v below the FP8 format's smallest normal at widths up to 512 (quant_strategies.subnormal_examples): a conversion
    flushing subnormal results to zero (triton-lang/triton#7382) gives 0 where Q(v) is a subnormal."""
    example = subnormal_examples(quant_norm_kernel, scale_kind)
    evidence.check(check_values, quant_norm_kernel, data.draw(example, "example"))


# Layouts of x and the residual: the plain norms' strided views (every other column, transposed), a view with a storage
# offset and rows d + 3 apart (q of a fused qkv projection split with torch.split: vllm-project/vllm-xpu-kernels#397),
# and [2, 3, d] views whose rows are unevenly spaced (sequence-first seen batch-first, a slice of a longer sequence)
QUANT_LAYOUTS = (*LAYOUTS, "offset", *SEQUENCE_LAYOUTS)
LAYOUT_ROWS = 6


def _laid_out(example: dict, layout: str) -> dict:
    """The example with x and the residual (where given) as views in ``layout`` (their values unchanged), NaN outputs
    judged by the checks (a view read past its bounds reads its buffer's NaN)."""
    def view(t: torch.Tensor | None) -> torch.Tensor | None:
        if t is None:
            return None
        if layout == "offset":
            return inside_a_larger_buffer(t)
        return strided(t.reshape(2, 3, -1) if layout in SEQUENCE_LAYOUTS else t, layout)

    return {**example, "x": view(example["x"]), "residual": view(example.get("residual")), "allow_nonfinite": True}


@st.composite
def _strided_examples(draw, kernel, scales: tuple[str, ...] = ("static", "dynamic")) -> dict:
    example = draw(quant_examples(kernel, scales=scales, d=widths().filter(lambda d: d >= 2),
                                  rows=st.just(LAYOUT_ROWS)))
    return _laid_out(example, draw(st.sampled_from(QUANT_LAYOUTS), "layout"))


@pytest.mark.claim("ln_quant.values", "rms_quant.values", "add_rms_quant.values")
@profiles.share(EDGE_DRAWS_SHARE)
@given(data=st.data())
def test_q_of_strided_inputs(quant_norm_kernel, data):
    """x (and the residual) as non-contiguous views: q against the model at the kernel's own scale, as for contiguous
    x (the values, not the contiguous call's bits: a kernel may sum a strided row in another order, which moves y
    within its bound and q across a rounding boundary of Q)."""
    evidence.check(check_values, quant_norm_kernel, data.draw(_strided_examples(quant_norm_kernel), "example"))


@pytest.mark.claim("ln_quant.scales", "rms_quant.scales", "add_rms_quant.scales")
@profiles.share(EDGE_DRAWS_SHARE)
@given(data=st.data())
def test_the_dynamic_scales_of_strided_inputs(quant_norm_kernel, data):
    """As above, the dynamic per-row scales against the model (amax of the row's own y, not of the memory after the
    row's first element)."""
    example = _strided_examples(quant_norm_kernel, scales=("dynamic",))
    evidence.check(check_scales, quant_norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("add_rms_quant.residual_out")
@profiles.share(EDGE_DRAWS_SHARE)
@given(data=st.data())
def test_residual_out_of_strided_inputs(add_quant_norm_kernel, data):
    """residual_out of strided x and residual: x + residual rounded once, element by element (a layout-independent
    value, bit for bit, for every correct kernel)."""
    evidence.check(check_residual_out, add_quant_norm_kernel,
                   data.draw(_strided_examples(add_quant_norm_kernel), "example"))


NONFINITE = (math.nan, math.inf, -math.inf)


@st.composite
def _poisoned_examples(draw, kernel, scales: tuple[str, ...], formats: tuple[str, ...] | None = None) -> dict:
    """An example of 2 to 5 rows and ``poisoned``: x with a NaN, +inf or -inf at one column of row 0."""
    example = draw(quant_examples(kernel, scales=scales, formats=formats, rows=st.integers(2, 5)))
    poisoned = example["x"].clone()
    column = draw(st.integers(0, poisoned.shape[-1] - 1), "column")
    poisoned[0, column] = draw(st.sampled_from(NONFINITE), "value")
    return {**example, "poisoned": poisoned}


@pytest.mark.claim("ln_quant.values", "rms_quant.values", "add_rms_quant.values")
@profiles.share(EDGE_DRAWS_SHARE)
@given(data=st.data())
def test_a_nonfinite_row_under_a_static_fp8_scale(quant_norm_kernel, data):
    """A NaN/inf in row 0 of x: q NaN where y is (Q(NaN) = NaN), the other rows' q unchanged (checks.quantized.
    check_nonfinite_row). FP8 only: INT8 has no NaN to show it in, and a static scale none either."""
    example = _poisoned_examples(quant_norm_kernel, ("static",), ("float8_e4m3fn", "float8_e5m2"))
    evidence.check(check_nonfinite_row, quant_norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("ln_quant.scales", "rms_quant.scales", "add_rms_quant.scales")
@profiles.share(EDGE_DRAWS_SHARE)
@given(data=st.data())
def test_the_dynamic_scale_of_a_nonfinite_row(quant_norm_kernel, data):
    """A NaN/inf in row 0 of x, each format: the row's dynamic scale NaN (or, FP8, q NaN where y is), the other rows'
    q and scales unchanged (checks.quantized.check_nonfinite_row)."""
    example = _poisoned_examples(quant_norm_kernel, ("dynamic",))
    evidence.check(check_nonfinite_row, quant_norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("ln_quant.inputs_unmodified", "rms_quant.inputs_unmodified", "add_rms_quant.inputs_unmodified")
@profiles.share(EDGE_DRAWS_SHARE)
@given(data=st.data())
def test_outputs_are_fresh_tensors(quant_norm_kernel, data):
    """A second call on other values (new seeded rows: -x would give a RMSNorm row the same dynamic scale) leaves the
    first call's q, dynamic scale and residual_out as they were, half the draws under torch.inference_mode()."""
    example = data.draw(quant_examples(quant_norm_kernel), "example")
    x = example["x"]
    other = rounded(standard_values(tuple(x.shape), "normal", data.draw(seeds(), "seed")), x.dtype, x.device)
    evidence.check(check_outputs_fresh, quant_norm_kernel,
                   {**example, "other": other, "inference": data.draw(st.booleans(), "inference")})
