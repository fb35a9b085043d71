"""Fused residual add + norm (add + LayerNorm, add + RMSNorm) and dropout + add + norm.

The fused kernel takes a branch x and the residual z, returns h = x + z (the new residual, "residual_out")
and y = N(h) with N LayerNorm or RMSNorm. Its Jacobians follow from the norm's by the chain rule, and its
VJP has two upstream gradients, g = dL/dy and g^h = dL/dh: dL/dx = dL/dz = J_N(h)^T g + g^h.
With dropout on the branch (flash-attention's dropout_add_layer_norm), h = z + x * m / (1 - p).
"""

from __future__ import annotations

import itertools
from functools import cache

import sympy as sp

from proofs import expressions
from proofs.algebra import (
    LN_AGGREGATES,
    RMS_AGGREGATES,
    concrete,
    concrete_row,
    d,
    delta,
    dy,
    i,
    j,
    k,
    l,
    m,
    mu,
    p,
    row_mean,
    row_sum,
    var,
    x,
)
from proofs.claims import checks
from proofs.claims.base import Claim
from proofs.derivation import Derivation, Equal, Fact

z = sp.IndexedBase("z", real=True)  # the residual stream entering the block
gh = sp.IndexedBase("g^h", real=True)  # dL/d(residual_out)
E = expressions.MaskExpectation
NAMES = {"ln": "LayerNorm", "rms": "RMSNorm"}
EXPLICIT_WIDTHS = (1, 2, 3)


@cache
def explicit_jacobian_matches(kind: str, width: int) -> bool:
    """d y_i/d x_j = d y_i/d z_j = J_ij(h) for y = N(x + z) written out at this width, every entry, exactly."""
    definition, stats, radicand = checks.definition_and_stats(kind, width)
    xs, zs = concrete_row(width), concrete_row(width, z)
    added = {xs[n]: xs[n] + zs[n] for n in range(width)}
    derived = expressions.jacobian(kind)
    for a in range(width):
        output = concrete(definition.subs(i, a + 1), width).xreplace(added)
        for b in range(width):
            entry = derived.subs({i: a + 1, j: b + 1, d: width}).subs(stats).xreplace(added)
            for variable in (xs[b], zs[b]):
                if not checks.zero_with_root(sp.diff(output, variable) - entry, radicand.xreplace(added)):
                    return False
    return True


def _normalized(kind: str) -> sp.Expr:
    """hat h_j: (h_j - mu)/sqrt(sigma^2 + eps) (LN) or h_j/sqrt(q + eps) (RMS), in the named statistics of h."""
    return (x[j] - mu) / expressions.LN_SCALE if kind == "ln" else x[j] / expressions.RMS_SCALE


