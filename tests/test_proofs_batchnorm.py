"""BatchNorm, channel-wise LayerNorm and InstanceNorm (issue 28): the derivations reject altered steps, and the float64
oracles of proofs.batchnorm_oracles agree with torch's F.batch_norm / F.instance_norm / F.layer_norm on the CPU in
float64 (forward, running statistics in both momentum conventions and momentum None, eval, VJP by autograd), with
finite differences for the cross-sample coupling, and with what torch 2.13 does at n = 1.

(Every step of every claim re-verifies in tests/test_proofs_derivations.py, which runs over all of CLAIMS.)
Float64 against float64: both sides compute the same function with rounding errors of order n u |y| (u = 2^-53,
n <= 60 elements per statistic here, |y| <= 10), so 1e-12 is a hundredfold margin over any correct pair and far
below every difference a wrong formula makes (the biased running variance differs by m sigma^2/(n-1) >= 1e-3).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import sympy as sp
import torch
import torch.nn.functional as F

from proofs import batchnorm_oracles as oracle
from proofs import render
from proofs.algebra import d, eps, i, j, mu, var, x
from proofs.claims import CLAIMS, batchnorm
from proofs.claims.base import THEORY

TOL = {"rtol": 1e-12, "atol": 1e-12}
EPS = 1e-5
IDS = [claim.id for claim in batchnorm.CLAIMS]


def _step(claim_id: str, why_contains: str):
    return next(step for step in CLAIMS[claim_id].derive().steps if why_contains in step.why)


def _batch(*shape: int, seed: int = 0, channels_last: bool = False) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    values = torch.randn(*shape, dtype=torch.float64, generator=generator) * 2 + 0.5
    if channels_last:
        return values.to(memory_format=torch.channels_last if values.dim() == 4 else torch.channels_last_3d)
    return values


def _channel_parameters(channels: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(channels, dtype=torch.float64, generator=generator),
            torch.randn(channels, dtype=torch.float64, generator=generator))


# --- the claims -----------------------------------------------------------------------------------------------------
# the claims no conformance test checks yet: the spectral norm of the batch Jacobian
THEORY_ONLY = {"bn.spectral_norm"}


def test_the_claims_are_registered_in_the_architecture_table_and_theory_only_where_no_property_checks_them():
    from tests.test_proofs_derivations import architecture_claim_ids

    assert IDS and set(IDS) <= set(CLAIMS) and set(IDS) <= architecture_claim_ids()
    assert {claim_id for claim_id in IDS if CLAIMS[claim_id].evidence == THEORY} == THEORY_ONLY
    assert "theory only" in render.claim_latex("bn.spectral_norm")  # the PDF says no property checks it yet
    assert "theory only" not in render.claim_latex("bn.coupling")


def test_the_checker_rejects_a_wrong_coupling_entry():
    step = _step("bn.coupling", "two different elements")
    assert step.verify()
    s = sp.sqrt(var + eps)
    xhat_i, xhat_j = (x[i] - mu) / s, (x[j] - mu) / s
    assert not dataclasses.replace(step, rhs=-batchnorm.gc / (d * s) * (1 - xhat_i * xhat_j)).verify()
    assert not dataclasses.replace(step, rhs=-batchnorm.gc / (d * s)).verify()  # the variance path dropped


def test_the_checker_rejects_a_wrong_running_update():
    inverted = _step("bn.running_statistics", "the inverted convention")
    keras = sp.Symbol("m'", positive=True)
    assert inverted.verify()
    flipped = (2 * keras - 1) * (batchnorm.running_mean - batchnorm.statistic)
    assert not dataclasses.replace(inverted, rhs=flipped).verify()
    biased = _step("bn.running_statistics", "fed the biased")
    assert not dataclasses.replace(biased, rhs=-batchnorm.momentum * var / d).verify()
    dropped = _step("bn.jacobian", "the terms it drops")
    assert not dataclasses.replace(dropped, rhs=0).verify()
    eval_factor = _step("bn.eval", "eval still differs")
    assert not dataclasses.replace(eval_factor, rhs=eval_factor.rhs.subs(d, d + 1)).verify()
    assert not dataclasses.replace(_step("bn.eval", "its Jacobian is diagonal"), rhs=0).verify()


def _unbiased_statistics(shape, scope, element):
    mean, variance = SEED_STATISTICS(shape, scope, element)
    count = len(batchnorm.group_of(shape, scope, element))
    return mean, variance * count / (count - 1)


def _per_sample_statistics(shape, scope, element):
    return SEED_STATISTICS(shape, "instance" if scope == "batch" else scope, element)


SEED_STATISTICS = batchnorm.seed_statistics


@pytest.mark.parametrize(("wrong", "check"), [(_unbiased_statistics, "reduces_to_layernorm"),
                                              (_per_sample_statistics, "jacobian_is_blockwise_layernorm")])
def test_the_written_out_checks_reject_a_wrong_batchnorm(monkeypatch, wrong, check):
    """A BatchNorm normalizing with the unbiased variance is not LN of its channel; one with per-sample statistics
    (the wrong axes) does not have the batch Jacobian: the written-out checks see both."""
    uncached = getattr(batchnorm, check).__wrapped__
    assert uncached((2, 1, 2), "batch")
    monkeypatch.setattr(batchnorm, "seed_statistics", wrong)
    assert not uncached((2, 1, 2), "batch")


# --- forward, eval and VJP against torch ----------------------------------------------------------------------------
SHAPES = [((6, 3), False), ((4, 3, 5), False), ((3, 2, 4, 5), False), ((3, 2, 4, 5), True), ((2, 3, 2, 3, 2), True)]


@pytest.mark.parametrize(("shape", "channels_last"), SHAPES)
def test_training_forward_eval_and_vjp_match_torch(shape, channels_last):
    x_ = _batch(*shape, channels_last=channels_last)
    weight, bias = _channel_parameters(shape[1])
    y = F.batch_norm(x_, None, None, weight, bias, training=True, eps=EPS)
    np.testing.assert_allclose(oracle.batchnorm(x_.numpy(), weight.numpy(), bias.numpy(), EPS), y.numpy(), **TOL)
    np.testing.assert_allclose(oracle.batchnorm(x_.numpy(), None, None, EPS),
                               F.batch_norm(x_, None, None, training=True, eps=EPS).numpy(), **TOL)
    running_mean, running_var = _channel_parameters(shape[1], seed=2)
    running_var = running_var.abs() + 0.1
    evaluated = F.batch_norm(x_, running_mean, running_var, weight, bias, training=False, eps=EPS)
    np.testing.assert_allclose(oracle.batchnorm_eval(x_.numpy(), running_mean.numpy(), running_var.numpy(),
                                                     weight.numpy(), bias.numpy(), EPS), evaluated.numpy(), **TOL)
    leaves = [t.clone().requires_grad_() for t in (x_, weight, bias)]
    upstream = _batch(*shape, seed=3)
    F.batch_norm(leaves[0], None, None, leaves[1], leaves[2], training=True, eps=EPS).backward(upstream)
    derived = oracle.batchnorm_vjp(x_.numpy(), weight.numpy(), EPS, upstream.numpy())
    for got, leaf in zip(derived, leaves, strict=True):
        np.testing.assert_allclose(got, leaf.grad.numpy(), **TOL)


@pytest.mark.parametrize(("shape", "channels_last"), SHAPES)
def test_eval_vjp_matches_torch(shape, channels_last):
    """Eval mode's VJP is the affine map's (the running statistics constants), for BatchNorm and InstanceNorm."""
    x_ = _batch(*shape, channels_last=channels_last)
    weight, bias = _channel_parameters(shape[1])
    running_mean, running_var = _buffers(shape[1])
    upstream = _batch(*shape, seed=3)
    for norm in (F.batch_norm, F.instance_norm):
        if norm is F.instance_norm and len(shape) < 3:
            continue
        leaves = [t.clone().requires_grad_() for t in (x_, weight, bias)]
        norm(leaves[0], running_mean.clone(), running_var.clone(), leaves[1], leaves[2], False, 0.1, EPS
             ).backward(upstream)
        derived = oracle.batchnorm_eval_vjp(x_.numpy(), running_mean.numpy(), running_var.numpy(), weight.numpy(),
                                            EPS, upstream.numpy())
        for got, leaf in zip(derived, leaves, strict=True):
            np.testing.assert_allclose(got, leaf.grad.numpy(), **TOL)
    assert oracle.batchnorm_eval_vjp(x_.numpy(), running_mean.numpy(), running_var.numpy(), None, EPS,
                                     upstream.numpy())[1] is None


def test_the_vjp_without_weight_and_with_frozen_statistics():
    """No weight: dweight is None; a backward holding the batch statistics constant (gamma g / s) is far from it."""
    x_ = _batch(4, 2, 3)
    upstream = _batch(4, 2, 3, seed=5)
    leaf = x_.clone().requires_grad_()
    F.batch_norm(leaf, None, None, training=True, eps=EPS).backward(upstream)
    dx, dweight, _ = oracle.batchnorm_vjp(x_.numpy(), None, EPS, upstream.numpy())
    assert dweight is None
    np.testing.assert_allclose(dx, leaf.grad.numpy(), **TOL)
    _, variance = oracle.batch_statistics(x_.numpy())
    frozen = upstream.numpy() / np.sqrt(variance + EPS)[None, :, None]
    assert np.max(np.abs(frozen - dx)) > 0.1


# --- running statistics -----------------------------------------------------------------------------------------------
def _buffers(channels: int) -> tuple[torch.Tensor, torch.Tensor]:
    mean, var_ = _channel_parameters(channels, seed=7)
    return mean, var_.abs() + 0.5


@pytest.mark.parametrize("shape", [(5, 3), (3, 2, 4, 5), (2, 3, 2, 2, 3)])
def test_running_update_matches_torch_in_both_conventions(shape):
    x_ = _batch(*shape)
    running_mean, running_var = _buffers(shape[1])
    start = (running_mean.numpy().copy(), running_var.numpy().copy())
    F.batch_norm(x_, running_mean, running_var, training=True, momentum=0.3, eps=EPS)
    for momentum, convention in ((0.3, "torch"), (0.7, "keras")):
        mean, variance = oracle.running_update(*start, x_.numpy(), momentum, convention=convention)
        np.testing.assert_allclose(mean, running_mean.numpy(), **TOL)
        np.testing.assert_allclose(variance, running_var.numpy(), **TOL)
    inverted, _ = oracle.running_update(*start, x_.numpy(), 0.7, convention="torch")  # Keras' m' in torch's formula
    batch_mean, population = oracle.batch_statistics(x_.numpy())
    np.testing.assert_allclose(inverted - running_mean.numpy(), (2 * 0.7 - 1) * (batch_mean - start[0]), **TOL)
    _, biased = oracle.running_update(*start, x_.numpy(), 0.3, unbiased=False)
    count = x_.numel() // shape[1]
    np.testing.assert_allclose(biased - running_var.numpy(), -0.3 * population / (count - 1), **TOL)


def test_momentum_none_is_the_cumulative_average_of_torch():
    module = torch.nn.BatchNorm2d(3, momentum=None, eps=EPS).double().train()
    mean, variance = module.running_mean.numpy().copy(), module.running_var.numpy().copy()
    for call in range(3):
        x_ = _batch(2, 3, 2, 3, seed=10 + call) * (call + 1)
        mean, variance = oracle.running_update(mean, variance, x_.numpy(), None, num_batches_tracked=call)
        module(x_)
        np.testing.assert_allclose(mean, module.running_mean.numpy(), **TOL)
        np.testing.assert_allclose(variance, module.running_var.numpy(), **TOL)
    assert int(module.num_batches_tracked) == 3


@pytest.mark.parametrize("shape", [(1, 3), (1, 3, 1, 1), (1, 2, 1)])
def test_one_element_per_channel_is_refused_in_training(shape):
    """torch 2.13: n = N x spatial = 1 raises in training, with or without running statistics; eval accepts it."""
    x_ = _batch(*shape)
    running_mean, running_var = _buffers(shape[1])
    for buffers in ((None, None), (running_mean, running_var)):
        with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
            F.batch_norm(x_, *buffers, training=True)
    evaluated = F.batch_norm(x_, running_mean, running_var, training=False, eps=EPS)
    np.testing.assert_allclose(oracle.batchnorm_eval(x_.numpy(), running_mean.numpy(), running_var.numpy(), None,
                                                     None, EPS), evaluated.numpy(), **TOL)
    with pytest.raises(ValueError, match="at least 2 elements per channel"):
        oracle.running_update(running_mean.numpy(), running_var.numpy(), x_.numpy(), 0.1)


def test_degenerate_channels_give_beta():
    weight, bias = _channel_parameters(2)
    constant = torch.full((3, 2, 4), 1.5, dtype=torch.float64)
    y = F.batch_norm(constant, None, None, weight, bias, training=True, eps=EPS)
    expected = np.broadcast_to(bias.numpy()[None, :, None], y.shape)
    np.testing.assert_array_equal(oracle.batchnorm(constant.numpy(), weight.numpy(), bias.numpy(), EPS), expected)
    # torch folds the normalization into y = (gamma/s) x + (beta - mu gamma/s): the two terms of size |gamma x|/s
    # cancel, each rounded (u = 2^-53), so its output is beta only within a few u |gamma x|/sqrt(eps)
    folded = 4 * 2.0**-53 * (np.abs(weight.numpy()) * 1.5 / np.sqrt(EPS) + np.abs(bias.numpy()))
    assert np.all(np.abs(y.numpy() - expected) <= folded[None, :, None])


# --- coupling and spectral norm ---------------------------------------------------------------------------------------
def test_cross_sample_coupling_matches_finite_differences_and_eval_has_none():
    """d y(sample 0) / d x(sample 2) in one channel, by central differences of the training oracle, is the derived
    -gamma (1 + xhat_a xhat_b)/(n s); the eval map's difference is exactly 0."""
    x_ = _batch(3, 2, 4).numpy()
    weight, bias = (t.numpy() for t in _channel_parameters(2))
    a, b, channel, step = (0, 1, 1), (2, 1, 3), 1, 1e-6
    n = x_.shape[0] * x_.shape[2]
    mean, variance = oracle.batch_statistics(x_)
    s = np.sqrt(variance[channel] + EPS)
    xhat = (x_[:, channel] - mean[channel]) / s
    derived = -weight[channel] * (1 + xhat[a[0], a[2]] * xhat[b[0], b[2]]) / (n * s)
    up, down = x_.copy(), x_.copy()
    up[b] += step
    down[b] -= step
    numeric = (oracle.batchnorm(up, weight, bias, EPS)[a] - oracle.batchnorm(down, weight, bias, EPS)[a]) / (2 * step)
    assert abs(derived) > 1e-2
    assert numeric == pytest.approx(derived, rel=1e-6)
    other_channel = (0, 0, 1)
    assert (oracle.batchnorm(up, weight, bias, EPS)[other_channel]
            == oracle.batchnorm(down, weight, bias, EPS)[other_channel])
    stats = (mean, variance * n / (n - 1))
    assert (oracle.batchnorm_eval(up, *stats, weight, bias, EPS)[a]
            == oracle.batchnorm_eval(down, *stats, weight, bias, EPS)[a])


