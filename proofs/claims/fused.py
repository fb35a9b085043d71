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
from proofs.claims import dropout, symbolic_checks
from proofs.claims.base import Claim
from proofs.derivation import Derivation, Equal, Fact
from proofs.mechanisms import round_to

z = sp.IndexedBase("z", real=True)  # the residual stream entering the block
gh = sp.IndexedBase("g^h", real=True)  # dL/d(residual_out)
E = expressions.MaskExpectation
NAMES = {"ln": "LayerNorm", "rms": "RMSNorm"}
EXPLICIT_WIDTHS = (1, 2, 3)


@cache
def explicit_jacobian_matches(kind: str, width: int) -> bool:
    """d y_i/d x_j = d y_i/d z_j = J_ij(h) for y = N(x + z) written out at this width, every entry, exactly."""
    definition, stats, radicand = symbolic_checks.definition_and_stats(kind, width)
    xs, zs = concrete_row(width), concrete_row(width, z)
    added = {xs[n]: xs[n] + zs[n] for n in range(width)}
    derived = expressions.jacobian(kind)
    for a in range(width):
        output = concrete(definition.subs(i, a + 1), width).xreplace(added)
        for b in range(width):
            entry = derived.subs({i: a + 1, j: b + 1, d: width}).subs(stats).xreplace(added)
            for variable in (xs[b], zs[b]):
                if not symbolic_checks.zero_with_root(sp.diff(output, variable) - entry, radicand.xreplace(added)):
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
        Fact(r"\Bigl|\mathrm{fl}_s\Bigl(\textstyle\sum_{j<k} \mathrm{fl}_h(c_j) + g^h\Bigr) "
             r"- \sum_{j<k} c_j - g^h\Bigr| \le u_h M + \gamma_{k-1}(u_s)\,((1 + u_h) M + |g^h|),"
             r"\quad M = \textstyle\sum_j |c_j|",
             r"the rounding of $\partial L/\partial h$: a composition's autograd adds the gradients reaching $h$ from "
             r"each use (the terms $c_j$ of $J_N^T g$, each stored in $h$'s dtype, and $g^h$) with a rounding after "
             r"every partial sum, in an order not known; every partial sum is at most $M + |g^h|$, so $k - 1$ "
             r"roundings of unit $u_s$ err by $\gamma_{k-1}(u_s)$ times that (Higham, Lemma 3.1). Checked in float16, "
             r"bfloat16 and float32 on 3000 cancelling term sets of $k = 2, 3, 4$, every order and both tree shapes "
             r"(properties/bounds/tolerance.py: $k = 4$ for LayerNorm, 3 for RMSNorm)", _accumulated_sums_bounded),
    ), notes=(r"$\partial L/\partial z = \partial L/\partial x$ exactly: a kernel returns one gradient "
              r"for both (or the same values twice).",))


def _orders(terms: list) -> list:
    """Every sum of ``terms`` a sequence of pairwise additions can form: each term order, as a chain or (four
    terms) as two pairs, each addition a node ("+", a, b)."""
    sums = []
    for order in itertools.permutations(range(len(terms))):
        chain = terms[order[0]]
        for n in order[1:]:
            chain = ("+", chain, terms[n])
        sums.append(chain)
        if len(order) == 4:
            sums.append(("+", ("+", terms[order[0]], terms[order[1]]), ("+", terms[order[2]], terms[order[3]])))
    return sums


def _rounded_sum(node, dtype: str):
    if not isinstance(node, tuple):
        return node
    return round_to(_rounded_sum(node[1], dtype) + _rounded_sum(node[2], dtype), dtype)


def _accumulated_sums_bounded() -> bool:
    """The k-term sum of dL/dh (properties.bounds.tolerance): terms c_j (float64 values around a cancelling sum)
    stored in h's dtype, plus g^h in h's dtype, summed in every order with a rounding after each addition, never err
    beyond u_h M + gamma_{k-1}(u_h)((1 + u_h) M + |g^h|) from the exact sum."""
    import numpy as np

    from proofs.error_model import unit_roundoff

    rng = np.random.default_rng(25)
    for dtype in ("float16", "bfloat16", "float32"):
        u = unit_roundoff(dtype)
        for _ in range(1000):
            k = int(rng.integers(2, 5))
            c = rng.standard_normal(k - 1) * np.exp2(rng.integers(-4, 5, k - 1))
            c[-1] = -c[:-1].sum() + rng.standard_normal() * 2.0 ** -rng.integers(0, 12)  # J^T g may cancel
            gh_value = float(round_to(rng.standard_normal() * np.exp2(rng.integers(-6, 6)), dtype))
            stored = [float(v) for v in round_to(c, dtype)]
            magnitude = float(np.abs(c).sum())
            gamma_sum = (k - 1) * u / (1 - (k - 1) * u)
            bound = u * magnitude + gamma_sum * ((1 + u) * magnitude + abs(gh_value))
            exact = float(c.sum()) + gh_value
            if any(abs(float(_rounded_sum(order, dtype)) - exact) > bound for order in _orders([*stored, gh_value])):
                return False
    return True


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


