"""ln.forward / rms.forward: the kernel's output is the float64 oracle's on the same rounded inputs,
within the error-model bound (properties.tolerance), for every width, dtype, weight and eps."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from core.capabilities import dtype_name
from properties import evidence, norms, outcome, profiles, tolerance
from properties.strategies import norm_examples, widths


def check_forward(kernel, x: torch.Tensor, weight, eps: float, bias=None) -> None:
    """|kernel(x) - oracle(x)| <= forward bound, elementwise."""
    got = norms.forward(kernel, x, weight, bias, eps)
    bound = tolerance.forward(kernel, x, weight, bias, eps)
    comparison = outcome.compare(got, norms.reference(kernel, x, weight, bias, eps), bound, "output")
    kappa = float(tolerance.condition_number(x, eps).max())
    outcome.conclude(comparison, "the output is farther from the exact normalization than rounding explains "
                                 f"(row condition number {kappa:.3g})",
                     kappa=kappa, d=x.shape[-1], dtype=dtype_name(x.dtype))


@pytest.mark.claim("ln.forward", "rms.forward")
@profiles.share(1.0)
@given(data=st.data())
def test_forward_matches_the_oracle(norm_kernel, data):
    evidence.check(check_forward, norm_kernel, data.draw(norm_examples(norm_kernel), label="example"))


@pytest.mark.claim("ln.forward", "rms.forward")
@profiles.share(0.5)
@given(data=st.data())
def test_forward_when_ill_conditioned(norm_kernel, data):
    """|mean|/std as large as the error model covers at the drawn width (strategies.valid_offset_ratio)."""
    example = norm_examples(norm_kernel, d=widths(max_width=512), offset_ratio=st.sampled_from([1e4, -1e4]))
    evidence.check(check_forward, norm_kernel, data.draw(example, label="example"))
