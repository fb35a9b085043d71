"""The fused, GroupNorm and Pre-/Post-LN derivations: their checks reject altered statements, and the float64
oracles of the new kinds (proofs.fused_oracles) agree with torch's float64 autograd.

(Every step of every claim re-verifies in tests/test_proofs_derivations.py, which runs over all of CLAIMS.)
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import sympy as sp
import torch
import torch.nn.functional as F

from proofs import expressions, fused_oracles
from proofs.algebra import concrete_row, d, dy, eps, i, j, mu, p, row_sum, var
from proofs.claims import CLAIMS, blocks, fused, groupnorm, symbolic_checks
from proofs.derivation import Equal


def _step(claim_id: str, why_contains: str):
    return next(step for step in CLAIMS[claim_id].derive().steps if why_contains in step.why)


@pytest.mark.parametrize("kind", ["ln", "rms"])
def test_a_vjp_without_the_residual_gradient_is_rejected(kind):
    step = _step(f"add_{kind}.jacobian", "both upstream gradients")
    assert step.verify()
    dropped = Equal(row_sum(dy[i] * expressions.jacobian(kind), i), step.rhs, "g^h dropped", step.aggregates)
    assert not dropped.verify()


def test_the_dropout_bias_in_the_norm_inputs_statistics_is_rejected():
    step = _step("drop_add_ln.variance_bias", "the residual drops out")
    assert step.verify()
    z = sp.IndexedBase("z", real=True)
    k = sp.Symbol("k", integer=True, positive=True)
    sum_mean_square = row_sum((z[k] + sp.IndexedBase("x", real=True)[k]) ** 2, k) / d
    wrong = p * (d - 1) / (d * (1 - p)) * sum_mean_square  # the seed's formula applied to h = z + x
    assert not dataclasses.replace(step, rhs=wrong).verify()


def test_a_dropout_gradient_without_the_mask_or_the_scale_is_rejected():
    step = _step("drop_add_ln.gradient", "chain rule")
    assert step.verify()
    t, m = fused.through, sp.IndexedBase("m", real=True)
    assert not dataclasses.replace(step, rhs=t[j] / (1 - p)).verify()  # every element rescaled: no mask
    assert not dataclasses.replace(step, rhs=t[j] * m[j]).verify()  # the mask without 1/(1-p)


def test_the_mask_is_not_recoverable_when_the_residual_outgrows_the_branch():
    """The condition |residual| <= |x| of drop_add_ln.keep_rate's derivation is needed: a large residual swallows a
    kept element (fl(r + s) = r), so residual_out != residual would miss it."""
    assert fused._storage_sums_move([1.0, 3.0], [1.0, -0.5], 0.1, "float16")
    assert not fused._storage_sums_move([1.0, 3.0], [4096.0, 2000.0], 0.1, "float16")


def test_groupnorm_groups_are_dense_inside_and_zero_across():
    elements, one_group = groupnorm.written_out(2, 1, 2)
    _, two_groups = groupnorm.written_out(2, 2, 2)
    assert sp.diff(one_group[0], elements[3]) != 0  # G = 1: channel 2 reaches channel 1
    assert sp.diff(two_groups[0], elements[3]) == 0  # G = C: it does not
    assert sp.diff(two_groups[0], elements[1]) != 0


def test_the_blockwise_jacobian_check_rejects_the_wrong_channel_weight():
    """A group's block with gamma of the element's position in the group (not its channel) does not match."""
    elements, outputs = groupnorm.written_out(4, 2, 1)
    stats, radicand = groupnorm.group_statistics(elements, 1, 2)
    derived = expressions.jacobian("ln").subs({i: 1, j: 1, d: 2}).subs(stats)
    local = {sp.IndexedBase("x", real=True)[1]: elements[2]}
    right = derived.xreplace(local).xreplace({expressions.gamma[1]: expressions.gamma[3]})
    wrong = derived.xreplace(local)  # gamma_1: channel 1's weight, but element 3 is in channel 3
    assert symbolic_checks.zero_with_root(sp.diff(outputs[2], elements[2]) - right, radicand)
    assert not symbolic_checks.zero_with_root(sp.diff(outputs[2], elements[2]) - wrong, radicand)


def test_post_ln_in_the_wrong_order_is_rejected():
    """J_post = J_LN(h) (I + W): (I + W) J_LN(h) does not match the written-out block."""
    outputs, radicand = blocks.unit_layernorm(blocks.WIDTH)
    row = concrete_row(blocks.WIDTH)
    h = (sp.eye(blocks.WIDTH) + blocks.SUBLAYER) * sp.Matrix(row)
    at_h = dict(zip(row, h, strict=True))
    swapped = (sp.eye(blocks.WIDTH) + blocks.SUBLAYER) * blocks.derived_jacobian(list(h), blocks.WIDTH)
    assert not symbolic_checks.zero_with_root(sp.diff(outputs[0].xreplace(at_h), row[0]) - swapped[0, 0],
                                     radicand.xreplace(at_h))


def test_the_contraction_condition_is_an_equivalence_at_one():
    step = _step("ln.contraction", "a contraction")
    assert step.verify()
    c = sp.Symbol("c", positive=True)
    assert not dataclasses.replace(step, lhs=sp.sqrt(1 + c), certificate=c).verify()  # variance < 1 expands
    assert expressions.eigenvalues("ln")["perp"].subs({var: sp.Rational(1, 2), eps: sp.Rational(1, 2)}) == 1


def _float64(*shape):
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(sum(shape)))


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_add_norm_oracles_match_torch_autograd(kind):
    x, residual, weight, bias = _float64(3, 7), _float64(3, 7) * 3, _float64(7), _float64(7)
    leaves = [t.clone().requires_grad_(True) for t in (x, residual, weight, bias)]
    h = leaves[0] + leaves[1]
    if kind == "layernorm":
        y = F.layer_norm(h, (7,), leaves[2], leaves[3], 1e-5)
    else:
        y = F.rms_norm(h, (7,), leaves[2], 1e-5)
    dy, dh = _float64(3, 7), _float64(7, 3).t()
    expected_y, expected_h = fused_oracles.add_norm(x, residual, weight, bias if kind == "layernorm" else None,
                                                    1e-5, kind)
    np.testing.assert_allclose(y.detach().numpy(), expected_y, rtol=0, atol=1e-13)
    np.testing.assert_array_equal(h.detach().numpy(), expected_h)
    wanted = leaves if kind == "layernorm" else leaves[:3]
    grads = torch.autograd.grad((y, h), wanted, (dy, dh))
    through, *parameters = fused_oracles.add_norm_vjp(expected_h, weight, 1e-5, dy, dh, kind)
    for got, expected in zip(grads, (through, through, *parameters), strict=True):
        np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("groups", [1, 2, 3, 6])
def test_groupnorm_oracles_match_torch_autograd(groups):
    x, weight, bias, dy = _float64(2, 6, 3, 4), _float64(6), _float64(6), _float64(2, 6, 4, 3).transpose(2, 3)
    leaves = [t.clone().requires_grad_(True) for t in (x, weight, bias)]
    y = F.group_norm(leaves[0], groups, leaves[1], leaves[2], 1e-5)
    np.testing.assert_allclose(y.detach().numpy(), fused_oracles.groupnorm(x, groups, weight, bias, 1e-5),
                               rtol=0, atol=1e-13)
    grads = torch.autograd.grad(y, leaves, dy)
    for got, expected in zip(grads, fused_oracles.groupnorm_vjp(x, groups, weight, 1e-5, dy), strict=True):
        np.testing.assert_allclose(got.numpy(), expected, rtol=0, atol=1e-12)


def test_groupnorm_degenerate_groups_give_beta_and_eps_zero_is_nan():
    x, bias = _float64(2, 5, 1), _float64(5)
    np.testing.assert_array_equal(fused_oracles.groupnorm(x, 5, None, bias, 1e-5), np.broadcast_to(bias[:, None],
                                                                                                   (2, 5, 1)))
    assert np.isnan(fused_oracles.groupnorm(x, 5, None, bias, 0.0)).all()
    with pytest.raises(ValueError, match="does not divide"):
        fused_oracles.groupnorm(x, 2, None, None, 1e-5)


def test_dropout_add_bias_is_the_derived_expression_of_the_branch():
    assert float(fused_oracles.dropout_add_variance_bias(0.5, 2, 1.0, 2.0)) == pytest.approx(2.5)
    assert sp.simplify(expressions.dropout_variance_bias() - p * (d - 1) * (var + mu**2) / (d * (1 - p))) == 0
