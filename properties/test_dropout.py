"""Inverted dropout: dropout.values, dropout.keep_rate, dropout.variance_bias, dropout.determinism,
dropout.inputs_unmodified.

The checks, and the derivation each rests on: :mod:`properties.checks.dropout`.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from properties import evidence, profiles
from properties.checks.dropout import (
    check_determinism,
    check_inputs_unmodified,
    check_keep_rate,
    check_values,
    check_variance_bias,
)
from properties.strategies import dropout_examples


@pytest.mark.claim("dropout.values")
@profiles.share(0.5)
@given(data=st.data())
def test_values_are_zero_or_rescaled(dropout_kernel, data):
    evidence.check(check_values, dropout_kernel, data.draw(dropout_examples(dropout_kernel, n=4), "example"))


@pytest.mark.claim("dropout.keep_rate")
@profiles.share(0.5)
@given(data=st.data())
def test_keep_rate(dropout_kernel, data):
    example = data.draw(dropout_examples(dropout_kernel, n=16, d=st.sampled_from([256, 1024, 4096])), "example")
    evidence.check(check_keep_rate, dropout_kernel, example)


@pytest.mark.claim("dropout.variance_bias")
@profiles.share(0.25)
@given(data=st.data())
def test_variance_bias(dropout_kernel, data):
    example = data.draw(dropout_examples(dropout_kernel, d=st.sampled_from([8, 16, 64])), "example")
    evidence.check(check_variance_bias, dropout_kernel, example)


@pytest.mark.claim("dropout.determinism")
@profiles.share(0.25)
@given(data=st.data())
def test_same_seed_same_output(dropout_kernel, data):
    evidence.check(check_determinism, dropout_kernel, data.draw(dropout_examples(dropout_kernel, n=4), "example"))


@pytest.mark.claim("dropout.inputs_unmodified")
@profiles.share(0.25)
@given(data=st.data())
def test_input_unmodified(dropout_kernel, data):
    evidence.check(check_inputs_unmodified, dropout_kernel, data.draw(dropout_examples(dropout_kernel), "example"))
