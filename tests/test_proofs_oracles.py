"""The float64 oracles against an independent high-precision (mpmath) LayerNorm/RMSNorm and numerical
differentiation, at random rows including d = 1, 2, 3 and constant rows; undefined points; broadcasting."""

from __future__ import annotations

import subprocess
import sys

import mpmath
import numpy as np
import pytest

from proofs import oracles

mpmath.mp.dps = 40
EPS = 0.3


def mp_layernorm(row, weight, bias, eps):
    """LayerNorm in 40-digit arithmetic, written from the definition (population variance, eps in the root)."""
    width = len(row)
    mean = mpmath.fsum(row) / width
    var = mpmath.fsum((v - mean) ** 2 for v in row) / width
    scale = mpmath.sqrt(var + eps)
    return [weight[n] * (row[n] - mean) / scale + bias[n] for n in range(width)]


def mp_rmsnorm(row, weight, bias, eps):
    width = len(row)
    scale = mpmath.sqrt(mpmath.fsum(v * v for v in row) / width + eps)
    return [weight[n] * row[n] / scale for n in range(width)]


MP = {"ln": mp_layernorm, "rms": mp_rmsnorm}


def mp_jacobian(kind, row, weight, eps):
    """J[i, j] by mpmath's numerical differentiation of the high-precision function."""
    width = len(row)
    zeros = [mpmath.mpf(0)] * width

    def entry(i, j):
        def along(t):
            moved = [mpmath.mpf(v) + (t if n == j else 0) for n, v in enumerate(row)]
            return MP[kind](moved, [mpmath.mpf(w) for w in weight], zeros, mpmath.mpf(eps))[i]

        return float(mpmath.diff(along, 0))

    return np.array([[entry(i, j) for j in range(width)] for i in range(width)])


def rows():
    rng = np.random.default_rng(7)
    cases = []
    for width in (1, 2, 3, 5):
        cases.append((f"random-d{width}", rng.normal(size=width) * 2 + 1, rng.normal(size=width)))
        cases.append((f"constant-d{width}", np.full(width, 1.5), rng.normal(size=width)))
    cases.append(("zero-d3", np.zeros(3), np.ones(3)))
    return cases


@pytest.mark.parametrize("kind", ["ln", "rms"])
@pytest.mark.parametrize(("name", "row", "weight"), rows(), ids=[c[0] for c in rows()])
def test_jacobian_matches_mpmath_differentiation(kind, name, row, weight):
    jacobian = oracles.layernorm_jacobian if kind == "ln" else oracles.rmsnorm_jacobian
    got = jacobian(row, weight, EPS)
    expected = mp_jacobian(kind, list(row), list(weight), EPS)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["ln", "rms"])
