"""RMSNorm claims: what the LayerNorm derivations become for y = gamma x / sqrt(mean(x^2) + eps).

LayerNorm's statements transferred to RMSNorm, refuted by witnesses (tests/test_proofs_doctests.py runs them):

>>> import numpy as np
>>> from proofs import oracles

rms.mean_stability fails: RMSNorm does not centre; x = (1, 2), eps = 0 has output mean 3/sqrt(10), not 0.

>>> round(float(oracles.rmsnorm(np.array([1.0, 2.0]), None, 0.0).mean()), 6), round(float(3 / np.sqrt(10)), 6)
(0.948683, 0.948683)

rms.variance_insensitivity fails: the output variance sigma^2/(q + eps) depends on the input mean.

>>> [round(float(np.var(oracles.rmsnorm(np.array(row), None, 0.0))), 6) for row in ([1.0, 1.0], [0.0, 2.0])]
[0.0, 0.5]

rms.affine: no shift invariance (x = (1, -1), c = 1).

>>> [round(v, 6) for v in oracles.rmsnorm(np.array([1.0, -1.0]) + 1.0, None, 0.0).tolist()]
[1.414214, 0.0]

rms.spectral_norm: at d = 1 the norm is eps/r^3, not 1/r (r = sqrt(x^2 + eps); x = 2, eps = 1).

>>> round(float(oracles.rmsnorm_spectral_norm(np.array([2.0]), 1.0)), 6), round(1 / 5**1.5, 6), round(1 / 5**0.5, 6)
(0.089443, 0.089443, 0.447214)
"""

from __future__ import annotations

import sympy as sp

from proofs import expressions
from proofs.algebra import (
    MS_DEF,
    RMS_AGGREGATES,
    K,
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
    ms,
    row_mean,
    row_sum,
    v,
    x,
)
from proofs.claims import symbolic_checks
from proofs.claims.base import Claim
from proofs.derivation import AtMost, Derivation, Equal, Fact

r = sp.sqrt(ms + eps)
epsp = sp.Symbol("epsilon", positive=True)
rp = sp.sqrt(ms + epsp)
D = sp.Derivative


def _jacobian() -> Derivation:
    closed = gamma[i] / r * (delta(i, j) - (x[i] / r) * (x[j] / r) / d)
    return Derivation((
        Equal(D(MS_DEF, x[j]), 2 * x[j] / d, r"differentiate the row sum of squares", aggregates=RMS_AGGREGATES),
        Equal(D(expressions.RMS_DEFINITION, x[j]), closed,
              r"quotient and chain rule: $J = \frac{\gamma}{r}(I - \hat{x}\hat{x}^T/d)$, $r = \sqrt{q+\epsilon}$, "
              r"$\hat{x} = x/r$", aggregates=RMS_AGGREGATES),
        Fact(r"J_{ij} = \partial y_i/\partial x_j \text{ of the written-out row: every entry for } d \le 4"
             r"\text{, entries (1,1), (1,2) for } d = 5, 6",
             "explicit differentiation of the written-out rows, compared exactly; the other entries follow by "
             "permuting the features",
             lambda: all(symbolic_checks.jacobian_matches_for_width("rms", n) for n in range(1, 7))),
        Equal(D(expressions.RMS_DEFINITION, gamma[j]), delta(i, j) * x[i] / r, r"$y_i$ is linear in $\gamma_i$",
              aggregates=RMS_AGGREGATES),
        Equal(row_sum(dy[i] * expressions.jacobian("rms"), i),
              (gamma[j] * dy[j] - x[j] / r * row_mean(gamma[k] * dy[k] * x[k] / r)) / r,
              r"the vector--Jacobian product", aggregates=RMS_AGGREGATES),
    ))


def _spectral_norm() -> Derivation:
    unit = expressions.unit_weight(expressions.jacobian("rms"))
    perp = {**RMS_AGGREGATES, x[K] * v[K]: 0}
    return Derivation((
        Equal(row_sum(unit * x[j], j), eps / r**3 * x[i], r"$Jx = \frac{\epsilon}{r^3}x$: eigenvalue $\epsilon/r^3$",
              aggregates=RMS_AGGREGATES),
        Equal(row_sum(unit * v[j], j), v[i] / r, r"for $v \perp x$: eigenvalue $1/r$ (multiplicity $d-1$)",
              aggregates=perp),
        Fact(r"\det(\lambda - rJ) = (\lambda - \tfrac{\epsilon}{q+\epsilon})(\lambda-1)^{d-1}\ (x \ne 0),\ "
             r"(\lambda - 1)^d\ (x = 0),\ d = 1..6",
             "characteristic polynomials of r J for rational rows, eps = 1/3", _spectra_match),
        AtMost(epsp / rp**3, 1 / rp, r"so $\|J\|_2 = 1/r$ for $d \ge 2$; $\epsilon/r^3$ for $d = 1$",
               certificate=ms / rp**3),
        AtMost(1 / rp, 1 / sp.sqrt(epsp), r"$1/r \le 1/\sqrt{\epsilon}$, attained at $x = 0$",
               certificate=ms / (rp * sp.sqrt(epsp) * (rp + sp.sqrt(epsp)))),
    ))