def test_spectral_norm_matches_the_autograd_jacobian():
    x_ = _batch(2, 3, 4)
    weight, _ = _channel_parameters(3)
    jacobian = torch.autograd.functional.jacobian(
        lambda t: F.batch_norm(t, None, None, weight, None, training=True, eps=EPS), x_).reshape(x_.numel(), -1)
    assert oracle.batchnorm_spectral_norm(x_.numpy(), weight.numpy(), EPS) == pytest.approx(
        torch.linalg.matrix_norm(jacobian, 2).item(), rel=1e-10)


# --- channel-wise LayerNorm and InstanceNorm ------------------------------------------------------------------------
def test_channel_layernorm_matches_torch_over_chw():
    x_ = _batch(3, 2, 4, 5)
    weight, bias = _batch(2, 4, 5, seed=4), _batch(2, 4, 5, seed=6)
    expected = F.layer_norm(x_, (2, 4, 5), weight, bias, EPS)
    np.testing.assert_allclose(oracle.channel_layernorm(x_.numpy(), weight.numpy(), bias.numpy(), EPS, 3),
                               expected.numpy(), **TOL)
    np.testing.assert_allclose(oracle.channel_layernorm(x_.numpy(), None, None, EPS, 2),
                               F.layer_norm(x_, (4, 5), eps=EPS).numpy(), **TOL)


