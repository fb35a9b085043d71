"""Inverted dropout feeding a norm: the variance bias of seed 003, the mask's laws that the statistical tests
use (properties/bounds/dropout_statistics.py), and the contracts at the edges (p = 0, p = 1, seeds, gradient).

dropout.variance_bias, as a witness (tests/test_proofs_doctests.py runs it): the seed's bias p(d-1)/(d(1-p)) (v + mu^2)
is exact with population variances and wrong with unbiased ones (x = (1, 3), p = 1/2, every mask of the row, exactly):

>>> from fractions import Fraction
>>> from statistics import mean, pvariance, variance
>>> x, p = (1, 3), Fraction(1, 2)
>>> outputs = [[xi * mi / (1 - p) for xi, mi in zip(x, mask)] for mask in itertools.product((0, 1), repeat=2)]
>>> bias = p * (2 - 1) / (2 * (1 - p))
>>> [str(mean(var_of(z) for z in outputs) - var_of(x)) for var_of in (pvariance, variance)]
['5/2', '5']
>>> [str(bias * (var_of(x) + mean(x) ** 2)) for var_of in (pvariance, variance)]
['5/2', '3']
"""

from __future__ import annotations

import itertools

import numpy as np
import sympy as sp

from proofs import expressions
from proofs.algebra import concrete_row, d, delta, dy, i, j, k, l, m, mu, p, row_mean, row_sum, var, x
from proofs.claims.base import Claim, no_derivation
from proofs.derivation import Derivation, Equal, Fact, is_zero

SEED_RATE = "Dropout zeroes neurons with probability p."
SEED_BIAS = ("After inverted dropout, the expected mean of the vector passed to LN equals the original mean mu_x, but "
             "its expected variance is systematically overestimated; the bias is p(d-1)/(d(1-p)) (v_x + mu_x^2).")
z_k = x[k] * m[k] / (1 - p)
q = 1 - p
rho = sp.Symbol("rho", real=True)  # correlation of two mask bits (an alternative)
E = expressions.MaskExpectation
E_fixed = expressions.FixedCountExpectation
MEAN_Z_SQ = row_sum(row_sum(x[k] * x[l] * m[k] * m[l] / (1 - p) ** 2, l), k) / d**2
IID_BIAS = p * (d - 1) / (d * (1 - p)) * (var + mu**2)
FIXED_COUNT_BIAS = p / (1 - p) * ((d - 2) / (d - 1) * var + mu**2)


def _masks(width: int):
    """Every 0/1 mask of the width, with its probability under iid Bernoulli(1-p) bits."""
    for mask in itertools.product((0, 1), repeat=width):
        yield mask, sp.Mul(*[q if kept else p for kept in mask])


def _population_variance(values: list) -> sp.Expr:
    mean = sum(values) / len(values)
    return sum((a - mean) ** 2 for a in values) / len(values)


def _dropped_variance(row: list, mask: tuple, keep: sp.Expr = q) -> sp.Expr:
    return _population_variance([a * kept / keep for a, kept in zip(row, mask, strict=True)])


def enumerated_bias(width: int, unbiased: bool = False) -> sp.Expr:
    """E_m[Var(z)] - Var(x) by summing over all 2^width masks with their probabilities."""
    row = concrete_row(width)
    scale = sp.Rational(width, width - 1) if unbiased else 1
    expected = sum(probability * _dropped_variance(row, mask) for mask, probability in _masks(width))
    return sp.factor(scale * (expected - _population_variance(row)))


def _row_values(width: int) -> dict:
    row = concrete_row(width)
    mean = sum(row) / width
    return {d: width, mu: mean, var: _population_variance(row)}


def _fixed_count_enumerated(width: int, kept: int) -> bool:
    """E[Var(z)] - Var(x) over the C(width, kept) equally likely kept sets is FIXED_COUNT_BIAS, p = 1 - kept/width."""
    row, keep = concrete_row(width), sp.Rational(kept, width)
    subsets = [mask for mask, _ in _masks(width) if sum(mask) == kept]
    expected = sum(_dropped_variance(row, mask, keep) for mask in subsets) / len(subsets)
    formula = FIXED_COUNT_BIAS.subs(_row_values(width)).subs(p, 1 - keep)
    return is_zero(expected - _population_variance(row) - formula)


