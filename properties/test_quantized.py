"""The quantized-output kinds (layernorm_quant, rmsnorm_quant, add_rmsnorm_quant): {ln_quant,rms_quant,add_rms_quant}
.values, .scales, .saturation, .dequantized, and add_rms_quant.residual_out.

The checks, and the derivation each rests on: :mod:`properties.checks.quantized` (claims in
proofs/claims/quantization.py); the draws: :mod:`properties.draws.quant_strategies` (each declared format, static
and dynamic scales, all-zero rows, saturating static scales).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from core.boundary import to_kernel
from proofs.quantization import FORMATS
from properties import evidence
from properties.checks.forward import new_parameter_values
from properties.checks.quantized import (
    check_dequantized,
    check_empty_batch,
    check_inputs_unmodified,
    check_residual_out,
    check_saturation,
    check_scales,
    check_values,
    check_values_after_an_in_place_update,
)
from properties.draws.quant_strategies import quant_examples, tie_examples
from properties.draws.strategies import with_no_rows
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
@profiles.share(0.25)
@given(data=st.data())
def test_q_after_an_in_place_update_of_the_parameters_and_scale(quant_norm_kernel, data):
    """weight, bias and a static scale overwritten in place between two calls (the same tensors, new values)."""
    example = data.draw(quant_examples(quant_norm_kernel), "example")
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


# Rows wider than a kernel's one block of 1024 columns (a per-token amax taken over the first block alone): the
# largest |y| of a row lies beyond the first 1024 columns with probability 3/4 or 7/8
WIDE_QUANT_WIDTHS = (4096, 8192)
MANY_TOKENS = (129, 257)


@pytest.mark.claim("ln_quant.scales", "rms_quant.scales", "add_rms_quant.scales")
@profiles.share(0.25)
@given(data=st.data())
def test_the_dynamic_scale_of_rows_wider_than_1024(quant_norm_kernel, data):
    example = quant_examples(quant_norm_kernel, scales=("dynamic",), d=st.sampled_from(WIDE_QUANT_WIDTHS))
    evidence.check(check_scales, quant_norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("ln_quant.values", "rms_quant.values", "add_rms_quant.values")
@profiles.share(0.25)
@given(data=st.data())
def test_q_of_rows_wider_than_1024(quant_norm_kernel, data):
    """q of rows past a kernel's one block of 1024 columns, static and dynamic scales (a wide-row path that reads the
    weight or y of its later blocks wrongly while its scale is right: the scale tests above cannot see it)."""
    example = quant_examples(quant_norm_kernel, d=st.sampled_from(WIDE_QUANT_WIDTHS))
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
