"""ln.forward / rms.forward: the kernel's output is the float64 oracle's on the same rounded inputs,
within the error-model bound (properties.tolerance), for every width, dtype, weight and eps.

The checks, and the derivation each rests on: :mod:`properties.checks.forward`.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from properties import evidence, profiles
from properties.checks.forward import check_forward
from properties.strategies import norm_examples, widths


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
