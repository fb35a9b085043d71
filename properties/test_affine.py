"""ln.affine / rms.affine: LN_eps(a x + b 1) = sign(a) LN_{eps/a^2}(x) and RMS_eps(a x) = sign(a) RMS_{eps/a^2}(x)
for a != 0; for a = 0 the row is constant (LN) or zero (RMS) and the output is 0 (no weight, no bias).

The checks, and the derivation each rests on: :mod:`properties.checks.affine`.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.capabilities import discover
from properties import evidence, profiles
from properties.checks.affine import check_affine
from properties.strategies import rounded, row_counts, seeds, standard_values, storage_dtypes, widths


@st.composite
def affine_examples(draw, kernel) -> dict:
    """x with sigma^2 near eps (where eps matters), a in {0, +-1/2, 2, -4, 3}, b (LN only), eps in {1e-2, 1e-5}."""
    dtype = draw(storage_dtypes(kernel))
    eps = draw(st.sampled_from([1e-2, 1e-5]))
    d = draw(widths(max_width=512))
    x = np.sqrt(eps) * draw(st.sampled_from([0.3, 1.0, 3.0])) * standard_values(
        (draw(row_counts(d)), d), "normal", draw(seeds()))
    a = draw(st.sampled_from([0.5, -0.5, 2.0, -4.0, 3.0, 0.0]))
    b = draw(st.sampled_from([0.0, 1.0, -3.5])) * np.sqrt(eps) if kernel.kind == "layernorm" else 0.0
    device = discover(kernel).device
    x = rounded(x, dtype, device)
    return {"x": x, "transformed": rounded(a * x.double() + b, dtype, device), "a": a, "eps": eps}


@pytest.mark.claim("ln.affine", "rms.affine")
@profiles.share(0.5)
@given(data=st.data())
def test_affine_identity(norm_kernel, data):
    evidence.check(check_affine, norm_kernel, data.draw(affine_examples(norm_kernel), label="example"))
