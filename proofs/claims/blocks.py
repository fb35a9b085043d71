"""Pre-LN and Post-LN residual blocks with a linear sublayer F(x) = W x, and when LayerNorm's Jacobian contracts.

    Pre-LN:   f(x) = x + W LN(x),        J_pre  = I + W J_LN(x)
    Post-LN:  g(x) = LN(x + W x),        J_post = J_LN(h) (I + W),   h = (I + W) x

LayerNorm here has gamma = 1, beta = 0 (a per-feature gamma multiplies J_LN by diag(gamma) from the left).

ln.contraction, as a witness (tests/test_proofs_doctests.py runs it): J_LN contracts only where sigma^2 + eps > 1;
a row of small variance is expanded, here twelvefold.

>>> import numpy as np
>>> from proofs import oracles
>>> round(float(oracles.layernorm_spectral_norm(np.array([0.1, -0.1, 0.0]), 1e-5)), 4)
12.2383
"""

from __future__ import annotations

from functools import cache

import sympy as sp

from proofs import expressions
from proofs.algebra import concrete, concrete_row, d, eps, i, j, mu, var, x
from proofs.claims import symbolic_checks
from proofs.claims.base import Claim
from proofs.derivation import AtMost, Derivation, Equal, Fact

WIDTH = 3
# A sublayer with no structure: not symmetric, not a multiple of I, singular directions of neither I + W nor W.
SUBLAYER = sp.Matrix([[1, 2, 0], [0, -1, 1], [3, 0, 1]]) / 2
a = sp.Symbol("a", nonnegative=True)  # W = a I
s = expressions.LN_SCALE


def unit_layernorm(width: int) -> tuple[list, sp.Expr]:
    """(LN outputs y_1..y_width with gamma = 1, beta = 0, written out, sigma^2 + eps written out)."""
    definition, _, radicand = symbolic_checks.definition_and_stats("ln", width)
    unit = expressions.unit_weight(definition).xreplace({expressions.beta[i]: 0})
    return [concrete(unit.subs(i, n), width) for n in range(1, width + 1)], radicand


def derived_jacobian(row: list, width: int) -> sp.Matrix:
    """J_LN (gamma = 1) at the row ``row`` (expressions in x), from the derived expression."""
    _, stats, _ = symbolic_checks.definition_and_stats("ln", width)
    at_row = dict(zip(concrete_row(width), row, strict=True))
    derived = expressions.unit_weight(expressions.jacobian("ln"))
    return sp.Matrix(width, width, lambda r, c: derived.subs({i: r + 1, j: c + 1, d: width}).subs(stats)
                     .xreplace(at_row))


@cache
def pre_ln_matches() -> bool:
    """The written-out Jacobian of x + W LN(x) is I + W J_LN(x), every entry, d = 3, symbolic x."""
    outputs, radicand = unit_layernorm(WIDTH)
    row = concrete_row(WIDTH)
    block = sp.Matrix(row) + SUBLAYER * sp.Matrix(outputs)
    expected = sp.eye(WIDTH) + SUBLAYER * derived_jacobian(row, WIDTH)
    return all(symbolic_checks.zero_with_root(sp.diff(block[r], row[c]) - expected[r, c], radicand)
               for r in range(WIDTH) for c in range(WIDTH))


@cache
def post_ln_matches() -> bool:
    """The written-out Jacobian of LN(x + W x) is J_LN(h) (I + W), h = (I + W) x, every entry, d = 3."""
    outputs, radicand = unit_layernorm(WIDTH)
    row = concrete_row(WIDTH)
    h = (sp.eye(WIDTH) + SUBLAYER) * sp.Matrix(row)
    at_h = dict(zip(row, h, strict=True))
    block = [output.xreplace(at_h) for output in outputs]
    expected = derived_jacobian(list(h), WIDTH) * (sp.eye(WIDTH) + SUBLAYER)
    return all(symbolic_checks.zero_with_root(sp.diff(block[r], row[c]) - expected[r, c], radicand.xreplace(at_h))
               for r in range(WIDTH) for c in range(WIDTH))


