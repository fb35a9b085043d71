"""LayerNorm claims: Jacobian, spectral norm, mean stability, shift invariance, variance insensitivity,
affine identities, gradient identities and the worked example of seed 000.

What the seeds state and the derivations refute, as witnesses (tests/test_proofs_doctests.py runs them):

>>> import numpy as np
>>> from proofs import oracles

ln.spectral_norm: ||J||_2 = 1/sqrt(sigma^2 + eps) needs d >= 3 (or a constant row); at d = 2 the norm is smaller.

>>> x = np.array([1.0, -1.0])
>>> round(float(oracles.layernorm_spectral_norm(x, 0.5)), 6), round(float(1 / np.sqrt(x.var() + 0.5)), 6)
(0.272166, 0.816497)

ln.variance_insensitivity: "insensitive to the input variance" fails where sigma^2 <= eps; at sigma^2 = 0 the
sensitivity eps/(sigma^2 + eps)^2 is 1/eps.

>>> round(float(oracles.normalized_variance_sensitivity(0.0, 1e-5)))
100000

ln.affine: scaling x by a is LayerNorm with eps/a^2, not the same LayerNorm.

>>> x = np.array([1.0, 2.0, 4.0])
>>> bool(np.allclose(oracles.layernorm(4 * x, None, None, 0.1), oracles.layernorm(x, None, None, 0.1 / 16)))
True
>>> bool(np.allclose(oracles.layernorm(4 * x, None, None, 0.1), oracles.layernorm(x, None, None, 0.1)))
False

ln.mean_stability: the output mean is beta only for a gamma that is the same for every feature.

>>> round(float(oracles.layernorm(x, np.array([1.0, 1.0, 2.0]), None, 0.0).mean()), 6)
0.445435
"""

from __future__ import annotations

import sympy as sp

from proofs import expressions
from proofs.algebra import (
    LN_AGGREGATES,
    MEAN_DEF,
    VAR_DEF,
    K,
    beta,
    concrete,
    concrete_row,
    d,
    delta,
    dy,
    eps,
    gamma,
    i,
    j,
    k,
    mu,
    row_mean,
    row_sum,
    v,
    var,
    x,
)
from proofs.claims import symbolic_checks
from proofs.claims.base import Claim
from proofs.derivation import AtMost, Derivation, Equal, Fact

s = sp.sqrt(var + eps)
epsp = sp.Symbol("epsilon", positive=True)  # eps > 0 where an inequality needs it
sp_ = sp.sqrt(var + epsp)
D = sp.Derivative
l_ = sp.Symbol("l_", integer=True, positive=True)


def _jacobian() -> Derivation:
    seed_form = gamma[i] * ((delta(i, j) - 1 / d) / s - (x[i] - mu) * (x[j] - mu) / (d * s**3))
    factored = gamma[i] / s * (delta(i, j) - 1 / d - ((x[i] - mu) / s) * ((x[j] - mu) / s) / d)
    vjp = (gamma[j] * dy[j] - row_mean(gamma[k] * dy[k])
           - (x[j] - mu) / s * row_mean(gamma[k] * dy[k] * (x[k] - mu) / s)) / s
    return Derivation((
        Equal(D(MEAN_DEF, x[j]), 1 / d, r"differentiate the row sum: $\sum_k \delta_{jk} = 1$"),
        Equal(D(VAR_DEF, x[j]), 2 * (x[j] - mu) / d,
              r"chain rule; $\sum_l (x_l - \mu) = 0$ removes the term through $\mu$"),
        Equal(D(expressions.LN_DEFINITION, x[j]), seed_form,
              r"quotient and chain rule with the two derivatives above (seed 000's formula)"),
        Equal(seed_form, factored, r"factor $1/s$, $s = \sqrt{\sigma^2+\epsilon}$: $J = \frac{\gamma}{s}"
              r"(I - \mathbf{1}\mathbf{1}^T/d - \hat{x}\hat{x}^T/d)$"),
        Fact(r"J_{ij} = \partial y_i/\partial x_j \text{ of the written-out row: every entry for } d \le 4"
             r"\text{, entries (1,1), (1,2) for } d = 5, 6",
             "explicit differentiation of the written-out rows, compared exactly; the other entries follow by "
             "permuting the features",
             lambda: all(symbolic_checks.jacobian_matches_for_width("ln", n) for n in range(1, 7))),
        Equal(D(expressions.LN_DEFINITION, gamma[j]), delta(i, j) * (x[i] - mu) / s,
              r"$y_i$ is linear in $\gamma_i$"),
        Equal(D(expressions.LN_DEFINITION, beta[j]), delta(i, j), r"$y_i$ is linear in $\beta_i$"),
        Equal(row_sum(dy[i] * expressions.jacobian("ln"), i), vjp,
              r"the vector--Jacobian product $(\partial L/\partial x)_j = \sum_i g_i J_{ij}$, "
              r"$g = \partial L/\partial y$"),
    ))