through = sp.IndexedBase("t", real=True)  # t = J_N(h)^T g + g^h: the gradient reaching residual_out


def _dropout_add_gradient() -> Derivation:
    h = z[i] + x[i] * m[i] / (1 - p)
    return Derivation((
        Equal(sp.Derivative(h, x[j]), delta(i, j) * m[i] / (1 - p),
              r"$h_i = z_i + x_i m_i/(1-p)$: $\partial h_i/\partial x_j = \delta_{ij} m_i/(1-p)$, the mask the "
              r"forward drew"),
        Equal(sp.Derivative(h, z[j]), delta(i, j), r"$\partial h_i/\partial z_j = \delta_{ij}$: the residual path "
              r"is not dropped out"),
        Equal(row_sum(through[i] * delta(i, j) * m[i] / (1 - p), i), through[j] * m[j] / (1 - p),
              r"chain rule with $t = J_N(h)^T g + g^h$ (claim add\_ln.jacobian at $h$): $\partial L/\partial x_j = "
              r"m_j t_j/(1-p)$: exactly 0 where the forward dropped, $t_j/(1-p)$ where it kept"),
        Equal(row_sum(through[i] * delta(i, j), i), through[j],
              r"$\partial L/\partial z_j = t_j$: the residual's gradient is the fused add + norm's, whatever the mask"),
    ))


def _storage_sums_move(x_values, r_values, p: float, dtype: str) -> bool:
    """Whether fl(r + fl(x c)) != r for every pair, c = 1/(1-p), along each rounding path a kernel may take: the
    product and sum in the storage dtype (each operation exact, then rounded), in float32 then rounded, in float64
    then rounded, the product rounded to storage and the sum in float32."""
    xs = round_to(x_values, dtype)
    rs = round_to(xs * round_to(r_values, "float32"), dtype)  # |r| <= |x|: a rounded fraction of x
    c = 1.0 / (1.0 - p)

    def single(v):
        return round_to(v, "float32")

    paths = (round_to(rs + round_to(xs * round_to(c, dtype), dtype), dtype),
             round_to(single(rs + single(xs * single(c))), dtype),
             round_to(rs + xs * c, dtype),
             round_to(single(rs + round_to(single(xs * c), dtype)), dtype))
    return all(bool((h != rs).all()) for h in paths)


def _mask_recovery_is_exact() -> bool:
    import numpy as np

    rng = np.random.default_rng(0)
    magnitudes = np.exp2(rng.uniform(-12, 10, 20000)) * rng.choice([-1.0, 1.0], 20000)
    fractions = np.concatenate([rng.uniform(-1, 1, 19996), [1.0, -1.0, 0.0, 2.0**-11]])
    return all(_storage_sums_move(magnitudes, fractions, p, dtype)
               for dtype in ("float16", "bfloat16", "float32")
               for p in (1e-3, 0.1, 1 / 3, 0.5, 0.9, 0.999))


def _mask_from_residual_out() -> Derivation:
    return Derivation((
        Fact(r"0 < |x_i|,\ |z_i| \le |x_i|:\ \text{kept} \iff h_i \ne z_i",
             r"dropped: $h_i = \mathrm{fl}(z_i + 0) = z_i$ in any precision; kept: $s = \mathrm{fl}(x_i/(1-p))$ has "
             r"$|s| \ge |x_i| \ge |z_i|$, and $\mathrm{fl}(z_i + s) = z_i$ would need $|s| \le u'(|z_i| + |s|) \le "
             r"2u'|s|$ with $u' < \frac14$ the relative error of the roundings: so $s = 0$, impossible. Checked on "
             r"20\,000 pairs per dtype (float16, bfloat16, float32) and $p$, along every rounding path",
             _mask_recovery_is_exact),
    ), notes=(r"The statistical claims of the fused kind read the mask so, exactly; the tests of "
              r"properties/dropout\_statistics.py then apply with the false alarms and powers derived there "
              r"(claims dropout.keep\_rate, dropout.independence, dropout.seeds).",))


