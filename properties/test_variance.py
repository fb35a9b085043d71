"""ln.variance_insensitivity: Var(xhat) = sigma^2 / (sigma^2 + eps) (population variance of the
normalized row), and its sensitivity d Var(xhat) / d sigma^2 = eps / (sigma^2 + eps)^2.

The checks, and the derivation each rests on: :mod:`properties.checks.variance`.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from properties import evidence
from properties.checks.variance import check_normalized_variance, check_variance_sensitivity
from properties.draws.regime_strategies import ENDS_AND_DTYPES, rows_with_variance_near_eps
from properties.draws.strategies import rounded
from properties.run import profiles


@pytest.mark.claim("ln.variance_insensitivity")
@profiles.share(0.5)
@given(data=st.data())
def test_normalized_variance(layernorm_kernel, data):
    example = data.draw(rows_with_variance_near_eps(layernorm_kernel), "example")
    evidence.check(check_normalized_variance, layernorm_kernel, example)


@pytest.mark.claim("ln.variance_insensitivity")
@pytest.mark.parametrize(("end", "dtype"), ENDS_AND_DTYPES, ids=str)
@profiles.share(0.15)
@given(data=st.data())
def test_normalized_variance_across_the_exponent_range(layernorm_kernel, end, dtype, data):
    """sigma^2 near eps at the smallest and largest eps whose rows stay inside the error model (eps = 2^(2e):
    properties.draws.regime_strategies), which ln.forward never draws."""
    example = rows_with_variance_near_eps(layernorm_kernel, end, dtypes=(dtype,))
    evidence.check(check_normalized_variance, layernorm_kernel, data.draw(example, "example"))


@pytest.mark.claim("ln.variance_insensitivity")
@profiles.share(0.5)
@given(data=st.data())
def test_variance_sensitivity(layernorm_kernel, data):
    example = data.draw(rows_with_variance_near_eps(layernorm_kernel), label="example")
    factor = data.draw(st.sampled_from([1.25, 1.5, 2.0]), label="scale")
    example["scaled"] = rounded(example["x"].double() * factor, example["x"].dtype, example["x"].device)
    evidence.check(check_variance_sensitivity, layernorm_kernel, example)
