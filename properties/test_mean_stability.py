"""ln.mean_stability: with a constant gamma (or none) the row mean of LN(x) is mean(beta), whatever x;
ln.shift_invariance: LN(x + c 1) = LN(x).

The checks, and the derivation each rests on: :mod:`properties.checks.mean_stability`.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from properties import evidence
from properties.checks.mean_stability import check_mean_stability, check_shift_invariance
from properties.draws.regime_strategies import rows_shifted_one_by_one
from properties.draws.strategies import norm_examples
from properties.run import profiles


@st.composite
def constant_weights(draw, kernel):
    """A LayerNorm example whose effective weight is constant (or absent): the condition of the claim."""
    example = draw(norm_examples(kernel))
    gamma = draw(st.sampled_from([None, 1.0, 0.5, -2.0]))
    if gamma is None and kernel.weight_offset == 0:
        example["weight"] = None
    else:
        gamma = 1.0 if gamma is None else gamma
        example["weight"] = torch.full(example["x"].shape[-1:], gamma - kernel.weight_offset,
                                       dtype=example["x"].dtype, device=example["x"].device)
    return example


@pytest.mark.claim("ln.mean_stability")
@profiles.share(0.5)
@given(data=st.data())
def test_output_mean_is_the_mean_of_beta(layernorm_kernel, data):
    evidence.check(check_mean_stability, layernorm_kernel, data.draw(constant_weights(layernorm_kernel), "example"))


@pytest.mark.claim("ln.shift_invariance")
@profiles.share(0.5)
@given(data=st.data())
def test_shift_invariance(layernorm_kernel, data):
    """Each row its own shift, up to the error model's |mean|/std limit (properties.draws.regime_strategies)."""
    evidence.check(check_shift_invariance, layernorm_kernel, data.draw(rows_shifted_one_by_one(layernorm_kernel),
                                                                       label="example"))
