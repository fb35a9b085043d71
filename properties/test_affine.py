"""ln.affine / rms.affine: LN_eps(a x + b 1) = sign(a) LN_{eps/a^2}(x) and RMS_eps(a x) = sign(a) RMS_{eps/a^2}(x)
for a != 0; for a = 0 the row is constant (LN) or zero (RMS) and the output is 0 (no weight, no bias).

The checks, and the derivation each rests on: :mod:`properties.checks.affine`.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from properties import evidence
from properties.checks.affine import check_affine
from properties.draws.regime_strategies import ENDS_AND_DTYPES, affine_examples
from properties.run import profiles


@pytest.mark.claim("ln.affine", "rms.affine")
@profiles.share(0.5)
@given(data=st.data())
def test_affine_identity(norm_kernel, data):
    evidence.check(check_affine, norm_kernel, data.draw(affine_examples(norm_kernel), label="example"))


@pytest.mark.claim("ln.affine", "rms.affine")
@pytest.mark.parametrize(("end", "dtype"), ENDS_AND_DTYPES, ids=str)
@profiles.share(0.15)
@given(data=st.data())
def test_affine_identity_across_the_exponent_range(norm_kernel, end, dtype, data):
    """a = +-2^k with x at the smallest or largest scale the error model covers, eps/a^2 far from forward's eps:
    the regime of this claim that ln/rms.forward never draws (properties.draws.regime_strategies)."""
    example = affine_examples(norm_kernel, end, dtypes=(dtype,))
    evidence.check(check_affine, norm_kernel, data.draw(example, label="example"))