@pytest.mark.parametrize(("name", "row", "weight"), rows(), ids=[c[0] for c in rows()])
def test_forward_and_vjp_match_mpmath(kind, name, row, weight):
    rng = np.random.default_rng(len(row))
    bias, upstream = rng.normal(size=len(row)), rng.normal(size=len(row))
    mp_args = ([mpmath.mpf(v) for v in row], [mpmath.mpf(v) for v in weight], [mpmath.mpf(v) for v in bias])
    expected = np.array([float(v) for v in MP[kind](*mp_args, mpmath.mpf(EPS))])
    jacobian = mp_jacobian(kind, list(row), list(weight), EPS)
    ones, zeros = [mpmath.mpf(1)] * len(row), [mpmath.mpf(0)] * len(row)
    normalized = np.array([float(v) for v in MP[kind](mp_args[0], ones, zeros, mpmath.mpf(EPS))])
    if kind == "ln":
        got = oracles.layernorm(row, weight, bias, EPS)
        dx, dweight, dbias = oracles.layernorm_vjp(row, weight, EPS, upstream)
        np.testing.assert_allclose(dbias, upstream, rtol=1e-14)
    else:
        got = oracles.rmsnorm(row, weight, EPS)
        dx, dweight = oracles.rmsnorm_vjp(row, weight, EPS, upstream)
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(dx, jacobian.T @ upstream, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(dweight, upstream * normalized, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("width", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("constant", [False, True])
def test_spectral_norms_are_the_largest_singular_values(width, constant):
    rng = np.random.default_rng(width)
    row = np.full(width, -0.7) if constant else rng.normal(size=width)
    for eps in (1e-3, 0.5):
        ln = np.linalg.norm(oracles.layernorm_jacobian(row, None, eps), 2)
        rms = np.linalg.norm(oracles.rmsnorm_jacobian(row, None, eps), 2)
        np.testing.assert_allclose(oracles.layernorm_spectral_norm(row, eps), ln, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(oracles.rmsnorm_spectral_norm(row, eps), rms, rtol=1e-9)
        weight = rng.normal(size=width)
        weighted = np.linalg.norm(oracles.layernorm_jacobian(row, weight, eps), 2)
        assert max(ln, rms) <= oracles.spectral_norm_bound(eps) * (1 + 1e-12)
        assert weighted <= oracles.spectral_norm_bound(eps, weight) * (1 + 1e-12)


def test_the_seed_value_of_the_norm_fails_for_d_2():
    row, eps = np.array([1.0, -1.0]), 1.0
    assert oracles.layernorm_spectral_norm(row, eps) == pytest.approx(2**-1.5)
    assert oracles.layernorm_spectral_norm(row, eps) < 1 / np.sqrt(1.0 + eps)


def test_undefined_rows_are_nan_and_stay_in_their_row():
    batch = np.array([[2.0, 2.0, 2.0], [1.0, 2.0, 4.0]])
    assert np.isnan(oracles.layernorm(batch, None, None, 0.0)[0]).all()
    assert np.isfinite(oracles.layernorm(batch, None, None, 0.0)[1]).all()
    dx, dweight, dbias = oracles.layernorm_vjp(batch, np.ones(3), 0.0, np.ones((2, 3)))
    assert np.isnan(dx[0]).all() and np.isfinite(dx[1]).all() and np.isnan(dweight).all() and np.isnan(dbias).all()
    assert np.isnan(oracles.layernorm_jacobian(batch, None, 0.0)[0]).all()
    assert np.isnan(oracles.layernorm_spectral_norm(batch, 0.0)[0])
    zeros = np.zeros((1, 4))
    assert np.isnan(oracles.rmsnorm(zeros, None, 0.0)).all()
    assert (oracles.rmsnorm(zeros, None, 1e-6) == 0).all()
    assert np.allclose(oracles.layernorm(batch[:1], None, np.arange(3.0), 1e-5), np.arange(3.0))


@pytest.mark.parametrize("width", [3, 7, 10, 4096])
@pytest.mark.parametrize("value", [3.7, 0.1, -1e4 / 3])
def test_constant_rows_are_undefined_however_their_mean_rounds(width, value):
    """sigma^2 + eps = 0 on a constant row with eps = 0, although the float64 mean of (3.7,)*3 is not 3.7."""
    row = np.full(width, value)
    assert np.isnan(oracles.layernorm(row, None, None, 0.0)).all()
    assert np.isnan(oracles.layernorm_spectral_norm(row, 0.0))
    assert np.isnan(oracles.layernorm_vjp(row, None, 0.0, np.ones(width))[0]).all()
    assert (oracles.layernorm(row, None, np.arange(width, dtype=float), 1e-5) == np.arange(width)).all()


def test_broadcasting_over_leading_axes_and_per_row_eps():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 3, 8))
    weight, bias, upstream = rng.normal(size=8), rng.normal(size=8), rng.normal(size=(2, 3, 8))
    eps = np.array([[1e-5, 1e-2, 1.0], [0.1, 1e-3, 1e-4]])
    whole = oracles.layernorm(x, weight, bias, eps)
    dx, dweight, _ = oracles.layernorm_vjp(x, weight, eps, upstream)
    for a in range(2):
        for b in range(3):
            np.testing.assert_allclose(whole[a, b], oracles.layernorm(x[a, b], weight, bias, eps[a, b]), rtol=1e-15)
            np.testing.assert_allclose(dx[a, b], oracles.layernorm_vjp(x[a, b], weight, eps[a, b], upstream[a, b])[0])
    per_row = sum(oracles.layernorm_vjp(x[a, b], weight, eps[a, b], upstream[a, b])[1]
                  for a in range(2) for b in range(3))
    np.testing.assert_allclose(dweight, per_row, rtol=1e-12)
    assert np.array_equal(oracles.layernorm(x, None, None, 1e-5), oracles.layernorm(x, np.ones(8), np.zeros(8), 1e-5))
    assert oracles.layernorm_vjp(x, None, 1e-5, upstream)[1] is None


def test_scalar_oracles():
    assert oracles.normalized_variance(3.0, 1.0) == pytest.approx(0.75)
    step = 1e-6
    numeric = (oracles.normalized_variance(2.0 + step, 0.5) - oracles.normalized_variance(2.0 - step, 0.5)) / (2 * step)
    assert oracles.normalized_variance_sensitivity(2.0, 0.5) == pytest.approx(numeric, rel=1e-8)
    row = np.array([1.0, 3.0, -2.0])
    normalized = oracles.layernorm(row, None, None, 0.7)
    assert np.var(normalized) == pytest.approx(oracles.normalized_variance(np.var(row), 0.7), rel=1e-14)
    # dropout: exact expectation over all 2^3 masks, in floats
    p, expected = 0.3, 0.0
    for mask in np.ndindex(2, 2, 2):
        kept = np.array(mask, dtype=float)
        probability = np.prod(np.where(kept == 1, 1 - p, p))
        expected += probability * np.var(row * kept / (1 - p))
    bias = oracles.dropout_variance_bias(p, 3, np.var(row), np.mean(row))
    assert expected - np.var(row) == pytest.approx(bias, rel=1e-12)


def test_importing_the_oracles_is_fast():
    code = "import time; t = time.perf_counter(); import proofs.oracles; print(time.perf_counter() - t)"
    seconds = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert seconds < 2.0


@pytest.mark.parametrize("kind", ["ln", "rms"])
def test_weighted_spectral_norm_is_the_jacobians_and_can_be_far_below_the_stated_bound(kind):
    """Lanczos on the derived VJPs (d > DENSE_SPECTRAL_UP_TO) gives the SVD's ||J||_2 of the derived Jacobian."""
    rng = np.random.default_rng(3)
    d = oracles.DENSE_SPECTRAL_UP_TO + 36
    x = rng.standard_normal((2, d)) + 1.0
    weight = 1.0 + 0.5 * rng.standard_normal(d)
    jacobian = (oracles.layernorm_jacobian if kind == "ln" else oracles.rmsnorm_jacobian)(x, weight, 1e-5)
    exact = np.array([np.linalg.norm(j, 2) for j in jacobian])
    np.testing.assert_allclose(oracles.weighted_spectral_norm(x, weight, 1e-5, kind), exact, rtol=1e-9)
    assert (exact < oracles.spectral_norm_bound(1e-5, weight) / 100).all()


def test_one_norm_key_names_the_norm_everywhere_in_proofs():
    """error_model, fused_oracles and the spectral norm read "layernorm"/"ln" and "rmsnorm"/"rms" through
    oracles.norm_key: both spellings give the same values, any other kind the same error."""
    from proofs import error_model, fused_oracles

    row = np.random.default_rng(0).standard_normal((2, 5)) + 3.0
    u = error_model.unit_roundoff("float32")
    calls = (lambda kind: error_model.forward_bound(row, None, None, 1e-5, u, u, kind),
             lambda kind: fused_oracles.add_norm(row, row, None, None, 1e-5, kind)[0],
             lambda kind: oracles.weighted_spectral_norm(row, None, 1e-5, kind))
    for call in calls:
        for long, short in (("layernorm", "ln"), ("rmsnorm", "rms")):
            assert np.array_equal(call(long), call(short))
        assert not np.array_equal(call("ln"), call("rms"))
        with pytest.raises(ValueError, match=r"unknown kind 'batchnorm': expected 'layernorm' \(or 'ln'\)"):
            call("batchnorm")
