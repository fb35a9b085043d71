"""Symbols of the derivations and the index-notation algebra they are checked with.

A row is written in index notation: ``x[i]`` is the i-th element of a row of width ``d`` (indices
run over 1..d), ``Sum(f(k), (k, 1, d))`` a row reduction. :func:`reduce_sums` applies, bottom up,
the rules every step relies on, each a textbook identity of finite sums over 1..d:

    linearity          sum_k (a f_k + g_k) = a sum_k f_k + sum_k g_k       (a free of k)
    constants          sum_k a = d a                                       (a free of k)
    delta collapse     sum_k delta_{jk} f_k = f_j                          (1 <= j <= d)
    named reductions   sum_k x_k = d mu,  sum_k x_k^2 = d (sigma^2 + mu^2), ... (the ``aggregates``)

and leaves any other sum in place with a canonical dummy index, so equal sums compare equal.
"""

from __future__ import annotations

from collections.abc import Mapping

import sympy as sp

# --- the row and its parameters --------------------------------------------------------------
x = sp.IndexedBase("x", real=True)
gamma = sp.IndexedBase("gamma", real=True)
beta = sp.IndexedBase("beta", real=True)
dy = sp.IndexedBase("g", real=True)  # upstream gradient dL/dy
v = sp.IndexedBase("v", real=True)  # a direction (eigenvector candidate)
m = sp.IndexedBase("m", real=True)  # a dropout mask
c = sp.IndexedBase("c", real=True)  # the centred row x - mu

i, j, k, l = sp.symbols("i j k l", integer=True, positive=True)
K = sp.Symbol("kappa_index", integer=True, positive=True)  # the canonical dummy of a left-over sum
d = sp.Symbol("d", integer=True, positive=True)
eps = sp.Symbol("epsilon", nonnegative=True)
mu = sp.Symbol("mu", real=True)
var = sp.Symbol("sigma^2", nonnegative=True)  # population variance
ms = sp.Symbol("q", nonnegative=True)  # mean square, mean(x^2)
p = sp.Symbol("p", positive=True)  # dropout probability, 0 < p < 1

delta = sp.KroneckerDelta


def row_sum(body: sp.Expr, index: sp.Symbol = k) -> sp.Expr:
    """sum_{index=1}^{d} body."""
    return sp.Sum(body, (index, 1, d))


def row_mean(body: sp.Expr, index: sp.Symbol = k) -> sp.Expr:
    """(1/d) sum_{index=1}^{d} body."""
    return row_sum(body, index) / d


# The reductions a LayerNorm row is described by, and their definitions.
MEAN_DEF = row_mean(x[k])
VAR_DEF = row_mean((x[l] - MEAN_DEF) ** 2, l)
MS_DEF = row_mean(x[k] ** 2)

LN_AGGREGATES: dict[sp.Expr, sp.Expr] = {x[K]: d * mu, x[K] ** 2: d * (var + mu**2)}
RMS_AGGREGATES: dict[sp.Expr, sp.Expr] = {x[K] ** 2: d * ms}
CENTRED_AGGREGATES: dict[sp.Expr, sp.Expr] = {c[K]: 0, c[K] ** 2: d * var}


def reduce_sums(expr: sp.Expr, aggregates: Mapping[sp.Expr, sp.Expr] = LN_AGGREGATES) -> sp.Expr:
    """Apply the finite-sum rules of the module docstring, innermost sums first."""
    if not expr.has(sp.Sum):
        return expr
    if isinstance(expr, sp.Sum):
        reduced = reduce_sums(expr.function, aggregates)
        for index, lower, upper in expr.limits:  # innermost first
            if (lower, upper) != (1, d):
                raise ValueError(f"only sums over the whole row 1..d are reduced, not {expr}")
            reduced = _reduce_row_sum(reduced, index, aggregates)
        return reduced
    return expr.func(*[reduce_sums(arg, aggregates) for arg in expr.args])


def _reduce_row_sum(body: sp.Expr, index: sp.Symbol, aggregates: Mapping[sp.Expr, sp.Expr]) -> sp.Expr:
    total = sp.S.Zero
    for term in sp.Add.make_args(sp.expand(body)):
        const, dependent = term.as_independent(index, as_Add=False)
        if dependent == 1:
            total += const * d
            continue
        collapsing = [f for f in sp.Mul.make_args(dependent) if isinstance(f, sp.KroneckerDelta) and f.has(index)]
        if collapsing:
            other = next(a for a in collapsing[0].args if a != index)
            total += const * (dependent / collapsing[0]).subs(index, other)
            continue
        if index != K and dependent.has(K):
            raise ValueError(f"nested left-over sums are not reduced: {dependent}")
        canonical = dependent.xreplace({index: K})
        total += const * aggregates.get(canonical, sp.Sum(canonical, (K, 1, d)))
    return total


def concrete(expr: sp.Expr, width: int) -> sp.Expr:
    """The expression for a row of the given width: row sums written out over x[1..width]."""
    return expr.subs(d, width).doit()


def concrete_row(width: int, base: sp.IndexedBase = x) -> list[sp.Expr]:
    return [base[n] for n in range(1, width + 1)]