def _add_norm_jacobian(kind: str) -> Derivation:
    aggregates = LN_AGGREGATES if kind == "ln" else RMS_AGGREGATES
    jac = expressions.jacobian(kind)
    vjp = expressions.vjp_x(kind) + gh[j]
    return Derivation((
        Equal(sp.Derivative(x[i] + z[i], x[j]), delta(i, j),
              r"$h = x + z$: $\partial h_i/\partial x_j = \delta_{ij}$ (and the same for $z$): the residual path "
              r"is the identity"),
        Equal(sp.Derivative(x[i] + z[i], z[j]), delta(i, j), r"$\partial h_i/\partial z_j = \delta_{ij}$"),
        Equal(row_sum(jac.subs(j, k) * delta(k, j), k), jac,
              r"chain rule: $\partial y_i/\partial x_j = \sum_k J_{ik}(h)\,\delta_{kj} = J_{ij}(h)$, the norm's "
              r"Jacobian at $h$ (row statistics of $h$)", aggregates=aggregates),
        Fact(r"\partial y_i/\partial x_j = \partial y_i/\partial z_j = J_{ij}(x+z)\ \text{of the written-out rows, "
             r"every entry, } d = 1, 2, 3",
             "explicit differentiation of N(x + z), compared exactly with the derived Jacobian at h = x + z",
             lambda: all(explicit_jacobian_matches(kind, n) for n in EXPLICIT_WIDTHS)),
        Equal(row_sum(dy[i] * jac, i) + gh[j], vjp,
              r"VJP with both upstream gradients: $\partial L/\partial x_j = \sum_i g_i J_{ij}(h) + g^h_j$, "
              r"the norm's VJP at $h$ plus $g^h = \partial L/\partial h$", aggregates=aggregates),
        Equal(vjp.replace(lambda e: isinstance(e, sp.Indexed) and e.base == dy, lambda e: sp.S.Zero), gh[j],
              r"with no gradient on $y$ ($g = 0$), $\partial L/\partial x = g^h$: a backward that drops "
              r"$g^h$ loses the whole residual stream's gradient", aggregates=aggregates),
        Equal(expressions.vjp_weight(kind), dy[j] * _normalized(kind),
              r"$\partial L/\partial\gamma_j = g_j \hat{h}_j$: the norm's, at $h$; $g^h$ does not reach the weight",
              aggregates=aggregates),
    ), notes=(r"$\partial L/\partial z = \partial L/\partial x$ exactly: a kernel returns one gradient "
              r"for both (or the same values twice).",))


def _enumerated_bias(width: int) -> sp.Expr:
    """E_m[Var(z + x m/(1-p))] - Var(z + x) by summing over all 2^width masks, symbolic x, z, p."""
    xs, zs = concrete_row(width), concrete_row(width, z)

    def variance(values: list) -> sp.Expr:
        mean = sum(values) / width
        return sum((a - mean) ** 2 for a in values) / width

    expected = sp.S.Zero
    for mask in itertools.product((0, 1), repeat=width):
        probability = sp.Mul(*[(1 - p) if kept else p for kept in mask])
        expected += probability * variance([b + a * kept / (1 - p) for a, b, kept in zip(xs, zs, mask, strict=True)])
    return sp.factor(expected - variance([a + b for a, b in zip(xs, zs, strict=True)]))


def _enumeration_matches() -> bool:
    for width in (1, 2, 3):
        xs = concrete_row(width)
        mean = sum(xs) / width
        formula = expressions.dropout_variance_bias().subs(
            {d: width, mu: mean, var: sum((a - mean) ** 2 for a in xs) / width})
        if sp.simplify(_enumerated_bias(width) - formula) != 0:
            return False
    return True


def _relative_bias_witness() -> bool:
    """x = (1, 3), p = 1/2: bias 5/2; with z = 0 it is 5/2 of Var 1 (250%), with z = (10, -10) of Var 81 (3.1%)."""
    values = {x[1]: 1, x[2]: 3, p: sp.Rational(1, 2)}
    alone = _enumerated_bias(2).subs({**values, z[1]: 0, z[2]: 0})
    with_residual = _enumerated_bias(2).subs({**values, z[1]: 10, z[2]: -10})
    return alone == with_residual == sp.Rational(5, 2)


