"""GroupNorm over [N, C, *]: LayerNorm blocks over each group's (C/G) x spatial elements, per-channel gamma.

One sample x has C channels of S spatial elements (S = product of the trailing sizes), split into G groups
of C/G consecutive channels; group g holds the m = (C/G) S elements of its channels. With mu_g, sigma_g^2
the mean and population variance of group g,

    y_{c,s} = gamma_c (x_{c,s} - mu_g) / sqrt(sigma_g^2 + eps) + beta_c        (c in group g).

G = 1 is LayerNorm over (C, *); G = C is InstanceNorm. Written out, the elements are numbered in
row-major (channel, spatial) order, so group g is the contiguous run g m + 1 .. (g + 1) m.

gn.degenerate, as a witness (tests/test_proofs_doctests.py runs it): one-element groups give beta_c for eps > 0, as
the seed says, but at eps = 0 they are 0/0, undefined, not beta_c.

>>> import numpy as np
>>> from proofs import fused_oracles
>>> x, bias = np.array([[[1.0], [2.0]]]), np.array([0.5, 0.25])  # N = 1, C = G = 2, one spatial element
>>> [fused_oracles.groupnorm(x, 2, None, bias, eps).ravel().tolist() for eps in (1e-5, 0.0)]
[[0.5, 0.25], [nan, nan]]
"""

from __future__ import annotations

from functools import cache

import sympy as sp

from proofs import expressions
from proofs.algebra import MEAN_DEF, VAR_DEF, beta, concrete, concrete_row, d, dy, eps, gamma, i, j, mu, var, x
from proofs.claims import symbolic_checks
from proofs.claims.base import Claim, no_derivation
from proofs.derivation import Derivation, Equal, Fact

# (C, G, S) of the written-out checks: LayerNorm over (C, S), InstanceNorm, two groups of two channels, and the
# degenerate groups of one element.
SHAPES = ((2, 1, 2), (2, 2, 2), (4, 2, 1), (3, 3, 1), (1, 1, 3))
other_group = sp.IndexedBase("x'", real=True)


def group_statistics(values: list, group: int, size: int) -> tuple[dict, sp.Expr]:
    """({mu: mean, sigma^2: variance} of group ``group`` (elements group*size .. +size), sigma^2 + eps)."""
    local = dict(zip(concrete_row(size), values[group * size:(group + 1) * size], strict=True))
    stats = {mu: concrete(MEAN_DEF, size).xreplace(local), var: concrete(VAR_DEF, size).xreplace(local)}
    return stats, stats[var] + eps


