"""The derived expressions, each computed once (cached) by SymPy from the definitions.

These are the results the derivations check step by step (proofs.claims) and the oracles compile
(proofs.oracles): the definitions of LN and RMSNorm are the only formulas written by hand; every
other expression here is obtained from them by differentiation, summation or expectation, and the
finite-sum rules of :mod:`proofs.algebra`.
"""

from __future__ import annotations

from functools import cache

import sympy as sp

from proofs.algebra import (
    CENTRED_AGGREGATES,
    LN_AGGREGATES,
    MEAN_DEF,
    MS_DEF,
    RMS_AGGREGATES,
    VAR_DEF,
    K,
    beta,
    c,
    d,
    dy,
    eps,
    gamma,
    i,
    j,
    k,
    l,
    m,
    ms,
    mu,
    p,
    reduce_sums,
    row_mean,
    row_sum,
    v,
    var,
    x,
)

# --- definitions (docs/ARCHITECTURE.md, "Conventions") ----------------------------------------
LN_SCALE = sp.sqrt(var + eps)  # s
RMS_SCALE = sp.sqrt(ms + eps)  # r

LN_DEFINITION = gamma[i] * (x[i] - MEAN_DEF) / sp.sqrt(VAR_DEF + eps) + beta[i]
RMS_DEFINITION = gamma[i] * x[i] / sp.sqrt(MS_DEF + eps)

def _named(expr: sp.Expr, kind: str) -> sp.Expr:
    """Replace the defining row sums by the named reductions (mu, sigma^2 or q)."""
    aggregates = LN_AGGREGATES if kind == "ln" else RMS_AGGREGATES
    return sp.simplify(reduce_sums(expr, aggregates))


@cache
def output(kind: str) -> sp.Expr:
    """y_i in the named reductions: gamma_i (x_i - mu)/sqrt(sigma^2+eps) + beta_i, or gamma_i x_i/sqrt(q+eps)."""
    return _named(LN_DEFINITION if kind == "ln" else RMS_DEFINITION, kind)


@cache
def jacobian(kind: str) -> sp.Expr:
    """dy_i/dx_j, differentiated from the definition through the row sums, then reduced."""
    definition = LN_DEFINITION if kind == "ln" else RMS_DEFINITION
    return _named(sp.diff(definition, x[j]), kind)


@cache
def weight_jacobian(kind: str) -> sp.Expr:
    """dy_i/dgamma_j."""
    return _named(sp.diff(LN_DEFINITION if kind == "ln" else RMS_DEFINITION, gamma[j]), kind)


@cache
def bias_jacobian() -> sp.Expr:
    """dy_i/dbeta_j (LN)."""
    return _named(sp.diff(LN_DEFINITION, beta[j]), "ln")


@cache
def vjp_x(kind: str) -> sp.Expr:
    """(dL/dx)_j = sum_i g_i dy_i/dx_j for an upstream gradient g = dL/dy."""
    aggregates = LN_AGGREGATES if kind == "ln" else RMS_AGGREGATES
    return sp.simplify(reduce_sums(row_sum(dy[i] * jacobian(kind), i), aggregates))


@cache
def vjp_weight(kind: str) -> sp.Expr:
    """(dL/dgamma)_j of one row = sum_i g_i dy_i/dgamma_j."""
    aggregates = LN_AGGREGATES if kind == "ln" else RMS_AGGREGATES
    return sp.simplify(reduce_sums(row_sum(dy[i] * weight_jacobian(kind), i), aggregates))


@cache
def vjp_bias() -> sp.Expr:
    """(dL/dbeta)_j of one row = sum_i g_i dy_i/dbeta_j."""
    return sp.simplify(reduce_sums(row_sum(dy[i] * bias_jacobian(), i)))


def unit_weight(expr: sp.Expr) -> sp.Expr:
    """The expression with gamma = 1 (every gamma_n replaced by 1)."""
    return expr.replace(lambda e: isinstance(e, sp.Indexed) and e.base == gamma, lambda e: sp.S.One)


def apply_jacobian(kind: str, vector: sp.Expr, aggregates: dict) -> sp.Expr:
    """(J w)_i = sum_j J_ij w_j for gamma = 1, w given as an expression in index j."""
    return sp.simplify(reduce_sums(row_sum(unit_weight(jacobian(kind)) * vector, j), aggregates))


@cache
def eigenvalues(kind: str) -> dict[str, sp.Expr]:
    """Eigenvalues of J (gamma = 1) on the directions 1 (LN), the normalized row, and their complement.

    Each is the ratio (J w)_i / w_i for the eigenvector w, computed by applying J.
    """
    if kind == "ln":
        centred = x[j] - mu
        perp_aggregates = {**LN_AGGREGATES, **{key: 0 for key in _perp_keys()}}
        return {
            "ones": sp.simplify(apply_jacobian("ln", sp.S.One, LN_AGGREGATES)),
            "row": sp.simplify(apply_jacobian("ln", centred, LN_AGGREGATES) / (x[i] - mu)),
            "perp": sp.simplify(apply_jacobian("ln", v[j], perp_aggregates) / v[i]),
        }
    perp_aggregates = {**RMS_AGGREGATES, **{key: 0 for key in _perp_keys()[1:]}}
    return {
        "row": sp.simplify(apply_jacobian("rms", x[j], RMS_AGGREGATES) / x[i]),
        "perp": sp.simplify(apply_jacobian("rms", v[j], perp_aggregates) / v[i]),
    }