def _dropout_add_variance() -> Derivation:
    def h(n):
        return z[n] + x[n] * m[n] / (1 - p)

    mean_h_sq = row_sum(row_sum(h(k) * h(l), l), k) / d**2
    var_sum = row_mean((z[k] + x[k]) ** 2) - row_sum(row_sum((z[k] + x[k]) * (z[l] + x[l]), l), k) / d**2
    return Derivation((
        Equal(E(row_mean(h(k))), row_mean(z[k]) + mu,
              r"$E[m_k] = 1-p$: the norm's input has the expected mean of $z + x$"),
        Equal(E(row_mean(h(k) ** 2)), row_mean(z[k] ** 2) + 2 * row_mean(z[k] * x[k]) + (var + mu**2) / (1 - p),
              r"$m_k^2 = m_k$: the cross term $2 z_k x_k$ keeps its expectation"),
        Equal(E(mean_h_sq), (row_mean(z[k]) + mu) ** 2 + p * (var + mu**2) / (d * (1 - p)),
              r"$E[m_k m_l] = (1-p)^2 + p(1-p)\delta_{kl}$: $E[\bar h^2]$"),
        Equal(E(row_mean(h(k) ** 2) - mean_h_sq) - var_sum, expressions.dropout_variance_bias(),
              r"$E_m[\mathrm{Var}(h)] - \mathrm{Var}(z + x) = \frac{p(d-1)}{d(1-p)}(\sigma_x^2 + \mu_x^2)$: "
              r"the bias of dropout.variance\_bias, in the branch's statistics; the residual drops out"),
        Fact(r"\text{all } 2^d \text{ masks, symbolic } x, z, p:\ d = 1, 2, 3",
             "enumeration over every mask agrees with the formula", _enumeration_matches),
        Fact(r"x = (1,3),\ p = \tfrac12:\ \text{bias } \tfrac52 \text{ for } z = 0 \ (\mathrm{Var}(x) = 1) "
             r"\text{ and for } z = (10,-10)\ (\mathrm{Var}(z+x) = 81)",
             "witness: the absolute bias does not depend on the residual; relative to the norm's input variance "
             "it shrinks as the residual grows", _relative_bias_witness),
    ))


SEED_000_RESIDUAL = ("In Pre-LN the Jacobian has an additive structure J_pre = I + J_F J_LN; the identity I comes from "
                     "the residual connection on the trunk and gives the gradient a highway straight to the lower "
                     "layers, not attenuated by J_LN.")
SEED_003_DROPOUT = ("After inverted dropout, the expected mean of the vector passed to LN equals the original mean "
                    "mu_x, but its expected variance is systematically overestimated; the bias is "
                    "p(d-1)/(d(1-p)) (v_x + mu_x^2).")


def _jacobian_claim(kind: str) -> Claim:
    name = NAMES[kind]
    return Claim(
        f"add_{kind}.jacobian", f"Jacobian of the fused residual add + {name}", "000", SEED_000_RESIDUAL,
        r"For $h = x + z$ (residual\_out) and $y = N(h)$: $\partial y/\partial x = \partial y/\partial z = J_N(h)$, "
        r"$\partial h/\partial x = \partial h/\partial z = I$; with $g = \partial L/\partial y$ and "
        r"$g^h = \partial L/\partial h$: $\partial L/\partial x = \partial L/\partial z = J_N(h)^T g + g^h$; the "
        r"weight (and bias) gradients are the norm's at $h$.",
        (r"the norm's conditions at $h$ ($\sigma_h^2 + \epsilon > 0$, resp. $q_h + \epsilon > 0$)",),
        "holds",
        r"The residual path's gradient is exactly the identity plus the norm's VJP; both upstream gradients "
        r"flow back, to $x$ and to the residual alike.",
        lambda: _add_norm_jacobian(kind))


def _no_derivation() -> Derivation:
    return Derivation((), notes=("A contract of the implementation: checked by the property, nothing to derive.",))


def _residual_exactness() -> Derivation:
    return Derivation((
        Fact(r"x, z \in \text{float16}:\ x + z \text{ is exact in float64, so } \mathrm{fl}_{32}(x + z) "
             r"\text{ is one IEEE float32 addition of the exactly converted inputs}",
             r"a float16 value is a multiple of $2^{-24}$ below $2^{16}$ in magnitude, so the sum needs at most 41 "
             r"bits ($< 53$); checked exactly on 4096 pairs spread over the float16 range", _float16_sums_are_exact),
    ))


def _float16_sums_are_exact() -> bool:
    from fractions import Fraction

    import numpy as np

    bits = np.random.default_rng(0).integers(0, 2**16, size=(4096, 2)).astype(np.uint16)
    pairs = bits.view(np.float16)
    pairs = pairs[np.isfinite(pairs).all(axis=1)]
    return all(Fraction(float(a) + float(b)) == Fraction(float(a)) + Fraction(float(b)) for a, b in pairs)


