"""ln.seed_example: seed 000's worked example, x = (5, 5, 0, 0, 0, 0, 0, 0), gamma = 1, beta = 0, eps = 0,
normalizes to (sqrt 3, sqrt 3, -sqrt 3 / 3, ... ): the kernel's output on it (and on its scaled, shifted
and permuted versions, which have the same normalization) is the oracle's within the forward bound."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from core.boundary import HOST
from core.capabilities import discover
from properties import evidence
from properties.checks.forward import check_forward
from properties.draws.strategies import rounded, storage_dtypes

SEED_ROW = (5.0, 5.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


@st.composite
def seed_rows(draw, kernel) -> dict:
    """The seed row, possibly permuted, scaled by a power of two and shifted by an integer (all exact)."""
    row = torch.tensor(draw(st.permutations(SEED_ROW)), dtype=torch.float64, device=HOST)
    row = row * draw(st.sampled_from([1.0, 0.25, 8.0])) + draw(st.sampled_from([0.0, 3.0, -10.0]))
    x = rounded(row[None, :], draw(storage_dtypes(kernel)), discover(kernel).device)
    return {"x": x, "weight": None, "bias": None, "eps": 0.0}


@pytest.mark.claim("ln.seed_example")
@given(data=st.data())
def test_seed_worked_example(layernorm_kernel, data):
    evidence.check(check_forward, layernorm_kernel, data.draw(seed_rows(layernorm_kernel), "example"))