def _block_jacobians() -> Derivation:
    unit = expressions.unit_weight(expressions.jacobian("ln"))
    # x -> (1 + a) x scales mu by 1 + a and sigma^2 by (1 + a)^2: sigma^2 + eps = (1 + a)^2 (sigma^2 + eps/(1 + a)^2)
    scaled = unit.xreplace({x[i]: (1 + a) * x[i], x[j]: (1 + a) * x[j], mu: (1 + a) * mu,
                            var + eps: (1 + a) ** 2 * (var + eps / (1 + a) ** 2)})
    return Derivation((
        Fact(r"\partial\,(x + W\,\mathrm{LN}(x))/\partial x = I + W J_{\mathrm{LN}}(x),\ d = 3,\ "
             r"W = \tfrac12\,[\,1\ 2\ 0;\ 0\ {-1}\ 1;\ 3\ 0\ 1\,]\ \text{(rows)}",
             r"Pre-LN: explicit differentiation of the written-out block, compared exactly with the derived "
             r"$J_{\mathrm{LN}}$",
             pre_ln_matches),
        Fact(r"\partial\,\mathrm{LN}(x + Wx)/\partial x = J_{\mathrm{LN}}((I+W)x)\,(I + W),\ d = 3,\ \text{same } W",
             r"Post-LN: explicit differentiation, the derived $J_{\mathrm{LN}}$ at $h = (I + W)x$", post_ln_matches),
        Equal((1 + a) * scaled, unit.subs(eps, eps / (1 + a) ** 2),
              r"Post-LN with $W = aI$: $J_{\mathrm{post}} = (1+a)J_{\mathrm{LN},\epsilon}((1+a)x) = "
              r"J_{\mathrm{LN},\epsilon/(1+a)^2}(x)$ (LN is scale invariant up to $\epsilon$): the factor $1 + a$ "
              r"of the sublayer cancels"),
    ), notes=(r"Pre-LN keeps $I$ as a separate term ($J_{\mathrm{pre}} - I = W J_{\mathrm{LN}}$); Post-LN multiplies "
              r"every path, the residual one included, by $J_{\mathrm{LN}}(h)$.",))


def _spectral_norm_of(row: list, epsilon: sp.Expr) -> sp.Expr:
    """||J_LN||_2 of a concrete rational row (gamma = 1), exactly: the largest |eigenvalue| of s J over s."""
    values = [sp.Rational(value) for value in row]
    mean = sum(values) / len(values)
    scale = sp.sqrt(sum((value - mean) ** 2 for value in values) / len(values) + epsilon)
    eigen = symbolic_checks.scaled_jacobian("ln", values, epsilon).eigenvals()
    return max(abs(value) for value in eigen) / scale


def _contraction() -> Derivation:
    c = sp.Symbol("c", positive=True)  # sigma^2 + eps = 1 + c, resp. 1/(1 + c)
    b, f = sp.symbols("b f", nonnegative=True)
    base = sp.Symbol("B", positive=True)
    eigen = expressions.eigenvalues("ln")
    tiny = sp.Rational(1, 10**5)
    return Derivation((
        Equal(eigen["perp"], 1 / s, r"$\|J_{\mathrm{LN}}\|_2 = 1/s$ for $d \ge 3$ (claim ln.spectral\_norm: the "
              r"eigenvalue on $\{\mathbf 1,\hat x\}^\perp$; $\epsilon/s^3$ on $\hat x$, 0 on $\mathbf 1$)"),
        AtMost(1 / sp.sqrt(1 + c), sp.S.One,
               r"$\sigma^2 + \epsilon = 1 + c > 1$: $\|J\|_2 = 1/\sqrt{1+c} < 1$, a contraction (the certificate "
               r"is $> 0$)", certificate=c / (sp.sqrt(1 + c) * (sp.sqrt(1 + c) + 1))),
        AtMost(sp.S.One, sp.sqrt(1 + c), r"$\sigma^2 + \epsilon = 1/(1+c) < 1$: $\|J\|_2 = \sqrt{1+c} > 1$, an "
               r"expansion (equality iff $\sigma^2 + \epsilon = 1$)", certificate=c / (sp.sqrt(1 + c) + 1)),
        Fact(r"x = (1,0,-1),\ \epsilon = 10^{-5}:\ \sigma^2 = \tfrac23,\ \|J\|_2 = (\tfrac23 + 10^{-5})^{-1/2} "
             r"\approx 1.22 > 1", "witness: LN expands a row of variance below 1 - eps (exact eigenvalues)",
             lambda: _spectral_norm_of([1, 0, -1], tiny) == 1 / sp.sqrt(sp.Rational(2, 3) + tiny)
             and _spectral_norm_of([1, 0, -1], tiny) > 1),
        Fact(r"x = (2,0,-2),\ \epsilon = 10^{-5}:\ \sigma^2 = \tfrac83,\ \|J\|_2 \approx 0.61 < 1",
             "witness: LN contracts a row of variance above 1 - eps",
             lambda: _spectral_norm_of([2, 0, -2], tiny) == 1 / sp.sqrt(sp.Rational(8, 3) + tiny)
             and _spectral_norm_of([2, 0, -2], tiny) < 1),
        AtMost(1 / sp.sqrt(base + b + f), 1 / sp.sqrt(base),
               r"Post-LN, $W = aI$, $a \ge 0$, fed an LN output $y$ ($\sigma_y^2 = \frac{v}{v+\epsilon} < 1$): with "
               r"$B = \sigma_y^2 + \frac{\epsilon}{(1+a)^2}$, $b = 1 - \sigma_y^2$, $f = \epsilon - "
               r"\frac{\epsilon}{(1+a)^2}$: $\|J_{\mathrm{post}}\|_2 = 1/\sqrt{B} \ge 1/\sqrt{1+\epsilon}$; "
               r"no factor $\rho < 1$ per block",
               certificate=(b + f) / (sp.sqrt(base + b + f) * sp.sqrt(base) * (sp.sqrt(base + b + f) + sp.sqrt(base)))),
    ))