def _perp_aggregates() -> dict:
    return {**LN_AGGREGATES, v[K]: 0, x[K] * v[K]: 0}


def _spectral_norm() -> Derivation:
    unit = expressions.unit_weight(expressions.jacobian("ln"))
    apply = lambda w, aggregates=LN_AGGREGATES: row_sum(unit * w, j)  # noqa: E731
    lam_row = eps / s**3
    return Derivation((
        Equal(unit, expressions.unit_weight(expressions.jacobian("ln")).subs({i: j, j: i}, simultaneous=True),
              r"$J$ is symmetric for $\gamma = 1$, so $\|J\|_2 = \max |\lambda|$ over its eigenvalues"),
        Equal(apply(sp.S.One), 0, r"$J\mathbf{1} = 0$: eigenvalue 0 on $\mathbf{1}$"),
        Equal(apply((x[j] - mu) / s), lam_row * (x[i] - mu) / s,
              r"$J\hat{x} = \frac{1}{s}(1 - \frac{\sigma^2}{\sigma^2+\epsilon})\hat{x}$: "
              r"eigenvalue $\epsilon/s^3$ on $\hat{x}$ (uses $\sum_k \hat{x}_k^2 = d\sigma^2/s^2$)"),
        Equal(apply(v[j]), v[i] / s, r"for $v \perp \mathbf{1}, \hat{x}$: $Jv = v/s$, eigenvalue $1/s$",
              aggregates=_perp_aggregates()),
        Fact(r"\dim\{\mathbf{1},\hat{x}\}^\perp = d-2 \ (\sigma^2>0),\ d-1\ (\sigma^2=0):\ "
             r"\det(\lambda - sJ) \text{ checked exactly, } d=1..6",
             "characteristic polynomials of s J for rational rows (constant and not), eps = 1/3 and 0",
             _spectra_match),
        AtMost(epsp / sp_**3, 1 / sp_, r"the eigenvalue on $\hat{x}$ never exceeds $1/s$",
               certificate=var / sp_**3),
        AtMost(1 / sp_, 1 / sp.sqrt(epsp),
               r"$1/s \le 1/\sqrt{\epsilon}$, with equality iff $\sigma^2 = 0$ (the global Lipschitz constant, "
               r"attained on constant rows, $d \ge 2$)",
               certificate=var / (sp_ * sp.sqrt(epsp) * (sp_ + sp.sqrt(epsp)))),
        AtMost(epsp / sp_**3, 1 / sp.sqrt(epsp), r"$d = 2$: the norm $\epsilon/s^3$ is below $1/\sqrt{\epsilon}$ too",
               certificate=var * (sp_**2 + sp_ * sp.sqrt(epsp) + epsp)
               / ((sp_ + sp.sqrt(epsp)) * sp_**3 * sp.sqrt(epsp))),
        Fact(r"x = (1,-1),\ \epsilon = 1:\ \|J\|_2 = 2^{-3/2} \ne 1/\sqrt{\sigma^2+\epsilon} = 2^{-1/2}",
             "witness for d = 2: singular values of the exact 2x2 Jacobian",
             lambda: _exact_norm([1, -1], sp.S.One) == 2 ** sp.Rational(-3, 2)),
        Fact(r"\|\mathrm{diag}(\gamma) J\|_2 \le \max_i|\gamma_i|\,\|J\|_2 \le \max_i|\gamma_i|/\sqrt{\epsilon}",
             "submultiplicativity; checked on d = 3 rows with gamma = (2, -1/2, 1) and (1, 0, 0), the bound "
             "is not attained in general",
             _weighted_bound_holds),
    ))


