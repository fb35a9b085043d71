"""ln.variance_insensitivity: Var(xhat) = sigma^2 / (sigma^2 + eps) (population variance of the
normalized row), and its sensitivity d Var(xhat) / d sigma^2 = eps / (sigma^2 + eps)^2.

The checks, and the derivation each rests on: :mod:`properties.checks.variance`.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from core.capabilities import discover
from properties import evidence, profiles
from properties.checks.variance import check_normalized_variance, check_variance_sensitivity
from properties.strategies import rounded, row_counts, seeds, standard_values, storage_dtypes


@st.composite
def rows_near_eps(draw, kernel) -> dict:
    """Rows of width 8..256 with sigma^2 = t eps, t in [0.1, 10], eps in {1e-2, 1e-5, 1e-6}, rounded."""
    dtype = draw(storage_dtypes(kernel))
    eps = draw(st.sampled_from([1e-2, 1e-5, 1e-6] if dtype == torch.float32 else [1e-2]))
    d = draw(st.sampled_from([8, 31, 64, 256]))
    z = standard_values((draw(row_counts(d)), d), "normal", draw(seeds()))
    z = (z - z.mean(-1, keepdim=True)) / z.std(-1, correction=0, keepdim=True)
    t = draw(st.sampled_from([0.1, 0.5, 1.0, 3.0, 10.0]))
    x = np.sqrt(t * eps) * z + draw(st.sampled_from([0.0, 1.0])) * np.sqrt(eps)
    return {"x": rounded(x, dtype, discover(kernel).device), "eps": eps}


@pytest.mark.claim("ln.variance_insensitivity")
@profiles.share(0.5)
@given(data=st.data())
def test_normalized_variance(layernorm_kernel, data):
    evidence.check(check_normalized_variance, layernorm_kernel, data.draw(rows_near_eps(layernorm_kernel), "example"))


@pytest.mark.claim("ln.variance_insensitivity")
@profiles.share(0.5)
@given(data=st.data())
def test_variance_sensitivity(layernorm_kernel, data):
    example = data.draw(rows_near_eps(layernorm_kernel), label="example")
    factor = data.draw(st.sampled_from([1.25, 1.5, 2.0]), label="scale")
    example["scaled"] = rounded(example["x"].double() * factor, example["x"].dtype, example["x"].device)
    evidence.check(check_variance_sensitivity, layernorm_kernel, example)
