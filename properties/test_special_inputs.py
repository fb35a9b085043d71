"""{ln,rms}.special_inputs: inputs at the edges of the derivation's conditions.

d = 1, 2, 3; constant rows (LayerNorm: output beta, finite; RMSNorm: gamma c / sqrt(c^2 + eps)); zero
rows; eps = 1e-12 with float16 data; |mean|/std up to 1e4 with float32 data; very large and very small
magnitudes; NaN/inf in one row. The numerical ones are the forward claim's check (kernel vs oracle on
the rounded inputs, within the error-model bound) on these inputs; NaN/inf is a contract: the other
rows' outputs are exactly those of the same call without the non-finite value.

"Very large" is bounded by the condition of the error model that the sum of squares of a row is
representable in the accumulation dtype: |x| <= sqrt(max / d) / 4.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from core.capabilities import dtype_name
from properties import evidence, norms, outcome, profiles, tolerance
from properties.strategies import norm_examples, rounded, storage_dtypes
from properties.test_contracts import rows_that_differ
from properties.test_forward import check_forward


def check_nonfinite_stays_in_its_row(kernel, x: torch.Tensor, poisoned: torch.Tensor, weight, eps: float,
                                     bias=None) -> None:
    """``poisoned`` is x with a NaN/inf in row 0: rows 1.. of the output are exactly those of kernel(x)."""
    clean = norms.forward(kernel, x, weight, bias, eps, allow_nonfinite=True)
    dirty = norms.forward(kernel, poisoned, weight, bias, eps, allow_nonfinite=True)
    moved = rows_that_differ(clean[1:], dirty[1:]) + 1
    outcome.exact(moved.numel() == 0, f"a non-finite value in row 0 changed output rows {moved.tolist()[:8]}",
                  "NaN/inf must stay within their row", d=x.shape[-1], dtype=dtype_name(x.dtype))


def largest_safe_magnitude(d: int, dtype: torch.dtype) -> float:
    """A power of ten <= sqrt(max / d) / 4, max the largest finite value of the accumulation and storage dtypes."""
    largest = min(torch.finfo(tolerance.accumulation_dtype(dtype)).max, torch.finfo(dtype).max**2)
    return 10.0 ** math.floor(math.log10(math.sqrt(largest / d) / 4))


@st.composite
def constant_rows(draw, kernel) -> dict:
    """Rows that are constant (c in {0, 1, -3.5, 1e3}), each row its own c, with any weights."""
    example = draw(norm_examples(kernel, d=st.sampled_from([1, 2, 3, 8, 64, 1000])))
    values = torch.tensor(draw(st.lists(st.sampled_from([0.0, 1.0, -3.5, 1e3]), min_size=example["x"].shape[0],
                                        max_size=example["x"].shape[0])), dtype=torch.float64)
    example["x"] = rounded(values[:, None].expand_as(example["x"]), example["x"].dtype, example["x"].device)
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
    _forward_check(norm_kernel, data.draw(constant_rows(norm_kernel), "example"))


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