def written_out(channels: int, groups: int, spatial: int) -> tuple[list, list]:
    """(elements x_1..x_{C S}, outputs y_1..y_{C S}) of GroupNorm on one symbolic sample, gamma/beta per channel."""
    elements = concrete_row(channels * spatial)
    size = channels * spatial // groups
    outputs = []
    for n in range(channels * spatial):
        stats, radicand = group_statistics(elements, n // size, size)
        channel = n // spatial + 1
        outputs.append(gamma[channel] * (elements[n] - stats[mu]) / sp.sqrt(radicand) + beta[channel])
    return elements, outputs


@cache
def jacobian_is_blockwise_layernorm(channels: int, groups: int, spatial: int) -> bool:
    """dy/dx of the written-out GroupNorm is block-diagonal over the groups, each block diag(gamma_c) J_LN of the
    group's m elements (the derived LN Jacobian with d = m, per-element gamma = its channel's): every entry, exactly."""
    elements, outputs = written_out(channels, groups, spatial)
    size = channels * spatial // groups
    derived = expressions.jacobian("ln")
    for a, output in enumerate(outputs):
        group = a // size
        stats, radicand = group_statistics(elements, group, size)
        for b, element in enumerate(elements):
            derivative = sp.diff(output, element)
            if b // size != group:
                if derivative != 0:
                    return False
                continue
            local = {x[a % size + 1]: elements[a], x[b % size + 1]: elements[b]}
            entry = derived.subs({i: a % size + 1, j: b % size + 1, d: size}).subs(stats).xreplace(local)
            entry = entry.xreplace({gamma[a % size + 1]: gamma[a // spatial + 1]})
            if not symbolic_checks.zero_with_root(derivative - entry, radicand):
                return False
    return True


def _parameter_gradients_match() -> bool:
    """(C, G, S) = (2, 1, 2): dL/dgamma_c = sum_s g_{c,s} xhat_{c,s}, dL/dbeta_c = sum_s g_{c,s}, L = sum g y."""
    channels, groups, spatial = 2, 1, 2
    elements, outputs = written_out(channels, groups, spatial)
    stats, radicand = group_statistics(elements, 0, len(elements))
    upstream = concrete_row(len(elements), dy)
    loss = sum(g * y for g, y in zip(upstream, outputs, strict=True))
    for c in range(1, channels + 1):
        mine = range((c - 1) * spatial, c * spatial)
        xhat = sum(upstream[n] * (elements[n] - stats[mu]) / sp.sqrt(radicand) for n in mine)
        if sp.simplify(sp.diff(loss, gamma[c]) - xhat) != 0 or sp.diff(loss, beta[c]) != sum(upstream[n] for n in mine):
            return False
    return True


def _jacobian() -> Derivation:
    return Derivation((
        Equal(sp.Derivative(expressions.LN_DEFINITION, other_group[j]), 0,
              r"an output of group $g$ does not depend on an element $x'_j$ of another group: the Jacobian of a "
              r"sample is block-diagonal over the groups"),
        Fact(r"\partial y/\partial x = \mathrm{blockdiag}_g\big(\mathrm{diag}(\gamma_{c(k)})\,J_{\mathrm{LN}}"
             r"(x_g; d = \tfrac{C}{G}S)\big)\ \text{written out, every entry: } (C,G,S) \in \{(2,1,2),(2,2,2),"
             r"(4,2,1),(3,3,1),(1,1,3)\}",
             "explicit differentiation of GroupNorm on a symbolic sample, compared exactly with the derived LN "
             "Jacobian of each group (d = its element count, gamma of each element's channel)",
             lambda: all(jacobian_is_blockwise_layernorm(*shape) for shape in SHAPES)),
        Fact(r"\partial L/\partial\gamma_c = \sum_{s} g_{c,s}\hat{x}_{c,s},\ \partial L/\partial\beta_c = "
             r"\sum_s g_{c,s}\ \text{(summed over the batch)}: (C,G,S) = (2,1,2)",
             "per-channel parameter gradients: the per-element LN weight gradient g xhat summed over the channel's "
             "spatial elements", _parameter_gradients_match),
    ), notes=(r"$G = C$ (InstanceNorm): each channel is its own block, so channels are decoupled; $G = 1$: one "
              r"dense LN block over all $C S$ elements.",))


def _groupnorm_values(values: list, channels: int, groups: int, epsilon) -> list:
    """GroupNorm of one sample of rational values, spatial size len(values)/channels, gamma = 1, beta = b_c."""
    elements, outputs = written_out(channels, groups, len(values) // channels)
    given = {**dict(zip(elements, map(sp.Rational, values), strict=True)), eps: sp.Rational(epsilon)}
    given.update({gamma[c]: 1 for c in range(1, channels + 1)})
    return [sp.radsimp(output.xreplace(given)) for output in outputs]


def _degenerate() -> Derivation:
    single = concrete(expressions.LN_DEFINITION, 1).subs(i, 1)
    return Derivation((
        Equal(single, beta[1], r"a group of one element ($d = 1$ LayerNorm, InstanceNorm with spatial size 1): "
              r"$x_1 - \mu = 0$, so $y = \beta$ for $\epsilon > 0$ (0/0 at $\epsilon = 0$)"),
        Equal(concrete(expressions.jacobian("ln"), 1).subs({i: 1, j: 1}).subs(
            {mu: concrete(MEAN_DEF, 1), var: concrete(VAR_DEF, 1)}), 0,
              r"its Jacobian is 0: no gradient reaches $x$"),
        Fact(r"\mathrm{IN}(x),\ x = (3,-1,2) \in \mathbb{R}^{C \times 1},\ \epsilon = 10^{-5}:\ y = (\beta_1, \beta_2, "
             r"\beta_3)", "InstanceNorm (G = C) of a sample with spatial size 1, exactly",
             lambda: _groupnorm_values([3, -1, 2], 3, 3, sp.Rational(1, 10**5)) == [beta[1], beta[2], beta[3]]),
        Fact(r"\mathrm{LN} = \mathrm{GN}_{G=1},\ x = (1,-1) \in \mathbb{R}^{2 \times 1},\ \epsilon = 0:\ "
             r"y = (1 + \beta_1, -1 + \beta_2)",
             "LayerNorm over C = 2 features still normalizes at spatial size 1",
             lambda: _groupnorm_values([1, -1], 2, 1, 0) == [1 + beta[1], -1 + beta[2]]),
    ))


SEED_000_INSTANCE = ("For 1-D feature vectors (H = W = 1), InstanceNorm degenerates: each single-element channel has "
                     "mean equal to the element and variance zero, so IN's output degenerates to the bias beta_c and "
                     "loses the meaning of normalization, while LN still normalizes meaningfully over the C features.")
SEED_000_COUPLING = ("Because LN's mean and variance are computed across all channels, the gradient of any output "
                     "y_chw reaches every input channel x_c'h'w' through the shared statistics (dense gradient "
                     "coupling between channels); IN's statistics are per channel, so its gradient flow is decoupled "
                     "across channels.")


CLAIMS = (
    Claim("gn.forward", "GroupNorm kernel output within the error-model bound", "", "(contract)",
          r"$y$ is LayerNorm of each group's $\frac{C}{G}S$ elements with per-channel $\gamma_c, \beta_c$, within the "
          r"LayerNorm error-model bound of the group (claim \texttt{numerics.error\_model}); a $G$ that does not "
          r"divide $C$ (or $G = 0$) is refused with an error.", (), "contract", "",
          no_derivation),
    Claim("gn.layout_invariance", "GroupNorm does not depend on memory layout", "", "(contract)",
          r"A channels-last input gives the contiguous input's result; an upstream gradient strided, transposed, "
          r"channels-last or expanded (stride 0: autograd's gradient of a summed loss) gives the contiguous one's "
          r"gradients.", (), "contract", "", no_derivation),
    Claim("gn.independence", "GroupNorm samples and groups are independent", "", "(contract)",
          r"Changing sample $n$ of $x$ changes no other sample of $y$; changing the channels of group $g$ of a "
          r"sample changes no output outside group $g$ of that sample (the per-sample Jacobian is block-diagonal "
          r"over the groups, claim \texttt{gn.jacobian}; statistics over the batch or over other channels break "
          r"it).", (), "contract", "", no_derivation),
    Claim("gn.inputs_unmodified", "GroupNorm leaves its inputs alone", "", "(contract)",
          r"$x$, the weight, the bias and the upstream gradient are never written.", (), "contract", "",
          no_derivation),
    Claim("gn.jacobian", "Jacobian of GroupNorm (and InstanceNorm)", "000", SEED_000_COUPLING,
          r"Per sample, $\partial y/\partial x$ is block-diagonal over the $G$ groups; the block of group $g$ is "
          r"$\mathrm{diag}(\gamma_{c(k)})\,J_{\mathrm{LN}}(x_g)$ with $d = \frac{C}{G}S$ (the LN Jacobian of the "
          r"group's elements with each element's channel weight); $\partial L/\partial\gamma_c = \sum_{n,s} "
          r"g_{n,c,s}\hat{x}_{n,c,s}$, $\partial L/\partial\beta_c = \sum_{n,s} g_{n,c,s}$.",
          (r"$G$ divides $C$", r"$\sigma_g^2 + \epsilon > 0$ for every group"), "holds",
          r"Dense within a group, zero across groups: $G = 1$ (LN) couples every channel, $G = C$ (IN) none.",
          _jacobian),
    Claim("gn.degenerate", "Degenerate groups: InstanceNorm at spatial size 1, LayerNorm at d = 1", "000",
          SEED_000_INSTANCE,
          r"A group of one element maps to $\beta$ with zero Jacobian: InstanceNorm with spatial size 1 returns "
          r"$\beta_c$ for every input, as does LayerNorm of width $d = 1$; LayerNorm over $C \ge 2$ features "
          r"normalizes.",
          (r"$\epsilon > 0$ (at $\epsilon = 0$ a one-element group is 0/0, undefined)",), "holds only when",
          r"Exactly as the seed says for $\epsilon > 0$; at $\epsilon = 0$ the output is undefined (NaN), not "
          r"$\beta_c$. The seed leaves out that LayerNorm degenerates the same way at $d = 1$.",
          _degenerate),
)
