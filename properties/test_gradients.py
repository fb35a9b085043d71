"""ln.jacobian / rms.jacobian: the kernel's VJPs for x, gamma (and beta) against the derived Jacobian;
ln.gradient_identities / rms.gradient_identities: the identities every correct backward satisfies.

The checks, and the derivation each rests on: :mod:`properties.checks.gradients`.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from properties import evidence, norms, profiles
from properties.checks.gradients import check_gradient_identities, check_vjp
from properties.strategies import norm_examples


@pytest.mark.claim("ln.jacobian", "rms.jacobian")
@profiles.share(0.75)
@given(data=st.data())
def test_vjp_matches_the_derived_jacobian(norm_kernel, data):
    norms.require_backward(norm_kernel)
    example = data.draw(norm_examples(norm_kernel, upstream=True), label="example")
    evidence.check(check_vjp, norm_kernel, example)


@pytest.mark.claim("ln.jacobian", "rms.jacobian")
@profiles.share(0.25)
@given(data=st.data())
def test_parameter_gradients_over_many_rows(norm_kernel, data):
    """dgamma and dbeta sum over every row: 64 to 512 rows (a batch times a sequence) of a small width."""
    norms.require_backward(norm_kernel)
    example = norm_examples(norm_kernel, d=st.sampled_from([8, 17, 32]), upstream=True, every_input=True,
                            n=st.sampled_from([256, 64, 512]))
    evidence.check(check_vjp, norm_kernel, data.draw(example, label="example"))


@pytest.mark.claim("ln.gradient_identities", "rms.gradient_identities")
@profiles.share(0.5)
@given(data=st.data())
def test_gradient_identities(norm_kernel, data):
    norms.require_backward(norm_kernel)
    example = data.draw(norm_examples(norm_kernel, upstream=True), label="example")
    evidence.check(check_gradient_identities, norm_kernel, example)