def _spectra_match() -> bool:
    lam = sp.Symbol("lambda")
    epsilon = sp.Rational(1, 3)
    for width in range(1, 7):
        for row in ([0] * width, [n * n - 2 for n in range(width)]):
            q = sp.Rational(sum(a * a for a in row), width)
            expected = (lam - epsilon / (q + epsilon)) * (lam - 1) ** (width - 1)
            if sp.expand(symbolic_checks.characteristic_polynomial("rms", row, epsilon) - expected) != 0:
                return False
    return True


def _affine() -> Derivation:
    a = sp.Symbol("a", positive=True)
    unit = expressions.unit_weight(expressions.RMS_DEFINITION)

    def scaled(factor: sp.Expr) -> sp.Expr:
        return unit.replace(lambda e: isinstance(e, sp.Indexed) and e.base == x, lambda e: factor * e)

    return Derivation((
        Equal(scaled(a), unit.subs(eps, eps / a**2),
              r"$a > 0$: $\mathrm{RMS}_\epsilon(ax) = \mathrm{RMS}_{\epsilon/a^2}(x)$", aggregates=RMS_AGGREGATES),
        Equal(scaled(-a), -unit.subs(eps, eps / a**2), r"$a < 0$: the sign flips", aggregates=RMS_AGGREGATES),
        Equal(scaled(sp.S.Zero), 0, r"$a = 0$: the zero row maps to 0 ($\epsilon > 0$)", aggregates=RMS_AGGREGATES),
        Fact(r"\mathrm{RMS}_0(x + c\mathbf{1}) \ne \mathrm{RMS}_0(x):\ x = (1,-1),\ c = 1",
             "no shift invariance: (2, 0)/sqrt(2) differs from (1, -1)",
             lambda: _rms_values([2, 0], 0) != _rms_values([1, -1], 0)),
    ))


def _rms_values(row: list, epsilon) -> list:
    width = len(row)
    values = {**dict(zip(concrete_row(width), map(sp.Rational, row), strict=True)), eps: sp.Rational(epsilon)}
    unit = expressions.unit_weight(expressions.RMS_DEFINITION)
    return [sp.nsimplify(sp.simplify(concrete(unit.subs(i, a), width).subs(values))) for a in range(1, width + 1)]


def _gradient_identities() -> Derivation:
    dx = expressions.vjp_x("rms")
    return Derivation((
        Equal(row_sum(x[j] * dx, j), eps / (ms + eps) * row_sum(gamma[j] * dy[j] * x[j] / r, j),
              r"$x\cdot\partial L/\partial x = \frac{\epsilon}{q+\epsilon}\sum_j\gamma_j\partial L/\partial\gamma_j$",
              aggregates=RMS_AGGREGATES),
        Equal(expressions.vjp_weight("rms"), dy[j] * x[j] / r, r"$\partial L/\partial\gamma_j = g_j x_j/r$ per row",
              aggregates=RMS_AGGREGATES),
        Fact(r"\sum_j \partial L/\partial x_j \ne 0\ \text{in general: } x = (1,2),\ g = (1,0),\ \epsilon = 0",
             "unlike LN, RMSNorm's input gradient has no zero row sum",
             lambda: sp.simplify(_row_sum_of_gradient([1, 2], [1, 0])) != 0),
    ))


def _row_sum_of_gradient(row: list, upstream: list) -> sp.Expr:
    width = len(row)
    expr = expressions.unit_weight(expressions.vjp_x("rms")).subs({d: width, eps: 0})
    values = {ms: sp.Rational(sum(a * a for a in row), width)}
    total = sp.S.Zero
    for b in range(1, width + 1):
        entry = expr.subs(j, b).doit()
        entry = entry.subs({x[n + 1]: row[n] for n in range(width)})
        entry = entry.subs({dy[n + 1]: upstream[n] for n in range(width)})
        total += entry.subs(values)
    return total


def _mean_stability() -> Derivation:
    return Derivation((
        Equal(row_mean(expressions.unit_weight(expressions.RMS_DEFINITION).subs(i, k)), row_mean(x[k]) / r,
              r"the output mean is $\mu/r$: it follows the input mean", aggregates=RMS_AGGREGATES),
        Fact(r"x = (1, 2),\ \epsilon = 0:\ \mathrm{mean}(y) = 3/\sqrt{10} \ne 0",
             "witness: RMSNorm does not centre", lambda: sum(_rms_values([1, 2], 0)) / 2 == 3 / sp.sqrt(10)),
    ))