@pytest.mark.parametrize("shape", [(3, 2, 5), (2, 3, 4, 3)])
def test_instance_norm_and_its_running_statistics_match_torch(shape):
    x_ = _batch(*shape)
    weight, bias = _channel_parameters(shape[1])
    running_mean, running_var = _buffers(shape[1])
    start = (running_mean.numpy().copy(), running_var.numpy().copy())
    y = F.instance_norm(x_, running_mean, running_var, weight, bias, use_input_stats=True, momentum=0.2, eps=EPS)
    np.testing.assert_allclose(oracle.instance_norm(x_.numpy(), weight.numpy(), bias.numpy(), EPS), y.numpy(), **TOL)
    mean, variance = oracle.instance_running_update(*start, x_.numpy(), 0.2)
    np.testing.assert_allclose(mean, running_mean.numpy(), **TOL)
    np.testing.assert_allclose(variance, running_var.numpy(), **TOL)
    batch_mean, _ = oracle.running_update(*start, x_.numpy(), 0.2)  # the mean update is BatchNorm's
    np.testing.assert_allclose(batch_mean, mean, **TOL)


def test_instance_norm_quirks_of_torch():
    """torch 2.13: nn.InstanceNorm*d(momentum=None) passes momentum 0.0 (the buffers never move); S = 1 raises."""
    module = torch.nn.InstanceNorm1d(3, track_running_stats=True, momentum=None).double().train()
    module(_batch(4, 3, 5))
    np.testing.assert_array_equal(module.running_mean.numpy(), np.zeros(3))
    np.testing.assert_array_equal(module.running_var.numpy(), np.ones(3))
    with pytest.raises(ValueError, match="Expected more than 1 spatial element when training"):
        F.instance_norm(_batch(2, 3, 1))
    with pytest.raises(ValueError, match="numeric momentum"):
        oracle.instance_running_update(np.zeros(3), np.ones(3), _batch(2, 3, 4).numpy(), None)


def test_eval_modes_read_the_running_statistics_and_write_nothing():
    """BatchNorm's and InstanceNorm's eval mode (use_input_stats=False) are the affine map of claim bn.eval, and
    leave the running buffers exactly as they were."""
    x_ = _batch(3, 2, 5)
    weight, bias = _channel_parameters(2)
    running_mean, running_var = _buffers(2)
    before = (running_mean.clone(), running_var.clone())
    expected = oracle.batchnorm_eval(x_.numpy(), running_mean.numpy(), running_var.numpy(), weight.numpy(),
                                     bias.numpy(), EPS)
    batch = F.batch_norm(x_, running_mean, running_var, weight, bias, training=False, momentum=0.5, eps=EPS)
    instance = F.instance_norm(x_, running_mean, running_var, weight, bias, use_input_stats=False, momentum=0.5,
                               eps=EPS)
    for y in (batch, instance):
        np.testing.assert_allclose(y.numpy(), expected, **TOL)
    for buffer, original in zip((running_mean, running_var), before, strict=True):
        assert torch.equal(buffer, original)