def _exact_norm(row: list, epsilon: sp.Expr, weights: list | None = None) -> sp.Expr:
    """||diag(weights) J||_2 of a concrete integer row, exactly (largest singular value)."""
    width = len(row)
    weights = weights or [1] * width
    values = dict(zip(concrete_row(width), [sp.Integer(a) for a in row], strict=True))
    stats = {mu: concrete(MEAN_DEF, width).subs(values), var: concrete(VAR_DEF, width).subs(values)}
    unit = expressions.unit_weight(expressions.jacobian("ln"))
    matrix = sp.Matrix(width, width, lambda a, b: weights[a] * unit.subs({i: a + 1, j: b + 1, d: width}).subs(stats)
                       .subs(values).subs(eps, epsilon))
    return sp.simplify(max(sp.sqrt(ev) for ev in (matrix.T * matrix).eigenvals()))


def _spectra_match() -> bool:
    lam = sp.Symbol("lambda")
    for width in range(1, 7):
        rows = {"constant": [2] * width, "varied": [3 * n * n - n for n in range(width)]}
        for name, row in rows.items():
            for epsilon in (sp.Rational(1, 3), sp.S.Zero):
                if name == "constant" and epsilon == 0:
                    continue  # undefined: sigma^2 + eps = 0
                values = [sp.Rational(a) for a in row]
                mean = sum(values) / width
                variance = sum((a - mean) ** 2 for a in values) / width
                if variance == 0:
                    expected = lam * (lam - 1) ** (width - 1)
                else:
                    expected = lam * (lam - epsilon / (variance + epsilon)) * (lam - 1) ** (width - 2)
                got = symbolic_checks.characteristic_polynomial("ln", row, epsilon)
                if sp.expand(got - expected) != 0:
                    return False
    return True


def _weighted_bound_holds() -> bool:
    row, epsilon = [1, 0, -2], sp.Rational(1, 2)
    unit_norm = _exact_norm(row, epsilon)
    for weights in ([2, sp.Rational(-1, 2), 1], [1, 0, 0]):
        norm = _exact_norm(row, epsilon, weights)
        largest = max(abs(w) for w in weights)
        if not (sp.N(norm, 30) <= sp.N(largest * unit_norm, 30) <= sp.N(largest / sp.sqrt(epsilon), 30)):
            return False
    return True


def _mean_stability() -> Derivation:
    g0, b0 = sp.symbols("gamma beta", real=True)
    y_scalar = g0 * (x[k] - mu) / s + b0
    y_feature = gamma[k] * (x[k] - mu) / s + beta[k]
    return Derivation((
        Equal(row_mean(x[k] - mu), 0, r"the centred row has mean 0"),
        Equal(row_mean(y_scalar), b0, r"scalar $\gamma, \beta$: the output mean is exactly $\beta$"),
        Equal(row_mean(y_feature),
              row_mean(beta[k]) + row_mean((gamma[k] - row_mean(gamma[l_], l_)) * (x[k] - mu) / s),
              r"per-feature $\gamma,\beta$: $\bar\beta$ plus the covariance of $\gamma$ with $\hat{x}$"),
        Fact(r"d = 2,\ x = (1,-1),\ \gamma = (1,0),\ \beta = 0,\ \epsilon = 0:\ \mathrm{mean}(y) = 1/2 \ne 0",
             "witness: the mean moves with the input when gamma varies per feature",
             lambda: _ln_values([1, -1], [1, 0], [0, 0], 0) == [1, 0]),
    ))


def _ln_values(row: list, weights: list, biases: list, epsilon) -> list:
    """The outputs of LN (its definition with the row's mean and variance) on a rational row, exactly."""
    width = len(row)
    values = dict(zip(concrete_row(width), map(sp.Rational, row), strict=True))
    stats = {mu: concrete(MEAN_DEF, width).subs(values), var: concrete(VAR_DEF, width).subs(values)}
    output = expressions.output("ln").subs(stats).subs(eps, sp.Rational(epsilon))
    return [sp.radsimp(output.subs({x[i]: values[x[a]], gamma[i]: sp.Rational(weights[a - 1]),
                                    beta[i]: sp.Rational(biases[a - 1])})) for a in range(1, width + 1)]


