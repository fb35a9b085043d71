"""ln.second_order / rms.second_order: the gradient of the kernel's gradient is the second derivative of the norm
(for a kernel whose backward autograd can differentiate: core.capabilities' ``double_backward``; the others skip with
the probe's reason).

The check, and the derivation it rests on: :mod:`properties.checks.second_order`, :mod:`proofs.second_order`.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from properties import evidence, norms
from properties.checks.second_order import check_fused_second_order, check_second_order
from properties.draws.second_order_strategies import (
    float64_second_order_examples,
    fused_second_order_examples,
    second_order_examples,
)
from properties.run import profiles


@pytest.mark.claim("ln.second_order", "rms.second_order")
@profiles.share(0.25)
@given(data=st.data())
def test_gradient_of_the_gradient_is_the_second_derivative(norm_kernel, data):
    """Widths 1 to 300, 1 to 4 rows, with and without weight and bias, float32 (16-bit is not drawn:
    second_order_strategies.SIXTEEN_BIT_UNDRAWN): dS/d dy, dS/dx, dS/dweight of S = <u, dx> + <a, dweight> +
    <c, dbias>."""
    norms.require_double_backward(norm_kernel)
    example = data.draw(second_order_examples(norm_kernel), label="example")
    evidence.check(check_second_order, norm_kernel, example)


@pytest.mark.claim("ln.second_order", "rms.second_order")
@profiles.share(0.1)
@given(data=st.data())
def test_gradient_of_the_gradient_in_float64(norm_kernel, data):
    """float64 x, parameters and upstream gradients (torch.autograd.gradgradcheck's setting); a kernel refusing
    float64 with an error skips, saying so."""
    norms.require_double_backward(norm_kernel)
    example = data.draw(float64_second_order_examples(norm_kernel), label="example")
    norms.require_float64(norm_kernel, example)
    evidence.check(check_second_order, norm_kernel, example)


@pytest.mark.claim("add_ln.second_order", "add_rms.second_order")
@profiles.share(0.25)
@given(data=st.data())
def test_gradient_of_the_fused_gradient_is_the_second_derivative(add_norm_kernel, data):
    """The fused add + norm, float32: S through dx or through dresidual (and dweight, dbias): the norm's second
    derivatives at residual_out, dS/d dh the upstream u (a double backward holding the statistics constant, or one
    path's dh dropped, fails)."""
    norms.require_double_backward(add_norm_kernel)
    example = data.draw(fused_second_order_examples(add_norm_kernel), label="example")
    evidence.check(check_fused_second_order, add_norm_kernel, example)