def _contracts(kind: str) -> tuple[Claim, ...]:
    name = NAMES[kind]
    prefix = f"add_{kind}"
    return (
        Claim(f"{prefix}.forward", f"Fused add + {name}: y is the norm of residual_out", "", "(contract)",
              r"$y = N(h)$, $h$ the returned residual\_out, within the error-model bound of $N$ at $h$ "
              r"(claim \texttt{numerics.\allowbreak error\_model}).", (), "contract", "", _no_derivation),
        Claim(f"{prefix}.residual_out", f"Fused add + {name}: residual_out", "", "(contract)",
              r"residual\_out $= x + z$ in the declared dtype: bit for bit the IEEE float32 sum when kept in float32 "
              r"(declared \texttt{residual\_dtype} float32, flash-attention's \texttt{residual\_in\_fp32}), "
              r"within one rounding after one float32 rounding in 16-bit storage; with a declared in-place "
              r"update, the residual tensor holds it after the call.", (), "contract", "", _residual_exactness),
        Claim(f"{prefix}.inputs_unmodified", f"Fused add + {name} leaves its inputs alone", "", "(contract)",
              r"$x$, the residual (unless declared updated in place), weight, bias and both upstream gradients are "
              r"never written.", (), "contract", "", _no_derivation),
        Claim(f"{prefix}.row_independence", f"Fused add + {name} rows are independent", "", "(contract)",
              r"Changing one row of $x$ changes no other row of $y$ or residual\_out.", (), "contract", "",
              _no_derivation),
        Claim(f"{prefix}.layout_invariance", f"Fused add + {name} does not depend on memory layout", "",
              "(contract)", r"Strided $x$ and residual give the contiguous call's result.", (), "contract", "",
              _no_derivation),
    )


CLAIMS = (
    *_contracts("ln"),
    *_contracts("rms"),
    Claim("drop_add_ln.forward", "Fused dropout + add + LayerNorm: y is the norm of residual_out", "", "(contract)",
          r"$y = \mathrm{LN}(h)$, $h = z + x\odot m/(1-p)$ the returned residual\_out, within the error-model bound.",
          (), "contract", "", _no_derivation),
    Claim("drop_add_ln.values", "Fused dropout + add: each residual_out element", "", "(contract)",
          r"Every element of residual\_out is $z_i$ (dropped) or $z_i + x_i/(1-p)$ (kept), within its rounding.",
          (), "contract", "", _no_derivation),
    _jacobian_claim("ln"),
    _jacobian_claim("rms"),
    Claim("drop_add_ln.variance_bias", "Variance of a dropped-out branch added to the residual, before the norm",
          "003", SEED_003_DROPOUT,
          r"For $h = z + x\odot m/(1-p)$, $m_i$ iid Bernoulli$(1-p)$: $E_m[\bar h] = \overline{z + x}$ and "
          r"$E_m[\mathrm{Var}(h)] - \mathrm{Var}(z + x) = \frac{p(d-1)}{d(1-p)}(\sigma_x^2 + \mu_x^2)$, "
          r"with the branch's $\sigma_x^2, \mu_x$ (population variances), whatever the residual $z$.",
          (r"$0 < p < 1$", r"population variance", r"dropout on the branch only, before the add"),
          "holds only when",
          r"The seed's bias carries over to the fused dropout + add + norm with $v_x, \mu_x$ the statistics of the "
          r"dropped-out branch, not of the norm's input $z + x$; relative to $\mathrm{Var}(z + x)$ it shrinks as "
          r"the residual grows (witness $x = (1,3)$, $p = \frac12$: $\frac52$ both with $z = 0$ and $z = (10,-10)$).",
          _dropout_add_variance),
)