def _shift_invariance() -> Derivation:
    shift = sp.Symbol("c", real=True)
    shifted = expressions.LN_DEFINITION.replace(lambda e: isinstance(e, sp.Indexed) and e.base == x,
                                                lambda e: e + shift)
    unit = expressions.jacobian("ln")
    return Derivation((
        Equal(MEAN_DEF.replace(lambda e: isinstance(e, sp.Indexed) and e.base == x, lambda e: e + shift),
              mu + shift, r"the mean shifts with the row"),
        Equal(shifted, expressions.LN_DEFINITION, r"$x_i - \mu$ and $\sigma^2$ are unchanged: "
              r"$\mathrm{LN}(x + c\mathbf{1}) = \mathrm{LN}(x)$ exactly, every $\epsilon$, $d$, $\gamma$, $\beta$"),
        Equal(row_sum(unit, j), 0, r"$J\mathbf{1} = 0$: the directional derivative along $\mathbf{1}$ vanishes"),
        Fact(r"x = (1,0,-1),\ v = (1,0,0),\ \epsilon = 0:\ \mathrm{LN}(x+v) \ne \mathrm{LN}(x)",
             "witness: a per-feature shift changes the output (J v = 0 only for v along 1 when eps > 0)",
             lambda: _ln_values([2, 0, -1], [1] * 3, [0] * 3, 0) != _ln_values([1, 0, -1], [1] * 3, [0] * 3, 0)),
    ))


def _variance_insensitivity() -> Derivation:
    f = var / (var + eps)
    change = sp.Symbol("Delta", real=True)
    xhat_k = (x[k] - mu) / s
    return Derivation((
        Equal(row_mean((xhat_k - row_mean((x[l_] - mu) / s, l_)) ** 2), f,
              r"population variance of $\hat{x}$ (its mean is 0)"),
        Equal(sp.Derivative(f, var), eps / (var + eps) ** 2, r"the seed's factor $\epsilon/(\sigma^2+\epsilon)^2$"),
        Equal(f.subs(var, var + change) - f - eps / (var + eps) ** 2 * change,
              -eps * change**2 / ((var + eps) ** 2 * (var + eps + change)),
              r"the exact first-order remainder (second order in $\Delta\sigma^2$)"),
        Equal(var / f * sp.diff(f, var), eps / (var + eps),
              r"relative sensitivity: $\frac{d\ln V}{d\ln\sigma^2} = \frac{\epsilon}{\sigma^2+\epsilon}$, "
              r"small iff $\sigma^2 \gg \epsilon$"),
        Equal((eps / (var + eps) ** 2).subs(var, 0), 1 / eps,
              r"at $\sigma^2 = 0$ the factor is $1/\epsilon$: the largest possible, not small"),
        Fact(r"\epsilon = 10^{-5},\ \sigma^2 = 0:\ \frac{\epsilon}{(\sigma^2+\epsilon)^2} = 10^5",
             "witness: 'insensitive' fails for rows whose variance is at or below eps",
             lambda: (eps / (var + eps) ** 2).subs({eps: sp.Rational(1, 10**5), var: 0}) == 10**5),
    ))


def _affine() -> Derivation:
    a, b = sp.Symbol("a", positive=True), sp.Symbol("b", real=True)
    unit = expressions.unit_weight(expressions.LN_DEFINITION).subs(beta[i], 0)

    def transformed(scale: sp.Expr) -> sp.Expr:
        return unit.replace(lambda e: isinstance(e, sp.Indexed) and e.base == x, lambda e: scale * e + b)

    def with_eps(value: sp.Expr) -> sp.Expr:
        return unit.subs(eps, value)

    return Derivation((
        Equal(transformed(a), with_eps(eps / a**2),
              r"$a > 0$: $\mathrm{LN}_\epsilon(ax + b\mathbf{1}) = \mathrm{LN}_{\epsilon/a^2}(x)$"),
        Equal(transformed(-a), -with_eps(eps / a**2),
              r"$a < 0$: $\mathrm{LN}_\epsilon(ax + b\mathbf{1}) = -\mathrm{LN}_{\epsilon/a^2}(x)$ (the sign flips)"),
        Equal(transformed(sp.S.Zero), 0,
              r"$a = 0$: a constant row, $\hat{x} = 0$, so $y = \beta$ "
              r"(for $\epsilon > 0$; undefined at $\epsilon = 0$)"),
        Fact(r"x = (1,-1),\ \epsilon = 1,\ a = 2:\ \mathrm{LN}_1(2x) = \tfrac{2}{\sqrt5}(1,-1) \ne "
             r"\tfrac{1}{\sqrt2}(1,-1) = \mathrm{LN}_1(x)",
             "witness: with eps > 0 scaling is not exactly invisible",
             lambda: _ln_values([2, -2], [1, 1], [0, 0], 1) != _ln_values([1, -1], [1, 1], [0, 0], 1)),
    ))


