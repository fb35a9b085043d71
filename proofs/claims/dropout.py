"""Inverted dropout feeding a norm: the variance bias of seed 003, and the mask's elementary laws."""

from __future__ import annotations

import itertools

import sympy as sp

from proofs import expressions
from proofs.algebra import concrete_row, d, k, l, m, mu, p, row_mean, row_sum, var, x
from proofs.claims.base import Claim
from proofs.derivation import Derivation, Equal, Fact

SEED_BIAS = ("After inverted dropout, the expected mean of the vector passed to LN equals the original mean mu_x, but "
             "its expected variance is systematically overestimated; the bias is p(d-1)/(d(1-p)) (v_x + mu_x^2).")
z_k = x[k] * m[k] / (1 - p)
E = expressions.MaskExpectation


def _population_variance(values: list) -> sp.Expr:
    mean = sum(values) / len(values)
    return sum((a - mean) ** 2 for a in values) / len(values)


def enumerated_bias(width: int, unbiased: bool = False) -> sp.Expr:
    """E_m[Var(z)] - Var(x) by summing over all 2^width masks with their probabilities."""
    row = concrete_row(width)
    scale = sp.Rational(width, width - 1) if unbiased else 1
    expected = sp.S.Zero
    for mask in itertools.product((0, 1), repeat=width):
        probability = sp.Mul(*[(1 - p) if kept else p for kept in mask])
        expected += probability * _population_variance([a * kept / (1 - p) for a, kept in zip(row, mask, strict=True)])
    return sp.factor(scale * (expected - _population_variance(row)))


def _formula_at(width: int, unbiased: bool = False) -> sp.Expr:
    row = concrete_row(width)
    mean = sum(row) / width
    formula = expressions.dropout_variance_bias() * (sp.Rational(width, width - 1) if unbiased else 1)
    return formula.subs({d: width, mu: mean, var: _population_variance(row)})


def _variance_bias() -> Derivation:
    bias = p * (d - 1) / (d * (1 - p)) * (var + mu**2)
    mean_z_sq = row_sum(row_sum(x[k] * x[l] * m[k] * m[l] / (1 - p) ** 2, l), k) / d**2
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
    ))


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


def _no_derivation() -> Derivation:
    return Derivation((), notes=("A contract of the implementation: checked by the property, nothing to derive.",))


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
          r"Every output is $0$ or $x_i/(1-p)$.", (r"$0 \le p < 1$",), "holds", r"By definition.", _values),
    Claim("dropout.keep_rate", "Fraction of kept elements", "003", "Dropout zeroes neurons with probability p.",
          r"The kept count of $n$ elements is Binomial$(n, 1-p)$: mean $1-p$, variance $p(1-p)/n$ of the fraction.",
          (r"$0 \le p < 1$", r"independent masks"), "holds", r"Checked by a binomial test.", _keep_rate),
    Claim("dropout.determinism", "Same seed, same mask", "", "(contract)",
          r"Two calls with the same seed, input and $p$ return the same output.", (), "contract", "", _no_derivation),
    Claim("dropout.inputs_unmodified", "Dropout leaves its input alone", "", "(contract)",
          r"The input tensor is never written.", (), "contract", "", _no_derivation),
)