def _perp_keys() -> tuple[sp.Expr, sp.Expr]:
    """sum_k v_k and sum_k x_k v_k, in the canonical dummy: both 0 for v perpendicular to 1 and x."""
    return v[K], x[K] * v[K]


@cache
def normalized_variance() -> sp.Expr:
    """Population variance of xhat = (x - mu)/sqrt(sigma^2+eps), from its definition."""
    xhat_k = (x[k] - mu) / LN_SCALE
    mean_xhat = row_mean((x[l] - mu) / LN_SCALE, l)
    return sp.simplify(reduce_sums(row_mean(sp.expand((xhat_k - mean_xhat) ** 2))))


@cache
def dropout_variance_bias() -> sp.Expr:
    """E_m[Var(z)] - Var(x) for z = x m/(1-p), m_i iid Bernoulli(1-p), population variance.

    The expectation over masks is taken term by term from the two moments of the mask:
    E[m_k^2] = E[m_k] = 1-p and E[m_k m_l] = (1-p)^2 + p(1-p) delta_kl.
    """
    z2 = row_mean(x[k] ** 2 * m[k] ** 2 / (1 - p) ** 2)
    mean_z_squared = row_sum(row_sum(x[k] * x[l] * m[k] * m[l] / (1 - p) ** 2, l), k) / d**2
    expected = expectation_over_masks(z2 - mean_z_squared)
    return sp.factor(sp.simplify(reduce_sums(expected) - var))


def independent_pair(a: sp.Expr, b: sp.Expr) -> sp.Expr:
    """E[m_a m_b] of iid Bernoulli(1-p) mask bits: (1-p)^2 + p(1-p) delta_ab."""
    return (1 - p) ** 2 + p * (1 - p) * sp.KroneckerDelta(a, b)


def fixed_count_pair(a: sp.Expr, b: sp.Expr) -> sp.Expr:
    """E[m_a m_b] when exactly (1-p) d of the d bits are kept, the kept set uniform (sampling without
    replacement): (1-p)((1-p) d - 1)/(d - 1) for a != b, 1-p for a = b."""
    q = 1 - p
    return q**2 - p * q / (d - 1) + p * q * d / (d - 1) * sp.KroneckerDelta(a, b)


class MaskExpectation(sp.Function):
    """E_m[expr] over iid Bernoulli(1-p) masks, shown unevaluated; ``deferred()`` takes the expectation."""

    nargs = 1
    pair = staticmethod(independent_pair)
    label = "m"

    def deferred(self) -> sp.Expr:
        return expectation_over_masks(self.args[0], self.pair)

    def _latex(self, printer) -> str:
        return r"\mathbb{E}_{" + self.label + r"}\left[" + printer._print(self.args[0]) + r"\right]"


class FixedCountExpectation(MaskExpectation):
    """E over masks keeping exactly (1-p) d bits of the row, the kept set uniform (:func:`fixed_count_pair`)."""

    pair = staticmethod(fixed_count_pair)
    label = r"m,\ \sum m = (1-p)d"


def expectation_over_masks(expr: sp.Expr, pair=independent_pair) -> sp.Expr:
    """E over masks of an expression in which each term has at most two mask factors.

    Moments of the mask: m_a^2 = m_a (m_a is 0 or 1), E[m_a] = 1-p, E[m_a m_b] = ``pair(a, b)`` (by default
    iid Bernoulli(1-p) bits: (1-p)^2 + p(1-p) delta_ab).
    """
    if not expr.has(m):
        return expr
    if isinstance(expr, sp.Sum):
        return sp.Sum(expectation_over_masks(expr.function, pair), *expr.limits)
    expr = sp.expand(expr)
    if isinstance(expr, sp.Add):
        return sp.Add(*[expectation_over_masks(term, pair) for term in expr.args])
    factors = sp.Mul.make_args(expr)
    mask = [f for f in factors if f.has(m) and not isinstance(f, sp.Sum)]
    rest = sp.Mul(*[expectation_over_masks(f, pair) for f in factors if f not in mask])
    indices = [(f.base if f.is_Pow else f).indices[0] for f in mask]
    if len(mask) == 0:
        return rest
    if len(mask) == 1:
        return rest * (1 - p)
    if len(mask) == 2:
        return rest * pair(*indices)
    raise ValueError(f"moments beyond the second of the mask in {expr}")


def centred(expr: sp.Expr) -> sp.Expr:
    """The expression in the centred row c = x - mu (x_n = c_n + mu), whose sums are 0 and d sigma^2.

    The form the LN oracles evaluate: no sum of x is ever formed, so nothing cancels in float64.
    """
    shifted = expr.replace(lambda e: isinstance(e, sp.Indexed) and e.base == x, lambda e: c[e.indices[0]] + mu)
    return sp.simplify(reduce_sums(shifted, CENTRED_AGGREGATES))


@cache
def normalized_variance_sensitivity() -> sp.Expr:
    """d Var(xhat) / d sigma^2."""
    return sp.simplify(sp.diff(normalized_variance(), var))


LARGEST_WEIGHT = sp.Symbol("G", nonnegative=True)  # max_i |gamma_i|


@cache
def spectral_norm_bound() -> sp.Expr:
    """max_i |gamma_i| times the largest eigenvalue of J (gamma = 1) over all rows: its value at sigma^2 = 0."""
    return LARGEST_WEIGHT * eigenvalues("ln")["perp"].subs(var, 0)
