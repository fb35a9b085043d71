"""Fused dropout + add + LayerNorm kernels (kind dropout_add_layernorm, fn(x, residual, weight, bias, eps, p, seed)):
drop_add_ln.forward (y = LN(residual_out)), drop_add_ln.values (each residual_out element is residual or
residual + x/(1-p)), drop_add_ln.variance_bias (seed 003's bias, in the branch's statistics, over 1024 masks).

The checks: :mod:`properties.checks.fused` (the statistical one states its false-alarm probability).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from properties import evidence, profiles
from properties.checks.fused import check_dropout_values, check_dropout_variance_bias, check_forward
from properties.fused_strategies import add_norm_examples
from properties.strategies import seeds


@st.composite
def dropout_add_examples(draw, kernel, d=None) -> dict:
    example = draw(add_norm_examples(kernel, d=d, residual="independent"))
    return {**example, "p": draw(st.sampled_from([0.1, 0.25, 0.5, 0.75])), "seed": draw(seeds())}


@pytest.mark.claim("drop_add_ln.forward")
@profiles.share(0.5)
@given(data=st.data())
def test_y_is_the_norm_of_residual_out(dropout_add_kernel, data):
    evidence.check(check_forward, dropout_add_kernel, data.draw(dropout_add_examples(dropout_add_kernel), "example"))


@pytest.mark.claim("drop_add_ln.values")
@profiles.share(0.5)
@given(data=st.data())
def test_each_element_is_dropped_or_rescaled(dropout_add_kernel, data):
    example = data.draw(dropout_add_examples(dropout_add_kernel), "example")
    evidence.check(check_dropout_values, dropout_add_kernel, example)


@pytest.mark.claim("drop_add_ln.variance_bias")
@profiles.share(0.25)
@given(data=st.data())
def test_variance_bias_of_the_norms_input(dropout_add_kernel, data):
    example = data.draw(dropout_add_examples(dropout_add_kernel, d=st.sampled_from([8, 16, 64])), "example")
    evidence.check(check_dropout_variance_bias, dropout_add_kernel, example)