def _dropout_add_layout() -> Derivation:
    return Derivation((
        Equal(z[i] + x[i] * m[i] / (1 - p), x[i] + z[i],
              r"$p = 0$: every $m_i = 1$ (probability $1 - p = 1$), so $h = z + x$, the fused add's residual\_out, "
              r"and $y = \mathrm{LN}(z + x)$ whatever the seed: a layout must not move either beyond the bound "
              r"(as add\_ln.layout\_invariance)", given={p: 0, m[i]: 1}),
        *_mask_from_residual_out().steps,
        Equal(z[i] + x[i] * m[i] / (1 - p), z[i], r"$0 < p < 1$, dropped ($m_i = 0$): $h_i = z_i$", given={m[i]: 0}),
        Equal(z[i] + x[i] * m[i] / (1 - p), z[i] + x[i] / (1 - p),
              r"kept ($m_i = 1$): $h_i = z_i + x_i/(1-p)$; so with the mask read from residual\_out, $h$ is "
              r"determined by $(x, z, m)$ and $y = \mathrm{LN}(h)$ is checked at it, in any layout", given={m[i]: 1}),
    ), notes=(r"The mask is a function of the element's index, so at a fixed seed a strided input may get another mask "
              r"than the contiguous one: for $p > 0$ the claim is the mask's law (the keep-rate and independence tests "
              r"of properties/dropout\_statistics.py on the mask of each layout) and the values and $y$ at the mask "
              r"the kernel used, not equality with the contiguous call.",))


def _mask_claim(name: str, title: str, statement: str) -> Claim:
    return Claim(f"drop_add_ln.{name}", f"Fused dropout + add: {title}", "003" if name != "seeds" else "",
                 dropout.SEED_RATE if name != "seeds" else "(contract)", statement, (r"$0 < p < 1$",), "contract", "",
                 _mask_from_residual_out)


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
              r"(claim \texttt{numerics.\allowbreak error\_model}), also in a training step's forward; an empty "
              r"batch gives empty outputs and $d\gamma = d\beta = 0$, no error.", (), "contract", "", _no_derivation),
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
              "(contract)", r"Strided $x$ and residual give the contiguous call's result; upstream gradients $dy$, "
              r"$dh$ strided, transposed or expanded (stride 0: autograd's gradient of a summed loss) give the "
              r"contiguous ones' gradients.", (), "contract", "", _no_derivation),
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
    _mask_claim("keep_rate", "the keep rate",
                r"The kept count of $n$ elements is Binomial$(n, 1-p)$; the mask is read from residual\_out "
                r"exactly (kept $\iff h_i \ne z_i$ for $0 < |x_i|$, $|z_i| \le |x_i|$)."),
    _mask_claim("independence", "independent mask bits",
                r"Neighbouring bits of a row, the bits of one column in two rows and the kept counts of two rows are "
                r"those of independent Bernoulli$(1-p)$ bits (no blocks, no mask shared by the rows)."),
    _mask_claim("seeds", "different seeds, independent masks",
                r"The masks of seeds $s$ and $s+1$, $s \oplus 1$, $s+2$ agree on Binomial$(n, p^2 + (1-p)^2)$ "
                r"elements."),
    Claim("drop_add_ln.inputs_unmodified", "Fused dropout + add + LayerNorm leaves its inputs alone", "",
          "(contract)", r"$x$, the residual, weight, bias and both upstream gradients are never written.", (),
          "contract", "", _no_derivation),
    Claim("drop_add_ln.row_independence", "Fused dropout + add + LayerNorm rows are independent", "", "(contract)",
          r"With the same seed, changing one row of $x$ changes no other row of $y$ or residual\_out (the mask is "
          r"drawn by position, not from the values).", (), "contract", "", _no_derivation),
    Claim("drop_add_ln.layout_invariance", "Fused dropout + add + LayerNorm in any memory layout", "", "(contract)",
          r"Strided, transposed and offset views of $x$ and the residual (and a strided weight and bias): with "
          r"$p = 0$, $y$ and residual\_out are the contiguous call's within twice their bounds; with $0 < p < 1$, the "
          r"mask read from residual\_out passes the keep-rate and independence tests in every layout, every "
          r"residual\_out element is $z_i$ or $z_i + x_i/(1-p)$ within its rounding and $y = \mathrm{LN}(h)$ within "
          r"the error-model bound; upstream gradients $dy$, $dh$ strided, transposed or expanded (stride 0) give "
          r"the gradients of claim drop\_add\_ln.gradient.", (r"$0 \le p < 1$",), "contract", "", _dropout_add_layout),
    Claim("drop_add_ln.determinism", "Fused dropout + add: same seed, same outputs", "", "(contract)",
          r"Two calls with the same $x$, residual, $p$ and seed return the same $y$ and residual\_out, bit for bit.",
          (), "contract", "", _no_derivation),
    Claim("drop_add_ln.gradient", "Fused dropout + add + LayerNorm: the gradient uses the forward's mask", "",
          "(contract)",
          r"With $t = J_{\mathrm{LN}}(h)^T g + g^h$ at the returned residual\_out $h$: $\partial L/\partial x = "
          r"m \odot t/(1-p)$ with $m$ the forward's mask (0 exactly where it dropped), $\partial L/\partial z = t$, "
          r"and the weight and bias gradients LayerNorm's at $h$.",
          (r"$0 \le p < 1$",), "holds",
          r"For every mask: the backward must reuse the forward's mask (a fresh draw gives the wrong gradient on about "
          r"$2p(1-p)$ of the elements) and its $1/(1-p)$; the residual's gradient does not see the mask.",
          _dropout_add_gradient),
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
