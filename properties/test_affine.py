"""ln.affine / rms.affine: LN_eps(a x + b 1) = sign(a) LN_{eps/a^2}(x) and RMS_eps(a x) = sign(a) RMS_{eps/a^2}(x)
for a != 0; for a = 0 the row is constant (LN) or zero (RMS) and the output is 0 (no weight, no bias).

The kernel is called on both sides (so an eps argument it ignores, or eps outside the root, shows).
a x + b is rounded to the storage dtype, so the kernel's difference of the two sides is compared with the
oracle's difference on the same rounded inputs, within the sum of both forward bounds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from core.capabilities import discover, dtype_name
from properties import evidence, norms, outcome, profiles, tolerance
from properties.strategies import rounded, row_counts, seeds, standard_values, storage_dtypes, widths


def check_affine(kernel, x: torch.Tensor, transformed: torch.Tensor, a: float, eps: float) -> None:
    """kernel(transformed, eps) - sign(a) kernel(x, eps/a^2) matches the oracle's difference (a = 0: kernel = 0)."""
    left = norms.as_float64(norms.forward(kernel, transformed, None, None, eps))
    expected = norms.reference(kernel, transformed, None, None, eps)
    bound = tolerance.forward(kernel, transformed, None, None, eps)
    if a != 0:
        right_eps = eps / a**2
        right = math.copysign(1.0, a) * norms.as_float64(norms.forward(kernel, x, None, None, right_eps))
        left = left - right
        expected = expected - math.copysign(1.0, a) * norms.reference(kernel, x, None, None, right_eps)
        bound = bound + tolerance.forward(kernel, x, None, None, right_eps)
    outcome.conclude(outcome.compare(left, expected, bound, f"N_eps(a x + b) - sign(a) N_(eps/a^2)(x), a = {a:g}"),
                     "scaling the input is not the same as rescaling eps: eps is used differently",
                     d=x.shape[-1], dtype=dtype_name(x.dtype), eps=eps)


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
