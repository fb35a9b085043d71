"""Exact (SymPy) checks on concrete rows that the Fact steps run: explicit Jacobians for d = 1..6, exact spectra,
witnesses. The numerical checks (float simulations) live in proofs/claims/numerical_checks.py."""

from __future__ import annotations

from functools import cache

import sympy as sp

from proofs import expressions
from proofs.algebra import MEAN_DEF, MS_DEF, VAR_DEF, concrete, concrete_row, d, eps, i, j, ms, mu, var

_ROOT = sp.Symbol("S", positive=True)


def zero_with_root(expr: sp.Expr, radicand: sp.Expr) -> bool:
    """expr == 0 where S = sqrt(radicand): the numerator, as a polynomial in S, reduced modulo S^2 - radicand."""
    target = sp.expand(radicand)

    def is_root(e: sp.Expr) -> bool:
        return e.is_Pow and e.exp.is_Rational and e.exp.q == 2 and sp.expand(e.base) == target

    numerator = sp.numer(sp.together(expr.replace(is_root, lambda e: _ROOT ** (2 * e.exp))))
    return sp.expand(sp.rem(sp.expand(numerator), _ROOT**2 - target, _ROOT)) == 0


def definition_and_stats(kind: str, width: int):
    """(definition, {statistic: its written-out row sum at this width}, the radicand sigma^2 + eps or q + eps)."""
    if kind == "ln":
        stats = {mu: concrete(MEAN_DEF, width), var: concrete(VAR_DEF, width)}
        return expressions.LN_DEFINITION, stats, stats[var] + eps
    stats = {ms: concrete(MS_DEF, width)}
    return expressions.RMS_DEFINITION, stats, stats[ms] + eps


FULL_CHECK_UP_TO = 4  # every entry for d <= 4; beyond, the diagonal and one off-diagonal entry


@cache
def jacobian_matches_for_width(kind: str, width: int) -> bool:
    """The derived J_ij equals d y_i / d x_j of the written-out row of this width, exactly.

    Every entry for width <= FULL_CHECK_UP_TO; for wider rows the entries (1, 1) and (1, 2), every other
    entry being one of these after a permutation of the features, under which the definitions are
    invariant (gamma, beta permuted alike).
    """
    definition, stats, radicand = definition_and_stats(kind, width)
    row = concrete_row(width)
    derived = expressions.jacobian(kind)
    rows = range(width) if width <= FULL_CHECK_UP_TO else range(1)
    columns = range(width) if width <= FULL_CHECK_UP_TO else range(min(width, 2))
    for a in rows:
        output = concrete(definition.subs(i, a + 1), width)
        for b in columns:
            entry = derived.subs({i: a + 1, j: b + 1, d: width}).subs(stats)
            if not zero_with_root(sp.diff(output, row[b]) - entry, radicand):
                return False
    return True


def scaled_jacobian(kind: str, row: list[sp.Rational], epsilon: sp.Expr) -> sp.Matrix:
    """s J (gamma = 1) of a concrete rational row: a rational matrix (s = sqrt(sigma^2 + eps) or sqrt(q + eps))."""
    width = len(row)
    values = dict(zip(concrete_row(width), row, strict=True))
    if kind == "ln":
        stats = {mu: concrete(MEAN_DEF, width).subs(values), var: concrete(VAR_DEF, width).subs(values)}
        scaled = sp.sqrt(var + eps) * expressions.unit_weight(expressions.jacobian(kind))
    else:
        stats = {ms: concrete(MS_DEF, width).subs(values)}
        scaled = sp.sqrt(ms + eps) * expressions.unit_weight(expressions.jacobian(kind))
    scaled = sp.powsimp(scaled, force=True)
    return sp.Matrix(width, width, lambda a, b: sp.cancel(
        scaled.subs({i: a + 1, j: b + 1, d: width}).subs(values).subs(stats).subs(eps, epsilon)))


def characteristic_polynomial(kind: str, row: list, epsilon: sp.Expr) -> sp.Expr:
    lam = sp.Symbol("lambda")
    return sp.factor(scaled_jacobian(kind, [sp.Rational(v) for v in row], epsilon).charpoly(lam).as_expr())