def _gradient_identities() -> Derivation:
    dx = expressions.vjp_x("ln")
    return Derivation((
        Equal(row_sum(dx, j), 0, r"$\sum_j \partial L/\partial x_j = g^T J \mathbf{1} = 0$, for every $\gamma$"),
        Equal(row_sum(x[j] * dx, j), eps / (var + eps) * row_sum(gamma[j] * dy[j] * (x[j] - mu) / s, j),
              r"$x \cdot \partial L/\partial x = \frac{\epsilon}{\sigma^2+\epsilon}\sum_j \gamma_j "
              r"\partial L/\partial\gamma_j$ (0 when $\epsilon = 0$: scale invariance)"),
        Equal(expressions.vjp_weight("ln"), dy[j] * (x[j] - mu) / s,
              r"$\partial L/\partial \gamma_j = g_j \hat{x}_j$ per row (summed over rows)"),
        Equal(expressions.vjp_bias(), dy[j], r"$\partial L/\partial \beta_j = g_j$ per row (summed over rows)"),
    ))


def _seed_example() -> Derivation:
    row = [5, 5, 0, 0, 0, 0, 0, 0]
    values = dict(zip(concrete_row(8), map(sp.Integer, row), strict=True))
    mean = concrete(MEAN_DEF, 8).subs(values)
    variance = concrete(VAR_DEF, 8).subs(values)
    third = sp.sqrt(3) / 3
    return Derivation((
        Equal(mean, sp.Rational(5, 4), r"$\mu = (5+5)/8$"),
        Equal(variance, sp.Rational(75, 16), r"$\sigma^2 = \frac{1}{8}[2(5-\frac54)^2 + 6(\frac54)^2]$"),
        Equal(sp.sqrt(variance), 5 * sp.sqrt(3) / 4, r"$\sigma = 5\sqrt{3}/4$"),
        Equal((5 - mean) / sp.sqrt(variance), sp.sqrt(3), r"the two large entries"),
        Equal((0 - mean) / sp.sqrt(variance), -third, r"the six zeros become $-\sqrt3/3$"),
        Fact(r"\mathrm{LN}_0(5,5,0,\dots,0) = (\sqrt3,\sqrt3,-\tfrac{\sqrt3}{3},\dots,-\tfrac{\sqrt3}{3})",
             "the definition evaluated exactly on the whole row",
             lambda: _ln_values(row, [1] * 8, [0] * 8, 0) == [sp.sqrt(3)] * 2 + [-third] * 6),
        Equal(sum([sp.sqrt(3)] * 2 + [-third] * 6) / 8, 0, r"the output has mean 0; the sparsity is gone"),
        Equal(sum([sp.sqrt(3) ** 2] * 2 + [third**2] * 6) / 8, 1, r"and variance 1, since $\epsilon = 0$"),
    ))


SEED_000_JACOBIAN = ("By the chain rule, J_ij = gamma_i ((delta_ij - 1/d)/sqrt(sigma^2+eps) - (x_i-mu)(x_j-mu)/"
                     "(d (sigma^2+eps)^(3/2))); the Jacobian is dense.")

MEAN_STABILITY_VIEW = (
    "the row mean of the outputs is bounded by the mean of ln.forward's element bounds, so a kernel within "
    "ln.forward's bound on a row passes on that row; its condition (a constant or absent gamma) and its rows "
    "(every width and dtype, |mean|/std up to the error model's limit) are among ln.forward's draws, and a row-wise "
    "kernel's output mean depends on its own row alone (rows that differ within a call are ln.shift_invariance's "
    "regime): no bug fails it that ln.forward's inputs miss")

