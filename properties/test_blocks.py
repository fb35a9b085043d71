"""LayerNorm kernels in the regimes of the block claims: ln.contraction (||J|| < 1 iff sigma^2 + eps > 1) and
blocks.jacobians (a Post-LN block with W = aI has the LN Jacobian with eps/(1+a)^2).

The checks: :mod:`properties.checks.blocks`.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from properties import evidence, norms
from properties.bounds import tolerance
from properties.checks.blocks import check_contraction, check_post_ln_scaled_block
from properties.draws.strategies import norm_examples, rounded
from properties.run import profiles

WIDTHS = (3, 4, 7, 16, 31)


def _unit_variance_rows(kernel, data, scale: float) -> dict:
    """One row of the drawn width rescaled to variance scale^2 (sigma^2 + eps on either side of 1)."""
    example = data.draw(norm_examples(kernel, d=st.sampled_from(WIDTHS), weights=False), "example")
    row = example["x"][:1].double()
    centred = row - row.mean()
    assume(float(centred.square().mean()) > 0)
    row = row.mean() + centred * (scale / centred.square().mean().sqrt())
    x = rounded(row, example["x"].dtype, example["x"].device)
    assume(norms.representable(norms.reference_jacobian(kernel, x, None, example["eps"]), x.dtype))
    assume(tolerance.backward_covered(kernel, x, example["eps"]))  # no bound, no evidence: draw inside the model
    return {"x": x, "eps": example["eps"]}


@pytest.mark.claim("ln.contraction")
@profiles.share(0.5)
@given(data=st.data())
def test_contraction_exactly_when_the_variance_exceeds_one(layernorm_kernel, data):
    norms.require_backward(layernorm_kernel)
    scale = data.draw(st.sampled_from([0.25, 0.5, 0.9, 1.1, 2.0, 4.0]), "standard deviation")
    evidence.check(check_contraction, layernorm_kernel, _unit_variance_rows(layernorm_kernel, data, scale))


@pytest.mark.claim("blocks.jacobians")
@profiles.share(0.5)
@given(data=st.data())
def test_post_ln_block_with_a_scalar_sublayer(layernorm_kernel, data):
    norms.require_backward(layernorm_kernel)
    example = _unit_variance_rows(layernorm_kernel, data, data.draw(st.sampled_from([0.5, 1.0, 2.0]), "std"))
    a = data.draw(st.sampled_from([1.0, 3.0, -0.5]), "a")  # 1 + a a power of two: (1 + a) x is exact
    assume(bool(torch.isfinite(example["x"] * (1 + a)).all()))  # unless it overflows (float16 rows near 65504 / 4)
    evidence.check(check_post_ln_scaled_block, layernorm_kernel, {**example, "a": a})