def _variance_insensitivity() -> Derivation:
    y_k = x[k] / r
    return Derivation((
        Equal(row_mean(y_k**2), ms / (ms + eps), r"the mean square of the output is $q/(q+\epsilon)$",
              aggregates=RMS_AGGREGATES),
        Equal(sp.diff(ms / (ms + eps), ms), eps / (ms + eps) ** 2, r"its sensitivity to $q$: the LN formula with "
              r"$\sigma^2 \to q$"),
        Fact(r"x = (1,1),\ \epsilon = 0:\ \mathrm{Var}(y) = 0;\ x = (0,2):\ \mathrm{Var}(y) = 1/2",
             "witness: the variance of the output depends on the input mean, not only on eps",
             lambda: _variance(_rms_values([1, 1], 0)) == 0 and _variance(_rms_values([0, 2], 0)) == sp.Rational(1, 2)),
    ))


def _variance(values: list) -> sp.Expr:
    mean = sum(values) / len(values)
    return sp.simplify(sum((a - mean) ** 2 for a in values) / len(values))


SEED_002 = "RMSNorm drops the mean: y = gamma * x / sqrt(mean(x^2) + eps) (torch.nn.RMSNorm)."

CLAIMS = (
    Claim("rms.jacobian", "Jacobian of RMSNorm", "002", SEED_002,
          r"$\partial y_i/\partial x_j = \frac{\gamma_i}{r}(\delta_{ij} - \frac{\hat{x}_i\hat{x}_j}{d})$, "
          r"$\partial y_i/\partial\gamma_j = \delta_{ij}\hat{x}_i$, $r = \sqrt{q+\epsilon}$, $q = \frac1d\sum x_k^2$, "
          r"$\hat{x} = x/r$.", (r"$q + \epsilon > 0$",), "holds", r"Derived for every $d$.", _jacobian),
    Claim("rms.spectral_norm", "Spectral norm of the RMSNorm Jacobian", "000",
          "(LN's statement, transferred) ||J||_2 = 1/sqrt(sigma^2+eps) <= 1/sqrt(eps).",
          r"For $\gamma = 1$: eigenvalue $\epsilon/r^3$ on $x$ and $1/r$ on $x^\perp$; $\|J\|_2 = 1/r$ for "
          r"$d \ge 2$, $\epsilon/r^3$ for $d = 1$; always $\le 1/\sqrt{\epsilon}$ (attained at $x = 0$). "
          r"With $\gamma$: $\le\max_i|\gamma_i|/\sqrt{\epsilon}$.",
          (r"$q + \epsilon > 0$", r"the bound needs $\epsilon > 0$"), "holds only when",
          r"With $\sigma^2$ replaced by the mean square $q$ the equality holds for $d \ge 2$; for $d = 1$ the norm "
          r"is $\epsilon/(x^2+\epsilon)^{3/2}$.", _spectral_norm),
    Claim("rms.affine", "RMSNorm of a scaled row", "003",
          "Per-step normalization makes the model insensitive to uniform scaling and shifting.",
          r"$\mathrm{RMS}_\epsilon(ax) = \mathrm{sign}(a)\mathrm{RMS}_{\epsilon/a^2}(x)$ for $a \ne 0$, 0 for $a = 0$; "
          r"no invariance to shifts.", (r"$q + \epsilon/a^2 > 0$",), "holds only when",
          r"Scaling as for LN (with $\epsilon/a^2$ and the sign); shifts are not removed (witness $x = (1,-1)$, "
          r"$c = 1$).", _affine),
    Claim("rms.gradient_identities", "Gradient identities of RMSNorm", "000",
          "(LN's statement, transferred) the gradient couples all features.",
          r"$x\cdot\partial L/\partial x = \frac{\epsilon}{q+\epsilon}\sum_j\gamma_j\partial L/\partial\gamma_j$; "
          r"$\partial L/\partial\gamma_j = \sum_{\text{rows}} g_j x_j/r$; the row sum of $\partial L/\partial x$ is "
          r"not 0 in general.", (r"$q + \epsilon > 0$",), "holds",
          r"The scale identity carries over; the zero row sum of LN does not.", _gradient_identities),
    Claim("rms.mean_stability", "Mean stability, for RMSNorm", "000",
          "(LN's statement, transferred) the output mean is always beta.",
          r"The output mean is $\gamma\mu/r$ (scalar $\gamma$): it follows the input mean.",
          (r"$q + \epsilon > 0$",), "fails",
          r"RMSNorm does not centre: witness $x = (1,2)$, $\epsilon = 0$ gives mean $3/\sqrt{10}$.", _mean_stability),
    Claim("rms.variance_insensitivity", "Variance insensitivity, for RMSNorm", "000",
          "(LN's statement, transferred) Var(y) = sigma^2/(sigma^2+eps), insensitive to the input variance.",
          r"The mean square of the output is $q/(q+\epsilon)$ (sensitivity $\epsilon/(q+\epsilon)^2$); its variance "
          r"is $\sigma^2/(q+\epsilon)$, which depends on the input mean.", (r"$q + \epsilon > 0$",), "fails",
          r"For the variance the statement fails (witness: $(1,1)$ gives 0, $(0,2)$ gives $1/2$); "
          r"it holds for the mean "
          r"square, with $\sigma^2 \to q$.", _variance_insensitivity),
)