CLAIMS = (
    Claim("ln.jacobian", "Jacobian of LayerNorm", "000", SEED_000_JACOBIAN,
          r"$\partial y_i/\partial x_j = \frac{\gamma_i}{s}\left(\delta_{ij} - \frac1d - \frac{\hat{x}_i\hat{x}_j}{d}"
          r"\right)$, $\partial y_i/\partial\gamma_j = \delta_{ij}\hat{x}_i$, $\partial y_i/\partial\beta_j = "
          r"\delta_{ij}$, with $s = \sqrt{\sigma^2+\epsilon}$, $\hat{x} = (x-\mu)/s$.",
          (r"$d \ge 1$", r"$\sigma^2 + \epsilon > 0$ (otherwise LN is undefined)"),
          "holds", r"Seed 000's formula is exactly the derivative, for every $d$ (also $d = 1$, where $J = 0$).",
          _jacobian),
    Claim("ln.spectral_norm", "Spectral norm of the LayerNorm Jacobian", "000",
          "The spectral norm of LN's Jacobian (without the affine map) has an elegant bound: "
          "||J_LN(x)||_2 = 1/sqrt(sigma^2(x)+eps) <= 1/sqrt(eps), independent of x and even of d.",
          r"For $\gamma = 1$: $J$ has eigenvalue 0 on $\mathbf{1}$, $\epsilon/s^3$ on $\hat{x}$ and $1/s$ on "
          r"$\{\mathbf{1},\hat{x}\}^\perp$; so $\|J\|_2 = 1/s$ for $d \ge 3$, $\epsilon/s^3$ for $d = 2$, 0 for "
          r"$d = 1$; always $\le 1/\sqrt{\epsilon}$, attained on constant rows ($d \ge 2$). With per-feature "
          r"$\gamma$: $\|J\|_2 \le \max_i|\gamma_i|/\sqrt{\epsilon}$ (global Lipschitz bound, not always attained).",
          (r"$\sigma^2 + \epsilon > 0$", r"the bound $1/\sqrt{\epsilon}$ needs $\epsilon > 0$"),
          "holds only when",
          r"The equality $\|J\|_2 = 1/\sqrt{\sigma^2+\epsilon}$ holds only for $d \ge 3$ (any row) or constant "
          r"rows with $d \ge 2$. Witness: $d = 2$, $x = (1,-1)$, $\epsilon = 1$ gives $2^{-3/2}$, not $2^{-1/2}$. "
          r"The bound $\le 1/\sqrt{\epsilon}$ holds for every $d$ and row.",
          _spectral_norm),
    Claim("ln.mean_stability", "Mean stability of the LayerNorm output", "000",
          "The mean of the final output z is always beta (E[gamma y + beta 1] = gamma E[y] + beta = beta): whatever "
          "the drift of the input distribution, LN's output mean is completely stable (gamma, beta taken scalar).",
          r"$\frac1d\sum_i y_i = \beta$ for scalar $\gamma, \beta$; for per-feature $\gamma,\beta$: "
          r"$\bar\beta + \frac1d\sum_i(\gamma_i - \bar\gamma)\hat{x}_i$.",
          (r"$\sigma^2 + \epsilon > 0$",),
          "holds only when",
          r"Exactly $\beta$ when $\gamma$ and $\beta$ are the same for every feature (the seed's simplification); "
          r"with per-feature $\gamma$ the mean depends on the input. Witness: $x = (1,-1)$, $\gamma = (1,0)$, "
          r"$\epsilon = 0$: mean $1/2$.",
          _mean_stability, view_of="ln.forward", view_reason=MEAN_STABILITY_VIEW),
    Claim("ln.shift_invariance", "Invariance to a shift of the row", "003",
          "Applied per time step, LN makes the model insensitive to per-step shifts of all features.",
          r"$\mathrm{LN}(x + c\mathbf{1}) = \mathrm{LN}(x)$ for every real $c$; a per-feature shift $x + v$ is "
          r"invisible for all $x$ only when $v = c\mathbf{1}$.",
          (r"$\sigma^2 + \epsilon > 0$",), "holds",
          r"Exact for uniform shifts, every $\epsilon$, $d$, $\gamma$, $\beta$. Per-feature shifts change the "
          r"output (witness $x = (1,0,-1)$, $v = e_1$).",
          _shift_invariance),
    Claim("ln.variance_insensitivity", "Variance of the normalized row and its sensitivity", "000",
          "The variance of y is sigma^2/(sigma^2+eps), not exactly 1. When sigma^2 changes by Delta sigma^2 the "
          "change is suppressed, by first-order Taylor expansion, by a factor eps/(sigma^2+eps)^2; for small eps this "
          "factor is very small, so the output variance is insensitive to the input variance.",
          r"$\mathrm{Var}(\hat{x}) = \frac{\sigma^2}{\sigma^2+\epsilon}$, $\frac{d}{d\sigma^2} = "
          r"\frac{\epsilon}{(\sigma^2+\epsilon)^2}$, remainder $-\frac{\epsilon\Delta^2}"
          r"{(\sigma^2+\epsilon)^2(\sigma^2+\epsilon+\Delta)}$; "
          r"relative sensitivity $\frac{\epsilon}{\sigma^2+\epsilon}$.",
          (r"population variance", r"$\sigma^2 + \epsilon > 0$, $\sigma^2 + \Delta + \epsilon > 0$"),
          "holds only when",
          r"The formulas hold exactly; ``insensitive'' holds only when $\sigma^2 \gg \epsilon$ (relative sensitivity "
          r"$\le \delta$ iff $\sigma^2 \ge \epsilon(1-\delta)/\delta$). At $\sigma^2 = 0$ the factor is $1/\epsilon$ "
          r"($10^5$ for $\epsilon = 10^{-5}$).",
          _variance_insensitivity),
    Claim("ln.affine", "LayerNorm of an affine map of the row", "003",
          "Applying LN per time step makes the model insensitive to per-step affine transformations "
          "(uniform scaling and shifting of the features).",
          r"$\mathrm{LN}_\epsilon(a x + b\mathbf{1}) = \mathrm{sign}(a)\,\mathrm{LN}_{\epsilon/a^2}(x)$ (for "
          r"$\gamma = 1, \beta = 0$; in general $\gamma\odot\mathrm{sign}(a)\hat{x}_{\epsilon/a^2} + \beta$) for "
          r"$a \ne 0$; $= \beta$ for $a = 0$, $\epsilon > 0$.",
          (r"$a \in \mathbb{R}$, $b \in \mathbb{R}$", r"$\sigma^2 + \epsilon/a^2 > 0$"),
          "holds only when",
          r"Invariance is exact for shifts; for scaling only with $\epsilon$ rescaled to $\epsilon/a^2$ (exact at "
          r"$\epsilon = 0$, $a > 0$); $a < 0$ flips the sign. Witness: $x = (1,-1)$, $\epsilon = 1$, $a = 2$.",
          _affine),
    Claim("ln.gradient_identities", "Gradient identities of LayerNorm", "000",
          "Through the shared mean and variance, the gradient of any output reaches every input (dense coupling).",
          r"$\sum_j \frac{\partial L}{\partial x_j} = 0$; $x\cdot\frac{\partial L}{\partial x} = "
          r"\frac{\epsilon}{\sigma^2+\epsilon}\sum_j\gamma_j\frac{\partial L}{\partial\gamma_j}$; "
          r"$\frac{\partial L}{\partial\gamma_j} = \sum_{\text{rows}} g_j\hat{x}_j$, "
          r"$\frac{\partial L}{\partial\beta_j} = \sum_{\text{rows}} g_j$.",
          (r"$\sigma^2 + \epsilon > 0$", r"any $\gamma$ (per feature)"), "holds",
          r"The row sum of $\partial L/\partial x$ vanishes for every $\gamma$, not only constant $\gamma$.",
          _gradient_identities),
    Claim("ln.seed_example", "The worked example of seed 000", "000",
          "For x = (5,5,0,0,0,0,0,0), gamma = 1, beta = 0, eps = 0: mu = 1.25, sigma^2 = 75/16, "
          "z = (sqrt3, sqrt3, -sqrt3/3, ..., -sqrt3/3).",
          r"$\mathrm{LN}_0(5,5,0,0,0,0,0,0) = (\sqrt3,\sqrt3,-\frac{\sqrt3}{3},\dots,-\frac{\sqrt3}{3})$.",
          (r"$\epsilon = 0$, $\gamma = 1$, $\beta = 0$",), "holds",
          r"Reproduced exactly.",
          _seed_example),
)
