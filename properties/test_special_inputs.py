"""{ln,rms}.special_inputs: inputs at the edges of the derivation's conditions.

The checks, and the derivation each rests on: :mod:`properties.checks.special_inputs`.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from core.boundary import HOST
from properties import evidence, norms
from properties.checks.forward import check_forward
from properties.checks.special_inputs import (
    check_empty_batch,
    check_exact_statistics,
    check_exact_statistics_vjp,
    check_nonfinite_stays_in_its_row,
)
from properties.draws.exact_rows import exact_statistics_rows
from properties.draws.regime_strategies import largest_safe_magnitude
from properties.draws.strategies import norm_examples, rounded, storage_dtypes, with_no_rows
from properties.run import profiles


@st.composite
def constant_rows(draw, kernel) -> dict:
    """Rows that are constant (c in {0, 1, -3.5, 1e3}), each row its own c, with any weights, at widths that are
    powers of two (where sum / d and sum * (1/d) are both exact: the statistics are exact,
    properties.draws.exact_rows)."""
    example = draw(norm_examples(kernel, d=st.sampled_from([1, 2, 4, 8, 64, 1024])))
    values = torch.tensor(draw(st.lists(st.sampled_from([0.0, 1.0, -3.5, 1e3]), min_size=example["x"].shape[0],
                                        max_size=example["x"].shape[0])), dtype=torch.float64,
                          device=HOST)
    example["x"] = rounded(values[:, None].expand_as(example["x"]), example["x"].dtype, example["x"].device)
    example["centred"] = torch.zeros_like(example["x"]) if kernel.record.centred else example["x"]
    return example


@st.composite
def magnitudes(draw, kernel) -> dict:
    """Rows scaled to very large (largest_safe_magnitude) or very small (1e-20 float32, 1e-3 16-bit) values."""
    dtype = draw(storage_dtypes(kernel))
    example = draw(norm_examples(kernel, dtypes=(dtype,), d=st.sampled_from([2, 7, 64, 512]),
                                 offset_ratio=st.sampled_from([0.0, 3.0])))
    d = example["x"].shape[-1]
    tiny = 1e-20 if dtype == torch.float32 else 1e-3
    scale = draw(st.sampled_from([largest_safe_magnitude(d, dtype), tiny]))
    values = example["x"].double()
    example["x"] = rounded(values / values.abs().max().clamp_min(1e-300) * scale, dtype, example["x"].device)
    return example


def _forward_check(kernel, example: dict) -> None:
    evidence.check(check_forward, kernel, example)


@pytest.mark.claim("ln.special_inputs", "rms.special_inputs")
@profiles.share(0.5)
@given(data=st.data())
def test_widths_one_two_three(norm_kernel, data):
    _forward_check(norm_kernel, data.draw(norm_examples(norm_kernel, d=st.sampled_from([1, 2, 3])), "example"))


@pytest.mark.claim("ln.special_inputs", "rms.special_inputs")
@profiles.share(0.5)
@given(data=st.data())
def test_constant_and_zero_rows(norm_kernel, data):
    evidence.check(check_exact_statistics, norm_kernel, data.draw(constant_rows(norm_kernel), "example"))


@pytest.mark.claim("ln.special_inputs", "rms.special_inputs")
@profiles.share(0.75)
@given(data=st.data())
def test_exact_values_at_widths_one_and_two_at_every_magnitude(norm_kernel, data):
    """d = 1 (LayerNorm: beta), d = 2 pairs m +- delta (+-delta / sqrt(delta^2 + eps)), constant rows, with |m| over
    the whole range the dtype allows (properties.draws.exact_rows)."""
    evidence.check(check_exact_statistics, norm_kernel, data.draw(exact_statistics_rows(norm_kernel), "example"))


@pytest.mark.claim("ln.jacobian", "rms.jacobian")
@profiles.share(0.5)
@given(data=st.data())
def test_gradients_at_widths_one_and_two_at_every_magnitude(norm_kernel, data):
    """The gradients (dx, dgamma, dbeta) on the same rows: d = 1 gives dx = 0, dgamma = 0, dbeta = sum of dy."""
    norms.require_backward(norm_kernel)
    example = data.draw(exact_statistics_rows(norm_kernel, upstream=True), "example")
    evidence.check(check_exact_statistics_vjp, norm_kernel, example)


@pytest.mark.claim("ln.special_inputs", "rms.special_inputs")
@profiles.share(0.5)
@given(data=st.data())
def test_tiny_eps_with_float16(norm_kernel, data):
    example = norm_examples(norm_kernel, dtypes=(torch.float16,), eps=st.just(1e-12))
    _forward_check(norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("ln.special_inputs", "rms.special_inputs")
@profiles.share(0.5)
@given(data=st.data())
def test_large_mean_over_std_in_float32(norm_kernel, data):
    example = norm_examples(norm_kernel, dtypes=(torch.float32,), d=st.sampled_from([2, 3, 16, 64, 127]),
                            offset_ratio=st.sampled_from([1e3, -1e3, 1e4, -1e4]))
    _forward_check(norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("ln.special_inputs", "rms.special_inputs")
@profiles.share(0.5)
@given(data=st.data())
def test_huge_and_tiny_magnitudes(norm_kernel, data):
    _forward_check(norm_kernel, data.draw(magnitudes(norm_kernel), "example"))


@pytest.mark.claim("ln.special_inputs", "rms.special_inputs")
@profiles.share(0.5)
@given(data=st.data())
def test_nonfinite_values_stay_in_their_row(norm_kernel, data):
    example = data.draw(norm_examples(norm_kernel), "example")
    x = example["x"]
    if x.shape[0] < 2:
        x = torch.cat([x, -x])
    poisoned = x.clone()
    column = data.draw(st.integers(0, x.shape[-1] - 1), "column")
    poisoned[0, column] = data.draw(st.sampled_from([math.nan, math.inf, -math.inf]), "value")
    evidence.check(check_nonfinite_stays_in_its_row, norm_kernel, {**example, "x": x, "poisoned": poisoned})


@pytest.mark.claim("ln.special_inputs", "rms.special_inputs")
@profiles.share(0.1)
@given(data=st.data())
def test_an_empty_batch(norm_kernel, data):
    """x [0, d] or [2, 0, d] (and dy), weight and bias present: a mixture-of-experts layer routing no token to an
    expert calls its norm so."""
    example = norm_examples(norm_kernel, d=st.sampled_from([1, 7, 64, 1000]), upstream=True, every_input=True)
    example = data.draw(example, "example")
    evidence.check(check_empty_batch, norm_kernel, data.draw(with_no_rows(example), "no rows"))