def _within_blocks(row: list, k_: int) -> sp.Expr:
    """sum over blocks B of k_ consecutive elements of sum_{a != b in B} x_a x_b."""
    blocks = [row[start:start + k_] for start in range(0, len(row), k_)]
    return sum(sum(block) ** 2 - sum(a**2 for a in block) for block in blocks)


def _blocks_enumerated(width: int, k_: int) -> bool:
    """Blocks of k_ elements sharing one Bernoulli(1-p) draw: E[Var(z)] - Var(x) = IID_BIAS - p/((1-p) d^2) C."""
    row = concrete_row(width)
    expected = sum(probability * _dropped_variance(row, tuple(b for b in blocks for _ in range(k_)))
                   for blocks, probability in _masks(width // k_))
    formula = IID_BIAS.subs(_row_values(width)) - p / ((1 - p) * width**2) * _within_blocks(row, k_)
    return is_zero(expected - _population_variance(row) - formula)


def _formula_at(width: int, unbiased: bool = False) -> sp.Expr:
    row = concrete_row(width)
    mean = sum(row) / width
    formula = expressions.dropout_variance_bias() * (sp.Rational(width, width - 1) if unbiased else 1)
    return formula.subs({d: width, mu: mean, var: _population_variance(row)})


def _variance_bias() -> Derivation:
    bias, mean_z_sq = IID_BIAS, MEAN_Z_SQ
    return Derivation((
        Equal(E(row_mean(z_k)), mu,
              r"$E[m_k] = 1-p$: the expected mean of $z$ is $\mu$ (seed: correct)"),
        Equal(E(row_mean(z_k**2)), (var + mu**2) / (1 - p),
              r"$m_k^2 = m_k$: $E[\frac1d\sum z_k^2] = \frac{\sigma^2+\mu^2}{1-p}$"),
        Equal(E(mean_z_sq), mu**2 + p * (var + mu**2) / (d * (1 - p)),
              r"$E[m_k m_l] = (1-p)^2 + p(1-p)\delta_{kl}$: $E[\bar z^2]$"),
        Equal(E(row_mean(z_k**2) - mean_z_sq) - var, bias,
              r"$E[\mathrm{Var}(z)] - \mathrm{Var}(x)$ with population variances: the seed's formula"),
        Fact(r"\text{all } 2^d \text{ masks, exact: } d = 1, 2, 3, 4",
             "enumeration with symbolic x and p agrees with the formula",
             lambda: all(sp.simplify(enumerated_bias(n) - _formula_at(n)) == 0 for n in range(1, 5))),
        Equal(sp.factor(bias * d / (d - 1)), p * (var + mu**2) / (1 - p),
              r"with unbiased variances ($\frac{d}{d-1}\sigma^2$) the bias is $\frac{p}{1-p}(\sigma^2+\mu^2) = "
              r"\frac{p}{1-p}(\frac{d-1}{d}v_u + \mu^2)$"),
        Fact(r"\text{unbiased, } x = (1,3),\ p = \tfrac12:\ \text{bias } 5,\ \text{seed's formula with } v_u:\ 3",
             "enumeration for d = 2 and d = 3 confirms the unbiased form; the seed's formula needs the population "
             "variance", _unbiased_witness),
        *_alternative_biases(),
    ))


def _alternative_biases() -> tuple:
    """The variance bias of masks a kernel might really draw: the test's power against them (dropout_statistics)."""
    return (
        Equal(E_fixed(row_mean(z_k**2) - MEAN_Z_SQ) - var, FIXED_COUNT_BIAS,
              r"a fixed count per row ($(1-p)d$ kept, sampling without replacement): $E[m_k m_l] = "
              r"(1-p)^2 - \frac{p(1-p)}{d-1} + \frac{p(1-p)d}{d-1}\delta_{kl}$"),
        Equal(FIXED_COUNT_BIAS - IID_BIAS, p / ((1 - p) * d) * (mu**2 - var / (d - 1)),
              r"its effect against iid masks: $\frac{p}{(1-p)d}(\mu^2 - \frac{\sigma^2}{d-1})$ (rows with a mean)"),
        Fact(r"\text{fixed count, all kept sets: } (d, (1-p)d) = (3, 1), (3, 2), (4, 1), (4, 2), (5, 2)",
             "enumeration with symbolic x agrees with the fixed-count formula",
             lambda: all(_fixed_count_enumerated(w, n) for w, n in ((3, 1), (3, 2), (4, 1), (4, 2), (5, 2)))),
        Fact(r"\text{blocks of } k: \ E[\mathrm{Var}(z)] - \mathrm{Var}(x) = \frac{p(d-1)}{d(1-p)}(\sigma^2+\mu^2) - "
             r"\frac{p}{(1-p)d^2}\sum_B \sum_{a \ne b \in B} x_a x_b,\ (d, k) = (4, 2), (4, 4), (6, 3)",
             r"enumeration over the $2^{d/k}$ block masks with symbolic $x$ and $p$ agrees; a constant row $c$ gives "
             r"the effect $-p(k-1)c^2/((1-p)d)$",
             lambda: all(_blocks_enumerated(w, b) for w, b in ((4, 2), (4, 4), (6, 3)))),
    )


def _unbiased_witness() -> bool:
    for width in (2, 3):
        if sp.simplify(enumerated_bias(width, unbiased=True) - _formula_at(width, unbiased=True)) != 0:
            return False
    values = {x[1]: 1, x[2]: 3, p: sp.Rational(1, 2)}
    seed_with_unbiased = (p * (d - 1) / (d * (1 - p)) * (sp.Rational(2) + mu**2)).subs({d: 2, mu: 2}).subs(values)
    return enumerated_bias(2, unbiased=True).subs(values) == 5 and seed_with_unbiased == 3


def _values() -> Derivation:
    return Derivation((
        Equal(z_k.subs(m[k], 0), 0, r"a dropped element is 0"),
        Equal(z_k.subs(m[k], 1), x[k] / (1 - p), r"a kept element is $x_k/(1-p)$"),
    ))


def _keep_rate() -> Derivation:
    kept = row_mean(m[k])
    kept_sq = row_sum(row_sum(m[k] * m[l], l), k) / d**2
    return Derivation((
        Equal(E(kept), 1 - p, r"the expected kept fraction is $1-p$"),
        Equal(E(kept_sq) - (1 - p) ** 2, p * (1 - p) / d,
              r"its variance is $p(1-p)/d$: the count kept is Binomial$(d, 1-p)$"),
    ))


def _count_law_enumerated(width: int) -> bool:
    """P(sum m = j) over the 2^width masks is binomial(width, j) (1-p)^j p^(width-j)."""
    law = [sp.S.Zero] * (width + 1)
    for mask, probability in _masks(width):
        law[sum(mask)] += probability
    return all(is_zero(law[n] - sp.binomial(width, n) * q**n * p ** (width - n)) for n in range(width + 1))


def _block_count_variance(width: int, k_: int) -> bool:
    """Blocks of k_ bits sharing one draw: E[(K - d(1-p))^2] = k d p (1-p)."""
    second = sum(probability * (k_ * sum(blocks) - width * q) ** 2 for blocks, probability in _masks(width // k_))
    return is_zero(second - k_ * width * p * q)


def _count_dispersion(expectation: type[sp.Function]) -> sp.Expr:
    """E[(sum_k m_k - d(1-p))^2] written with a double row sum (the two factors share the mask)."""
    return expectation(row_sum(row_sum(m[k] * m[l], l), k) - 2 * d * q * row_sum(m[k]) + d**2 * q**2)


def _mask_distribution() -> Derivation:
    return Derivation((
        Fact(r"P\left(\textstyle\sum_k m_k = n\right) = \binom{d}{n}(1-p)^n p^{d-n},\ d = 1, \dots, 6",
             r"the kept count of a row is Binomial$(d, 1-p)$: all $2^d$ masks enumerated, symbolic $p$",
             lambda: all(_count_law_enumerated(w) for w in range(1, 7))),
        Equal(_count_dispersion(E), d * p * q, r"its variance is $dp(1-p)$: $(K - d(1-p))^2/(dp(1-p))$ has mean 1"),
        Equal(_count_dispersion(E_fixed), 0, r"a fixed count per row: the dispersion is 0 ($pd$ an integer)"),
        Fact(r"\text{blocks of } k:\ E[(K - d(1-p))^2] = k\,dp(1-p),\ (d, k) = (4, 2), (4, 4), (6, 3), (8, 4)",
             "k bits sharing one draw: K = k Binomial(d/k, 1-p), the dispersion k times H0's",
             lambda: all(_block_count_variance(w, b) for w, b in ((4, 2), (4, 4), (6, 3), (8, 4)))),
    ))


AGREE = m[i] * m[j] + (1 - m[i]) * (1 - m[j])


def _pairs_enumerated(pairs: int) -> bool:
    """The number of agreeing pairs among disjoint pairs of iid bits is Binomial(pairs, p^2 + (1-p)^2)."""
    law = [sp.S.Zero] * (pairs + 1)
    for mask, probability in _masks(2 * pairs):
        law[sum(mask[2 * n] == mask[2 * n + 1] for n in range(pairs))] += probability
    rate = p**2 + q**2
    return all(is_zero(law[n] - sp.binomial(pairs, n) * rate**n * (1 - rate) ** (pairs - n)) for n in range(pairs + 1))


def _independence() -> Derivation:
    return Derivation((
        Equal(E(AGREE), p**2 + q**2, r"two distinct bits ($i \ne j$) agree with probability $p^2 + (1-p)^2$",
              given={delta(i, j): 0}),
        Fact(r"\#\{n : m_{2n} = m_{2n+1}\} \sim \mathrm{Binomial}(N, p^2 + (1-p)^2),\ N = 1, 2, 3",
             "disjoint pairs are independent: the count of agreeing pairs is binomial (enumerated)",
             lambda: all(_pairs_enumerated(n) for n in (1, 2, 3))),
        Equal(1 - 2 * q + 2 * (q**2 + rho * p * q), p**2 + q**2 + 2 * rho * p * q,
              r"bits with correlation $\rho$ ($E[m_i m_j] = (1-p)^2 + \rho p(1-p)$) agree with probability "
              r"$p^2 + (1-p)^2 + 2\rho p(1-p)$; bits of one shared block always agree"),
    ), notes=(r"Rows: the kept count of two rows is Binomial$(2d, 1-p)$ when they are independent (the kept-count "
              r"law with width $2d$); a row repeating another's bits doubles its dispersion.",))


def _seeds() -> Derivation:
    return Derivation((
        Equal(E(AGREE), p**2 + q**2, r"bit $i$ of seed $s$ and of seed $s'$, independent: they agree with probability "
              r"$p^2 + (1-p)^2$, so the agreeing count of $n$ elements is Binomial$(n, p^2+(1-p)^2)$",
              given={delta(i, j): 0}),
        Equal(1 - (p**2 + q**2), 2 * p * q, r"a kernel ignoring the seed agrees everywhere: probability "
              r"$(1 - 2p(1-p))^n$ under independence"),
    ))


def _zero_times_infinity_is_nan() -> bool:
    with np.errstate(invalid="ignore"):
        return bool(np.isnan(np.float64(0.0) * np.float64(np.inf)))


def _edge_probabilities() -> Derivation:
    return Derivation((
        Equal(z_k.subs({m[k]: 1}).subs(p, 0), x[k], r"$p = 0$: $P(m_k = 0) = p = 0$, every bit kept, $z = x$ exactly"),
        Equal(z_k.subs(m[k], 0), 0, r"$p = 1$: $P(m_k = 1) = 1 - p = 0$, every bit dropped, $z = 0$"),
        Fact(r"0 \cdot \mathrm{fl}(1/(1-1)) = 0 \cdot \infty = \mathrm{NaN}",
             "a kernel scaling by the float 1/(1-p) at p = 1 returns NaN: the contract defines the output 0",
             _zero_times_infinity_is_nan),
        Equal(sp.diff(z_k.subs({m[k]: 1}).subs(p, 0), x[k]), 1,
              r"the backward of $p = 0$: $\partial z_k/\partial x_k = 1$, $\partial L/\partial x = g$ exactly"),
        Equal(sp.diff(z_k.subs(m[k], 0), x[k]), 0,
              r"the backward of $p = 1$: $\partial z_k/\partial x_k = 0$, $\partial L/\partial x = 0$ "
              r"(the same $0 \cdot \infty$ where a backward scales by the float $1/(1-p)$)"),
    ))


def _gradient() -> Derivation:
    return Derivation((
        Equal(sp.diff(z_k, x[l]), m[k] * delta(k, l) / (1 - p), r"$\partial z_k/\partial x_l = m_k\delta_{kl}/(1-p)$"),
        Equal(row_sum(dy[k] * sp.diff(z_k, x[l])), dy[l] * m[l] / (1 - p),
              r"the vector-Jacobian product: $\partial L/\partial x = g \odot m/(1-p)$ with the forward's mask $m$"),
    ))



CLAIMS = (
    Claim("dropout.variance_bias", "Variance bias of inverted dropout before a norm", "003", SEED_BIAS,
          r"$E_m[\mathrm{Var}(z)] - \mathrm{Var}(x) = \frac{p(d-1)}{d(1-p)}(\sigma^2 + \mu^2)$ "
          r"for $z = x\odot m/(1-p)$, "
          r"$m_i$ iid Bernoulli$(1-p)$, population variances; $E_m[\bar z] = \mu$.",
          (r"$0 < p < 1$", r"population variance (divide by $d$)"), "holds only when",
          r"Exact with population variances. With unbiased variances the bias is $\frac{p}{1-p}(\sigma^2+\mu^2)$; "
          r"the seed's formula with $v$ unbiased is wrong (witness $x = (1,3)$, $p = 1/2$: 5, not 3).",
          _variance_bias),
    Claim("dropout.values", "Values of inverted dropout", "003", "Dropout sets some features to zero.",
          r"Every output is $0$ or $x_i/(1-p)$ (within the rounding of the scaling).", (r"$0 \le p < 1$",), "holds",
          r"By definition.", _values),
    Claim("dropout.keep_rate", "Fraction of kept elements", "003", SEED_RATE,
          r"The kept count of $n$ elements is Binomial$(n, 1-p)$: mean $1-p$, variance $p(1-p)/n$ of the fraction.",
          (r"$0 < p < 1$", r"independent masks"), "holds", r"Checked by an exact binomial test.", _keep_rate),
    Claim("dropout.mask_distribution", "The kept count of a row", "003", SEED_RATE,
          r"The kept count $K$ of a row of $d$ elements is Binomial$(d, 1-p)$; $(K - d(1-p))^2/(dp(1-p))$ has mean 1, "
          r"0 for a fixed count per row (sampling without replacement), $k$ for blocks of $k$ elements sharing a draw.",
          (r"$0 < p < 1$", r"iid Bernoulli$(1-p)$ bits"), "holds",
          r"Checked by a two-sided Chernoff test of the dispersion of per-row counts over many rows.",
          _mask_distribution),
    Claim("dropout.independence", "Mask bits are independent", "003", SEED_RATE,
          r"Distinct mask bits agree with probability $p^2 + (1-p)^2$; the agreeing count of $N$ disjoint pairs "
          r"(neighbours in a row, one column of two rows) is Binomial$(N, p^2 + (1-p)^2)$.",
          (r"$0 < p < 1$", r"iid Bernoulli$(1-p)$ bits"), "holds",
          r"Checked by exact binomial tests of neighbours and rows, and the dispersion of two-row counts.",
          _independence),
    Claim("dropout.seeds", "Different seeds, independent masks", "", "(contract)",
          r"Masks of seeds $s$ and $s'$ (here $s+1$, $s \oplus 1$, $s+2$) are independent: their agreeing count of "
          r"$n$ elements is Binomial$(n, p^2+(1-p)^2)$.", (r"$0 < p < 1$",), "contract", "", _seeds),
    Claim("dropout.edge_probabilities", "p = 0 and p = 1", "", "(contract)",
          r"$p = 0$ returns $x$ exactly and its backward $g$; $p = 1$ returns zeros and its backward zeros (no NaN, "
          r"no inf); $p$ outside $[0, 1]$ is not dropout.", (r"$p \in \{0, 1\}$",), "contract", "",
          _edge_probabilities),
    Claim("dropout.gradient", "The gradient uses the forward's mask", "", "(contract)",
          r"$\partial L/\partial x = g \odot m/(1-p)$ with the mask $m$ of the same forward call, element by element.",
          (r"$0 \le p < 1$",), "contract", "", _gradient),
    Claim("dropout.determinism", "Same seed, same mask", "", "(contract)",
          r"Two calls with the same seed, input and $p$ return the same output, at any size.", (), "contract", "",
          no_derivation),
    Claim("dropout.layout_invariance", "A non-contiguous input gets a mask with the same law", "", "(contract)",
          r"A transposed or sliced $x$ gets iid Bernoulli$(1-p)$ bits (the statistical tests of the mask pass on it); "
          r"its output need not equal the contiguous input's; with an upstream gradient strided, transposed or "
          r"expanded (stride 0), $dL/dx$ is still claim dropout.gradient's.", (), "contract", "", no_derivation),
    Claim("dropout.inputs_unmodified", "Dropout leaves its input alone", "", "(contract)",
          r"The input tensor is never written.", (), "contract", "", no_derivation),
)
