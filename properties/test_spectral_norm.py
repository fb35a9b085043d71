"""ln.spectral_norm / rms.spectral_norm: ||dy/dx||_2 of the kernel, measured from its backward, against the
derived value and the bound max|gamma| / sqrt(eps).

The checks, and the derivation each rests on: :mod:`properties.checks.spectral_norm`.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from core.capabilities import discover
from properties import evidence, norms
from properties.bounds import tolerance
from properties.checks.spectral_norm import check_matrix_free_spectral_norm, check_spectral_norm
from properties.draws.strategies import norm_examples
from properties.run import profiles

SMALL_WIDTHS = (2, 3, 4, 5, 7, 8, 16, 31, 32)
MATRIX_FREE_WIDTHS = (4096, 65536)
WEIGHTED_MATRIX_FREE_UP_TO = 4096  # per-feature gamma: the exact value by Lanczos (~0.2 s at 4096, seconds at 65536)


@pytest.mark.claim("ln.spectral_norm", "rms.spectral_norm")
@profiles.share(0.5)
@given(data=st.data())
def test_spectral_norm_by_svd(norm_kernel, data):
    norms.require_backward(norm_kernel)
    example = data.draw(norm_examples(norm_kernel, d=st.sampled_from(SMALL_WIDTHS)), label="example")
    x = example["x"]
    # the Jacobian is measured in the storage dtype: it must be representable there (norms.representable)
    assume(norms.representable(norms.reference_jacobian(norm_kernel, x[:1], example["weight"], example["eps"]),
                               x.dtype))
    # ... and inside the backward bound's domain (strategies.backward_width_limit): never an unchecked example
    assume(tolerance.backward_covered(norm_kernel, x, example["eps"]))
    evidence.check(check_spectral_norm, norm_kernel, example)


@pytest.mark.claim("ln.spectral_norm", "rms.spectral_norm")
@pytest.mark.parametrize("d", MATRIX_FREE_WIDTHS)
@profiles.share(0.05)
@given(data=st.data())
def test_spectral_norm_matrix_free(norm_kernel, d, data):
    """d = 4096 with a per-feature gamma always present (its exact norm can be far below max|gamma|/sqrt(eps)),
    d = 65536 with gamma = 1."""
    caps = discover(norm_kernel)
    if not caps.double_backward:
        pytest.skip(f"matrix-free spectral norm needs JVPs by double VJP: {caps.double_backward_reason}")
    weighted = d <= WEIGHTED_MATRIX_FREE_UP_TO
    example = data.draw(norm_examples(norm_kernel, d=d, dtypes=(torch.float32,), upstream=True, weights=weighted,
                                      every_input=weighted), label="example")
    example = {"x": example["x"][:1], "eps": example["eps"], "start": example["dy"][:1], "weight": example["weight"]}
    evidence.check(check_matrix_free_spectral_norm, norm_kernel, example)