SEED_000_POSTLN = ("In Post-LN the backward gradient must cross the LN at every layer; its Jacobian has the "
                   "multiplicative structure J_post = J_LN (I + J_Sublayer). Since J_LN is usually contractive "
                   "(spectral norm or spectral radius below 1), over L layers the gradient decays exponentially like "
                   "rho^L (rho < 1). In Pre-LN, J_pre = I + J_Sublayer J_LN: the identity is a highway.")

CLAIMS = (
    Claim("blocks.jacobians", "Pre-LN and Post-LN block Jacobians, linear sublayer", "000", SEED_000_POSTLN,
          r"For $F(x) = Wx$: $J_{\mathrm{pre}} = I + W J_{\mathrm{LN}}(x)$ and $J_{\mathrm{post}} = "
          r"J_{\mathrm{LN}}((I+W)x)\,(I+W)$; for $W = aI$ ($a > -1$), $J_{\mathrm{post}} = "
          r"J_{\mathrm{LN},\epsilon/(1+a)^2}(x)$.",
          (r"$\sigma^2 + \epsilon > 0$ at the LN's input", r"$\gamma = 1$, $\beta = 0$"), "holds",
          r"Both structures are exactly as the seed writes them (additive $I$ for Pre-LN, a product through "
          r"$J_{\mathrm{LN}}$ for Post-LN).", _block_jacobians),
    Claim("ln.contraction", "When LayerNorm's Jacobian is a contraction", "000", SEED_000_POSTLN,
          r"For $\gamma = 1$, $d \ge 3$: $\|J_{\mathrm{LN}}(x)\|_2 = 1/\sqrt{\sigma^2+\epsilon} < 1$ iff "
          r"$\sigma^2 + \epsilon > 1$ ($d = 2$: $\epsilon/(\sigma^2+\epsilon)^{3/2} < 1$; $d = 1$: $J = 0$). With "
          r"$\gamma$: $\|\mathrm{diag}(\gamma)J\|_2 \le \max|\gamma_i|/\sqrt{\sigma^2+\epsilon}$. A Post-LN block with "
          r"$W = aI$ fed an LN output has $\|J_{\mathrm{post}}\|_2 \ge 1/\sqrt{1+\epsilon}$.",
          (r"$d \ge 3$, $\gamma = 1$ for the equivalence",), "holds only when",
          r"``$J_{\mathrm{LN}}$ is contractive'' holds only when the LN's input has $\sigma^2 + \epsilon > 1$; rows "
          r"of smaller variance are expanded (witness $x = (1,0,-1)$: $\|J\| \approx 1.22$). It is not what makes "
          r"Post-LN gradients decay: LN is scale invariant, so with $W = aI$ the block's Jacobian is the LN Jacobian "
          r"of the unscaled input, of norm $\ge 1/\sqrt{1+\epsilon}$ on LN outputs: no $\rho^L$ with $\rho < 1$. "
          r"Any decay comes from $W$ (its directions), not from $\|J_{\mathrm{LN}}\| < 1$.",
          _contraction),
)
