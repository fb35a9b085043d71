"""BatchNorm, channel-wise LayerNorm and InstanceNorm over x [N, C, *]: each is LayerNorm over a scope of elements.

x has N samples of C channels of S spatial elements (S = product of the trailing sizes); an element is x_{n,c,s}.
The three norms differ only in the axes their statistics sum over (seed 002, section 6: "the scope"):

    scope      sums over   one group holds     n (the group's size)   gamma, beta
    batch      (n, s)      channel c           N S                    per channel      BatchNorm (training)
    layer      (c, s)      sample n            C S                    per element      LayerNorm over (C, *)
    instance   (s)         sample n, chan. c   S                      per channel      InstanceNorm

With mu, sigma^2 the group's mean and population variance, y = gamma (x - mu)/sqrt(sigma^2 + eps) + beta. The
written-out checks below take the seed's formulas literally (sums over the named axes of a symbolic x_{n,c,s})
and compare every output and every entry of the Jacobian with respect to the whole batch exactly with the derived
LayerNorm expressions (proofs.expressions) of the group's flattened elements.

BatchNorm also keeps running statistics (torch's convention, momentum m):

    mu_R <- (1 - m) mu_R + m mu_c,   sigma_R^2 <- (1 - m) sigma_R^2 + m n/(n - 1) sigma_c^2

(momentum None: m = 1/t at the t-th training call, a cumulative average), and in eval mode it is the fixed affine
map y = gamma (x - mu_R)/sqrt(sigma_R^2 + eps) + beta. The update's expressions below (``RUNNING_UPDATE``,
``BESSEL``) are what proofs.batchnorm_oracles evaluates.
"""

from __future__ import annotations

from functools import cache
from itertools import product
from math import prod

import sympy as sp

from proofs import expressions
from proofs.algebra import (
    LN_AGGREGATES,
    MEAN_DEF,
    VAR_DEF,
    beta,
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
    l,
    mu,
    row_mean,
    row_sum,
    var,
    x,
)
from proofs.claims import groupnorm
from proofs.claims import symbolic_checks as checks
from proofs.claims.base import THEORY, Claim, no_derivation
from proofs.derivation import AtMost, Derivation, Equal, Fact

# --- the scopes and the written-out norms ---------------------------------------------------------------------
AXES = {"batch": (0, 2), "layer": (1, 2), "instance": (2,)}  # the axes of (n, c, s) a group's statistics sum over
_DUMMIES = sp.symbols("n_ c_ s_", integer=True, positive=True)

# (N, C, S) of the written-out checks, per scope: two channels, three samples, two spatial elements, one sample.
SHAPES = {"batch": ((2, 2, 1), (3, 1, 1), (2, 1, 2), (1, 2, 2)),
          "layer": ((2, 2, 1), (2, 1, 2)),
          "instance": ((2, 2, 2), (1, 1, 3))}

Element = tuple[int, int, int]  # (n, c, s), 1-based


def _parameter(base: sp.IndexedBase, scope: str, element: Element) -> sp.Expr:
    """gamma or beta of an element: per channel (batch, instance), per (channel, spatial) element (layer)."""
    _, channel, spatial = element
    return base[channel, spatial] if scope == "layer" else base[channel]


def group_of(shape: tuple[int, int, int], scope: str, element: Element) -> list[sp.Expr]:
    """The elements sharing ``element``'s statistics, flattened in row-major order of the summed axes."""
    summed = AXES[scope]
    members = []
    for values in product(*(range(1, shape[axis] + 1) for axis in summed)):
        index = list(element)
        for axis, value in zip(summed, values, strict=True):
            index[axis] = value
        members.append(x[tuple(index)])
    return members


def seed_statistics(shape: tuple[int, int, int], scope: str, element: Element) -> tuple[sp.Expr, sp.Expr]:
    """(mean, population variance) of ``element``'s group as seed 002 writes them: double (or single) sums over the
    scope's axes of x_{n,c,s}, divided by the count."""
    index = list(element)
    limits = []
    for axis in AXES[scope]:
        index[axis] = _DUMMIES[axis]
        limits.append((_DUMMIES[axis], 1, shape[axis]))
    term = x[tuple(index)]
    count = prod(shape[axis] for axis in AXES[scope])
    mean = sp.Sum(term, *limits).doit() / count
    return mean, sp.Sum((term - mean) ** 2, *limits).doit() / count


def elements(shape: tuple[int, int, int]) -> list[Element]:
    return list(product(*(range(1, size + 1) for size in shape)))


def written_out(shape: tuple[int, int, int], scope: str) -> dict[Element, sp.Expr]:
    """{element: its output} of the norm of the given scope on a symbolic batch, from the seed's formulas."""
    outputs = {}
    for element in elements(shape):
        mean, variance = seed_statistics(shape, scope, element)
        outputs[element] = (_parameter(gamma, scope, element) * (x[element] - mean) / sp.sqrt(variance + eps)
                            + _parameter(beta, scope, element))
    return outputs


def _layernorm_of_group(shape: tuple[int, int, int], scope: str, element: Element):
    """(the group's elements, element's position in it, {mu, sigma^2: LN's written-out statistics of the group},
    the radicand sigma^2 + eps, the replacement of LN's row x_1..x_m and of gamma_p, beta_p by the group's)."""
    group = group_of(shape, scope, element)
    size, position = len(group), group.index(x[element]) + 1
    row = dict(zip(concrete_row(size), group, strict=True))
    stats = {mu: concrete(MEAN_DEF, size).xreplace(row), var: concrete(VAR_DEF, size).xreplace(row)}
    local = {**row, gamma[position]: _parameter(gamma, scope, element),
             beta[position]: _parameter(beta, scope, element)}
    return group, position, stats, stats[var] + eps, local


@cache
def reduces_to_layernorm(shape: tuple[int, int, int], scope: str) -> bool:
    """Every output of the seed's formula equals LN's definition on the element's group (d = its size), exactly."""
    for element, output in written_out(shape, scope).items():
        group, position, _, radicand, local = _layernorm_of_group(shape, scope, element)
        layernorm = concrete(expressions.LN_DEFINITION.subs(i, position), len(group)).xreplace(local)
        if not checks.zero_with_root(output - layernorm, radicand):
            return False
    return True


@cache
def jacobian_is_blockwise_layernorm(shape: tuple[int, int, int], scope: str) -> bool:
    """dy/dx over the whole batch: 0 between elements of different groups; within a group, the derived LN Jacobian
    (d = the group's size, gamma of the output's element): every entry, exactly."""
    outputs = written_out(shape, scope)
    derived = expressions.jacobian("ln")
    for element, output in outputs.items():
        group, position, stats, radicand, local = _layernorm_of_group(shape, scope, element)
        for other in outputs:
            derivative = sp.diff(output, x[other])
            if x[other] not in group:
                if derivative != 0:
                    return False
                continue
            entry = derived.subs({i: position, j: group.index(x[other]) + 1, d: len(group)}).subs(stats)
            if not checks.zero_with_root(derivative - entry.xreplace(local), radicand):
                return False
    return True


def _all(check, scope: str) -> bool:
    return all(check(shape, scope) for shape in SHAPES[scope])


def _values(shape: tuple[int, int, int], scope: str, values: list, epsilon) -> list:
    """The norm of the scope on a rational batch (values in (n, c, s) order), exactly, with gamma = 1, beta = 0."""
    outputs = written_out(shape, scope)
    given = {**dict(zip((x[e] for e in outputs), map(sp.Rational, values), strict=True)), eps: sp.Rational(epsilon)}
    for element in outputs:
        given.update({_parameter(gamma, scope, element): 1, _parameter(beta, scope, element): 0})
    return [sp.radsimp(output.xreplace(given)) for output in outputs.values()]


# --- symbols of the claims ------------------------------------------------------------------------------------------
s = sp.sqrt(var + eps)
gc, bc = sp.symbols("gamma_c beta_c", real=True)  # one channel's weight and bias
momentum = sp.Symbol("m", positive=True)
running_mean, running_var = sp.Symbol("mu_R", real=True), sp.Symbol("sigma_R^2", nonnegative=True)
statistic = sp.Symbol("b", real=True)  # the batch's statistic entering a running average
steps = sp.Symbol("t", integer=True, positive=True)
other_sample = sp.IndexedBase("x'", real=True)  # an element of another row: another sample (LN), another channel

BESSEL = d / (d - 1)  # torch's unbiased estimate: n/(n - 1) times the population variance
RUNNING_UPDATE = (1 - momentum) * running_mean + momentum * statistic  # new = (1 - m) old + m batch


def _channel(expr: sp.Expr) -> sp.Expr:
    """expr with LN's per-element gamma_i, beta_i replaced by one channel's gamma_c, beta_c."""
    return expr.xreplace({gamma[i]: gc, beta[i]: bc})


def _update(old: sp.Expr, new: sp.Expr, factor: sp.Expr = momentum) -> sp.Expr:
    return RUNNING_UPDATE.xreplace({running_mean: old, statistic: new, momentum: factor})


# --- derivations ------------------------------------------------------------------------------------------------
SEED_002_DATA = (((0.1, 0.2, 0.3, 0.4), (1.0, 0.9, 1.2, -1.1), (1.1, 0.3, -0.6, 0.2)),
                 ((0.3, 0.8, -0.2, -0.3), (-0.2, 2.1, 1.1, 0.2), (0.4, 0.7, -2.1, 0.5)))
# The seed's printed outputs per channel, in (n, h, w) order: the manual implementation's, then torch's.
SEED_002_PRINTED = {
    "manual": ((-0.308592, 0.0, 0.308592, 0.617184, 0.308592, 1.851552, -1.234368, -1.542960),
               (0.380186, 0.271561, 0.597435, -1.900928, -0.923308, 1.575055, 0.488810, -0.488810),
               (1.110815, 0.254283, -0.709316, 0.147216, 0.361349, 0.682549, -2.315313, 0.468416)),
    "torch": ((-0.308592, -0.0, 0.308592, 0.617184, 0.308592, 1.851552, -1.234368, -1.542960),
              (0.380186, 0.271561, 0.597435, -1.900928, -0.923308, 1.575054, 0.488810, -0.488810),
              (1.110815, 0.254283, -0.709316, 0.147216, 0.361350, 0.682549, -2.315314, 0.468416)),
}


def _seed_example_outputs() -> list[list[sp.Expr]]:
    """The exact BatchNorm outputs (eps = 1e-5, gamma = 1, beta = 0) of seed 002's (2, 3, 2, 2) batch, per channel."""
    values = [sp.Rational(str(v)) for sample in SEED_002_DATA for channel in sample for v in channel]
    outputs = _values((2, 3, 4), "batch", values, sp.Rational(1, 10**5))
    by_element = dict(zip(elements((2, 3, 4)), outputs, strict=True))
    return [[by_element[(n, c, s_)] for n in (1, 2) for s_ in range(1, 5)] for c in (1, 2, 3)]


def _seed_prints_within_a_millionth() -> bool:
    """Both printed columns agree with the exact value to within 1e-6 (the print's rounding and float32's error)."""
    exact = _seed_example_outputs()
    return all(abs(sp.N(value - printed, 30)) <= sp.Rational(1, 10**6)
               for column in SEED_002_PRINTED.values() for channel, row in zip(exact, column, strict=True)
               for value, printed in zip(channel, row, strict=True))


def _seed_disagreements_are_at_rounding_ties() -> bool:
    """Where torch's and the manual print differ, the exact value is within 1e-7 of a 6-decimal rounding tie."""
    exact = _seed_example_outputs()
    manual, torch_ = SEED_002_PRINTED["manual"], SEED_002_PRINTED["torch"]
    ties = []
    for channel, row_m, row_t in zip(exact, manual, torch_, strict=True):
        for value, a, b in zip(channel, row_m, row_t, strict=True):
            if a != b:
                scaled = sp.N(value * 10**6, 30)
                ties.append(abs(scaled - sp.floor(scaled) - sp.Rational(1, 2)) < sp.Rational(1, 10))
    return len(ties) == 3 and all(ties)


def _forward() -> Derivation:
    channel0 = [sp.Rational(str(v)) for sample in SEED_002_DATA for v in sample[0]]
    mean0 = sum(channel0) / 8
    eighth = sp.Rational(1, 8)
    shown_mean = sp.Mul(eighth, sp.Add(*channel0, evaluate=False), evaluate=False)
    shown_variance = sp.Mul(eighth, sp.Add(*[sp.Pow(v - mean0, 2, evaluate=False) for v in channel0], evaluate=False),
                            evaluate=False)
    return Derivation((
        Fact(r"\mu_c = \tfrac{1}{NS}\sum_{n,s} x_{n,c,s},\ \sigma_c^2 = \tfrac{1}{NS}\sum_{n,s}(x_{n,c,s}-\mu_c)^2:"
             r"\ y_{n,c,s} = \mathrm{LN}(x_{:,c,:}; d = NS)\ \text{with } \gamma_c, \beta_c,\ (N,C,S) \in "
             r"\{(2,2,1),(3,1,1),(2,1,2),(1,2,2)\}",
             "the seed's formula (sums over the batch and the spatial axes) written out on a symbolic batch equals "
             "LayerNorm's definition on each channel's N S elements, every output exactly",
             lambda: _all(reduces_to_layernorm, "batch")),
        Equal(shown_mean, sp.Rational(1, 5), r"seed 002's batch, channel 0: $\mu_0 = 1.6/8$ (the seed prints "
              r"0.20000000298, float32's 0.2)"),
        Equal(shown_variance, sp.Rational(21, 200),
              r"$\sigma_0^2 = 0.105$, the population variance (\texttt{unbiased=False}) the seed's manual code uses"),
        Fact(r"|y^{\text{printed}} - y^{\text{exact}}| \le 10^{-6}\ \text{for all 24 outputs, torch's and the "
             r"manual ones}", "the exact outputs of the seed's (2, 3, 2, 2) batch at eps = 1e-5 against both printed "
             "columns", _seed_prints_within_a_millionth),
        Fact(r"y_{1,1,0,1} = 1.5750545\ldots,\ y_{1,2,0,0} = 0.3613495\ldots,\ y_{1,2,1,0} = -2.3153135\ldots"
             r"\ (n, c, h, w \text{ from 0, as the seed prints them})",
             "the three printed disagreements between torch and the manual code sit within 1e-7 of a rounding tie of "
             "the sixth decimal: float32 rounding, not a difference of formula",
             _seed_disagreements_are_at_rounding_ties),
    ))


def _jacobian() -> Derivation:
    vjp = gc / s * (dy[j] - row_mean(dy[k]) - (x[j] - mu) / s * row_mean(dy[k] * (x[k] - mu) / s))
    frozen = gc * (x[i] - mu) / s + bc  # the statistics held constant
    return Derivation((
        Fact(r"\frac{\partial y_{n,c,s}}{\partial x_{n',c',s'}} = \delta_{cc'}\,\gamma_c\,(J_{\mathrm{LN}})_{ab}"
             r"(x_{:,c,:};\ d = NS),\ a = (n,s),\ b = (n',s'),\ (N,C,S) \in \{(2,2,1),(3,1,1),(2,1,2),(1,2,2)\}",
             "explicit differentiation of the written-out BatchNorm with respect to every element of the batch, "
             "compared exactly with the derived LN Jacobian of the channel (claim ln.jacobian): block-diagonal over "
             "channels, dense over the samples of a channel",
             lambda: _all(jacobian_is_blockwise_layernorm, "batch")),
        Equal(row_sum(dy[i] * _channel(expressions.jacobian("ln")), i), vjp,
              r"the VJP over the channel's $n = NS$ elements: $\frac{\partial L}{\partial x_b} = \frac{\gamma_c}{s}"
              r"(g_b - \bar{g} - \hat{x}_b\,\overline{g\hat{x}})$, the means taken over the whole batch"),
        Equal(sp.Derivative(frozen, x[j]), gc * delta(i, j) / s,
              r"a backward that holds $\mu_c, \sigma_c^2$ constant (a known bug) differentiates only the numerator"),
        Equal(vjp - row_sum(dy[i] * gc * delta(i, j) / s, i),
              -gc / s * (row_mean(dy[k]) + (x[j] - mu) / s * row_mean(dy[k] * (x[k] - mu) / s)),
              r"the terms it drops: the paths through the batch mean and variance"),
        Fact(r"\frac{\partial L}{\partial\gamma_c} = \sum_{n,s} g_{n,c,s}\hat{x}_{n,c,s},\ "
             r"\frac{\partial L}{\partial\beta_c} = \sum_{n,s} g_{n,c,s}:\ (N,C,S) = (2,2,1)",
             "per-channel parameter gradients of the written-out batch, summed over the samples and the spatial "
             "elements", _parameter_gradients_match),
    ))


def _parameter_gradients_match() -> bool:
    shape = (2, 2, 1)
    outputs = written_out(shape, "batch")
    upstream = {element: dy[element] for element in outputs}
    loss = sum(upstream[e] * y for e, y in outputs.items())
    for channel in (1, 2):
        mine = [e for e in outputs if e[1] == channel]
        mean, variance = seed_statistics(shape, "batch", mine[0])
        xhat = sum(upstream[e] * (x[e] - mean) / sp.sqrt(variance + eps) for e in mine)
        if sp.simplify(sp.diff(loss, gamma[channel]) - xhat) != 0:
            return False
        if sp.expand(sp.diff(loss, beta[channel]) - sum(upstream[e] for e in mine)) != 0:
            return False
    return True


def _coupling_witness() -> bool:
    """(N, C, S) = (2, 1, 2), eps = 0: changing sample 2 from (2, 0) to (4, 0) changes sample 1's outputs."""
    before = _values((2, 1, 2), "batch", [1, -1, 2, 0], 0)
    after = _values((2, 1, 2), "batch", [1, -1, 4, 0], 0)
    return before[:2] != after[:2]


def _coupling() -> Derivation:
    cross = _channel(expressions.jacobian("ln")).subs(delta(i, j), 0)
    xhat_i, xhat_j = (x[i] - mu) / s, (x[j] - mu) / s
    two = concrete(expressions.LN_DEFINITION.subs(i, 1), 2)
    two_scale = ((x[1] - x[2]) / 2) ** 2 + eps
    return Derivation((
        Equal(cross, -gc / (d * s) * (1 + xhat_i * xhat_j),
              r"two different elements $a \ne b$ of channel $c$ (different samples included): "
              r"$\partial y_a/\partial x_b = -\frac{\gamma_c}{ns}(1 + \hat{x}_a\hat{x}_b)$, $n = NS$"),
        Fact(r"\partial y_{n,c,s}/\partial x_{n',c',s'} = 0\ \text{for } c' \ne c;\ \text{dense in } (n', s')",
             "the written-out batch Jacobian (claim bn.jacobian): across channels nothing couples",
             lambda: _all(jacobian_is_blockwise_layernorm, "batch")),
        Fact(r"N = 2,\ C = S = 1,\ \epsilon = 0:\ x = (1,-1 \mid 2,0) \to (1,-1 \mid 4,0) \text{ changes } y_{1,:,:}",
             "witness: replacing sample 2 moves sample 1's outputs (seed 003's coupling, exactly)",
             _coupling_witness),
        Equal(sp.diff(two, x[2]), -gamma[1] * eps / (2 * two_scale ** sp.Rational(3, 2)),
              r"$n = 2$: $\hat{x}_2 = -\hat{x}_1$ and $\hat{x}_1^2 = \sigma^2/(\sigma^2+\epsilon)$, so the coupling "
              r"is $-\gamma\epsilon/(2s^3)$: it vanishes at $\epsilon = 0$ (then $y = \pm\gamma + \beta$, "
              r"a sign)"),
        Equal(sp.Derivative(expressions.LN_DEFINITION, other_sample[j]), 0,
              r"LayerNorm over a sample's own features: no output depends on another sample's element "
              r"(block-diagonal over samples, claim ln.row\_independence)"),
        Fact(r"\partial y_{n,:,:}/\partial x_{n',:,:} = 0\ (n' \ne n)\ \text{for LN over } (C, S):\ (N,C,S) \in "
             r"\{(2,2,1),(2,1,2)\}", "the written-out channel-wise LayerNorm of seed 002: samples decoupled",
             lambda: _all(jacobian_is_blockwise_layernorm, "layer")),
    ), notes=(r"Eval mode uses the running statistics: its Jacobian is diagonal and no sample moves another "
              r"(claim bn.eval).",))


def _running_statistics() -> Derivation:
    closed = (1 - momentum) ** steps * running_mean + (1 - (1 - momentum) ** steps) * statistic
    keras = sp.Symbol("m'", positive=True)
    total = sp.Symbol("A", real=True)  # the sum of the first t - 1 batch statistics
    return Derivation((
        Equal(row_sum((x[l] - MEAN_DEF) ** 2, l) / (d - 1), BESSEL * var,
              r"the unbiased estimate $\frac{1}{n-1}\sum_k (x_k-\mu)^2$ is $\frac{n}{n-1}\sigma^2$ ($n = NS$, "
              r"$\sigma^2$ the population variance the forward normalizes with)", aggregates=LN_AGGREGATES),
        Equal(_update(closed, statistic), closed.subs(steps, steps + 1),
              r"induction: $t$ updates with one statistic $b$ leave $(1-m)^t\mu_R + (1-(1-m)^t)b$ (applying the "
              r"update twice per step is $t \to 2t$)"),
        Equal(sp.Symbol("m_K", positive=True) * running_mean + (1 - sp.Symbol("m_K", positive=True)) * statistic,
              _update(running_mean, statistic, 1 - sp.Symbol("m_K", positive=True)),
              r"Keras' convention $\mathrm{new} = m_K\,\mathrm{old} + (1-m_K)\,b$ is torch's with $m = 1 - m_K$"),
        Equal(_update(running_mean, statistic, keras) - _update(running_mean, statistic, 1 - keras),
              (2 * keras - 1) * (statistic - running_mean),
              r"the inverted convention (torch's formula fed Keras' $m'$) lands $(2m'-1)(b - \mu_R)$ from the right "
              r"update: invisible only at $m' = 1/2$ or $\mu_R = b$"),
        Equal(_update(running_var, var) - _update(running_var, BESSEL * var), -momentum * var / (d - 1),
              r"a running variance fed the biased $\sigma^2$ lags by $m\sigma^2/(n-1)$ per update"),
        Equal(_update(sp.Symbol("r_0", real=True), statistic, 1), statistic,
              r"momentum None, first call ($t = 1$, factor $1/t = 1$): the initial value is forgotten"),
        Equal(_update(total / (steps - 1), statistic, 1 / steps), (total + statistic) / steps,
              r"momentum None, call $t$: factor $1/t$ turns the average of $t-1$ statistics into the average of $t$ "
              r"(a cumulative moving average, torch's \texttt{num\_batches\_tracked})"),
        Fact(r"\frac{n}{n-1}\Big|_{n=1} = \tilde\infty", "n = 1: the unbiased factor divides by zero (torch refuses "
             "such a training call, claim bn.degenerate)", lambda: BESSEL.subs(d, 1) is sp.zoo),
    ))


def _eval() -> Derivation:
    scale = gc / sp.sqrt(running_var + eps)
    eval_output = gc * (x[i] - running_mean) / sp.sqrt(running_var + eps) + bc
    training = _channel(expressions.output("ln"))
    return Derivation((
        Equal(eval_output, scale * x[i] + (bc - scale * running_mean),
              r"eval mode is the per-channel affine map $y = a_c x + b_c$, "
              r"$a_c = \gamma_c/\sqrt{\sigma_R^2+\epsilon}$, "
              r"$b_c = \beta_c - a_c\mu_R$"),
        Equal(sp.Derivative(eval_output, x[j]), scale * delta(i, j),
              r"its Jacobian is diagonal: no element, of the same sample or another, moves $y_i$"),
        Equal(sp.Derivative(eval_output, other_sample[j]), 0, r"nor does any element of another sample or channel"),
        Equal(eval_output.subs({running_mean: mu, running_var: BESSEL * var}) - bc,
              (training - bc) * sp.sqrt((var + eps) / (BESSEL * var + eps)),
              r"with the statistics of the very batch (momentum 1, torch's unbiased $\sigma_R^2$) eval still differs "
              r"from training by the factor $\sqrt{(\sigma^2+\epsilon)/(\frac{n}{n-1}\sigma^2+\epsilon)}$"),
    ))


def _held(weight: sp.Expr, centred: sp.Expr, variance: sp.Expr, bias: sp.Expr) -> sp.Expr:
    """weight centred / sqrt(variance + eps) + bias, its parts shown as given (SymPy would cancel them at once)."""
    root = sp.Pow(sp.Add(variance, eps, evaluate=False), sp.Rational(-1, 2), evaluate=False)
    return sp.Add(sp.Mul(weight, centred, root, evaluate=False), bias, evaluate=False)


def _degenerate() -> Derivation:
    single = concrete(expressions.LN_DEFINITION, 1).subs(i, 1).xreplace({gamma[1]: gc, beta[1]: bc})
    held = _held(gc, sp.Add(x[1], -x[1], evaluate=False), sp.Pow(sp.Add(x[1], -x[1], evaluate=False), 2,
                                                                  evaluate=False), bc)
    constant_jacobian = expressions.jacobian("ln").subs({x[i]: mu, x[j]: mu, var: 0})
    return Derivation((
        Equal(held, single, r"$n = NS = 1$ (one sample, one spatial element): the definition has $\mu_c = x_1$, "
              r"$\sigma_c^2 = 0$, so $y = \beta_c$ for $\epsilon > 0$ (0/0 at $\epsilon = 0$)"),
        Equal(sp.Derivative(held, x[1]), 0, r"and no gradient reaches $x$"),
        Equal(_held(gamma[i], sp.Add(mu, -mu, evaluate=False), sp.S.Zero, beta[i]),
              expressions.output("ln").subs({x[i]: mu, var: 0}),
              r"a constant channel ($x_i = \mu_c$, $\sigma_c^2 = 0$, any $n$): every output is $\beta_c$"),
        Equal(constant_jacobian, gamma[i] * (delta(i, j) - 1 / d) / sp.sqrt(eps),
              r"where its Jacobian is $\frac{\gamma_c}{\sqrt\epsilon}(I - \mathbf{1}\mathbf{1}^T/n)$: the largest "
              r"gain $1/\sqrt\epsilon$ of claim bn.spectral\_norm"),
        Fact(r"\frac{n}{n-1}\Big|_{n=1} = \tilde\infty", "n = 1: the running variance's unbiased factor is undefined",
             lambda: BESSEL.subs(d, 1) is sp.zoo),
    ), notes=(r"torch 2.13 refuses a training call with $n = 1$: \texttt{ValueError: Expected more than 1 value per "
              r"channel when training} (\texttt{F.batch\_norm} with or without running statistics; "
              r"tests/test\_proofs\_batchnorm.py); eval mode at $n = 1$ is the affine map of claim bn.eval.",))


def _single_element_gives_beta() -> bool:
    outputs = written_out((1, 2, 1), "batch")
    given = {x[(1, 1, 1)]: 3, x[(1, 2, 1)]: -1, eps: sp.Rational(1, 10**5)}
    return [sp.radsimp(y.xreplace(given)) for y in outputs.values()] == [beta[1], beta[2]]


def _single_sample() -> Derivation:
    def same(channels: int, spatial: int) -> bool:
        batch = written_out((1, channels, spatial), "batch")
        flat, instance = groupnorm.written_out(channels, channels, spatial)
        rename = {x[(1, c, s_)]: flat[(c - 1) * spatial + s_ - 1] for c in range(1, channels + 1)
                  for s_ in range(1, spatial + 1)}
        return all(sp.simplify(output.xreplace(rename) - expected) == 0
                   for output, expected in zip(batch.values(), instance, strict=True))

    return Derivation((
        Fact(r"\mathrm{BN}_{\text{train}}(x) = \mathrm{IN}(x) = \mathrm{GN}_{G=C}(x)\ \text{for } N = 1:\ (C,S) \in "
             r"\{(2,2),(1,3),(3,1)\}", "the written-out BatchNorm of one sample against the written-out GroupNorm "
             "with one channel per group (InstanceNorm), every output exactly",
             lambda: same(2, 2) and same(1, 3) and same(3, 1)),
        Fact(r"N = S = 1,\ x = (3, -1),\ \epsilon = 10^{-5}:\ y = (\beta_1, \beta_2)",
             r"at one spatial element both are the degenerate $\beta_c$ (claims bn.degenerate, gn.degenerate)",
             _single_element_gives_beta),
    ), notes=(r"Only in training mode: eval mode normalizes with the running statistics (claim bn.eval), and the "
              r"running statistics of BN and of InstanceNorm agree for $N = 1$ only (claim in.running\_statistics).",))


def _spectral_gram_is_max_block() -> bool:
    """(N, C, S) = (2, 2, 2), gamma = (2, -1/2): the largest eigenvalue of J^T J (rational) is
    max_c gamma_c^2 / s_c^2."""
    shape, weights = (2, 2, 2), {gamma[1]: sp.Integer(2), gamma[2]: sp.Rational(-1, 2)}
    values = [3, 0, 1, -1, 2, 5, 0, 0]
    outputs = written_out(shape, "batch")
    given = {**dict(zip((x[e] for e in outputs), map(sp.Integer, values), strict=True)), eps: sp.Rational(1, 3),
             **weights}
    jac = sp.Matrix([[sp.diff(y, x[e]) for e in outputs] for y in outputs.values()]).xreplace(given)
    gram = (jac.T * jac).applyfunc(sp.radsimp)
    largest = max(gram.eigenvals())
    expected = []
    for channel in (1, 2):
        _, variance = seed_statistics(shape, "batch", (1, channel, 1))
        expected.append(weights[gamma[channel]] ** 2 / (variance + eps).xreplace(given))
    return sp.simplify(largest - max(expected)) == 0


def _spectral_norm() -> Derivation:
    epsp = sp.Symbol("epsilon", positive=True)
    scale = sp.sqrt(var + epsp)
    eigen = expressions.eigenvalues("ln")
    return Derivation((
        Fact(r"J_{\mathrm{BN}} = \mathrm{blockdiag}_c\big(\gamma_c J_{\mathrm{LN}}(x_{:,c,:}; d = NS)\big)",
             "the batch Jacobian (claim bn.jacobian), up to a permutation of the elements",
             lambda: _all(jacobian_is_blockwise_layernorm, "batch")),
        Equal(eigen["perp"], 1 / s, r"each block's eigenvalues (claim ln.spectral\_norm): $1/s_c$ on "
              r"$\{\mathbf{1},\hat{x}\}^\perp$ ($n \ge 3$)"),
        Equal(eigen["row"], eps / s**3, r"$\epsilon/s_c^3$ on $\hat{x}$ (the norm for $n = 2$), 0 on $\mathbf{1}$"),
        Fact(r"\|J_{\mathrm{BN}}\|_2 = \max_c |\gamma_c|\,\|J_{\mathrm{LN}}(x_{:,c,:})\|_2:\ (N,C,S) = (2,2,2),\ "
             r"\gamma = (2,-\tfrac12),\ \epsilon = \tfrac13",
             "a block-diagonal matrix's norm is its largest block's: the exact spectrum of $J^TJ$ (a rational matrix) "
             "of the written-out batch", _spectral_gram_is_max_block),
        AtMost(1 / scale, 1 / sp.sqrt(epsp), r"so $\|J_{\mathrm{BN}}\|_2 \le \max_c|\gamma_c|/\sqrt\epsilon$, "
               r"attained by a constant channel (claim bn.degenerate)",
               certificate=var / (scale * sp.sqrt(epsp) * (scale + sp.sqrt(epsp)))),
    ), notes=(r"The sizes are the channel's $n = NS$, not the batch: $N = 1$, $S = 2$ is the $d = 2$ case "
              r"$\epsilon/s^3$.",))


def _channel_layernorm() -> Derivation:
    def is_groupnorm_with_one_group(channels: int, spatial: int) -> bool:
        layer = written_out((1, channels, spatial), "layer")
        flat, grouped = groupnorm.written_out(channels, 1, spatial)
        rename = {x[(1, c, s_)]: flat[(c - 1) * spatial + s_ - 1] for c in range(1, channels + 1)
                  for s_ in range(1, spatial + 1)}
        per_channel = {gamma[c, s_]: gamma[c] for c in range(1, channels + 1) for s_ in range(1, spatial + 1)}
        per_channel.update({beta[c, s_]: beta[c] for c in range(1, channels + 1) for s_ in range(1, spatial + 1)})
        return all(sp.simplify(output.xreplace(rename).xreplace(per_channel) - expected) == 0
                   for output, expected in zip(layer.values(), grouped, strict=True))

    return Derivation((
        Fact(r"\mu_n = \tfrac{1}{CS}\sum_{c,s} x_{n,c,s}, \ldots:\ y_{n,:,:} = \mathrm{LN}(x_{n,:,:}; d = CS)\ "
             r"\text{with } \gamma_{c,s}, \beta_{c,s},\ (N,C,S) \in \{(2,2,1),(2,1,2)\}",
             "seed 002's CNN LayerNorm written out equals LayerNorm's definition on each sample's C S elements "
             "(torch's nn.LayerNorm over (C, H, W): elementwise weight and bias of that shape)",
             lambda: _all(reduces_to_layernorm, "layer")),
        Fact(r"\partial y_{n,:,:}/\partial x_{n',:,:} = \delta_{nn'}\,\mathrm{diag}(\gamma) J_{\mathrm{LN}}"
             r"(x_{n,:,:}; d = CS)", "explicit differentiation of the written-out batch: the samples are decoupled, "
             "each block the derived LN Jacobian", lambda: _all(jacobian_is_blockwise_layernorm, "layer")),
        Fact(r"\gamma_{c,s} = \gamma_c:\ \mathrm{LN}_{(C,S)} = \mathrm{GN}_{G=1},\ (C,S) \in \{(2,2),(3,1)\}",
             "with one weight per channel it is GroupNorm with one group (claims gn.*)",
             lambda: is_groupnorm_with_one_group(2, 2) and is_groupnorm_with_one_group(3, 1)),
    ))


def _instance_norm() -> Derivation:
    return Derivation((
        Fact(r"\mu_{n,c} = \tfrac1S\sum_s x_{n,c,s}, \ldots:\ y_{n,c,:} = \mathrm{LN}(x_{n,c,:}; d = S)\ "
             r"\text{with } \gamma_c, \beta_c,\ (N,C,S) \in \{(2,2,2),(1,1,3)\}",
             "seed 002's InstanceNorm written out equals LayerNorm's definition on each (sample, channel)'s S elements",
             lambda: _all(reduces_to_layernorm, "instance")),
        Fact(r"\partial y_{n,c,:}/\partial x_{n',c',:} = \delta_{nn'}\delta_{cc'}\,\gamma_c J_{\mathrm{LN}}"
             r"(x_{n,c,:}; d = S)", "explicit differentiation of the written-out batch: samples and channels "
             "decoupled", lambda: _all(jacobian_is_blockwise_layernorm, "instance")),
    ), notes=(r"With one channel per group this is GroupNorm with $G = C$ (claim gn.jacobian); $S = 1$ gives "
              r"$\beta_c$ (claim gn.degenerate), and torch refuses it in training.",))


def _total_variance_holds(samples: int, spatial: int) -> bool:
    """sigma_c^2 over all N S elements = mean_n v_n + var_n(mu_n), written out (equal-size instances)."""
    shape = (samples, 1, spatial)
    whole_mean, whole = seed_statistics(shape, "batch", (1, 1, 1))
    instance = [seed_statistics(shape, "instance", (n, 1, 1)) for n in range(1, samples + 1)]
    means = [m for m, _ in instance]
    within = sum(v for _, v in instance) / samples
    between = sum((m - sum(means) / samples) ** 2 for m in means) / samples
    return sp.expand(sum(means) / samples - whole_mean) == 0 and sp.expand(whole - within - between) == 0


def _instance_running_statistics() -> Derivation:
    samples, spatial = sp.symbols("N S", integer=True, positive=True)
    within, between = sp.symbols("W B", nonnegative=True)
    instance_increment = spatial / (spatial - 1) * within
    batch_increment = samples * spatial / (samples * spatial - 1) * (within + between)
    agreeing = (samples - 1) * within / (samples * (spatial - 1))
    return Derivation((
        Fact(r"\mu_c = \tfrac1N\sum_n \mu_{n,c},\ \sigma_c^2 = \underbrace{\tfrac1N\sum_n \sigma_{n,c}^2}_{W} + "
             r"\underbrace{\tfrac1N\sum_n(\mu_{n,c}-\mu_c)^2}_{B}:\ (N,S) \in \{(2,2),(3,2),(2,3)\}",
             r"the written-out batch: the mean of the instance means is BatchNorm's channel mean (so torch's running "
             r"mean update of InstanceNorm, $(1-m)\mu_R + \frac mN\sum_n \mu_{n,c}$, is BatchNorm's exactly), and "
             r"the law of total variance splits BatchNorm's variance (equal-size instances)",
             lambda: all(_total_variance_holds(*shape) for shape in ((2, 2), (3, 2), (2, 3)))),
        Equal(batch_increment - instance_increment,
              samples * spatial / (samples * spatial - 1) * (between - agreeing),
              r"its variance update averages the instances' unbiased $\frac{S}{S-1}\sigma_{n,c}^2$; BatchNorm adds "
              r"$\frac{NS}{NS-1}(W+B)$: the two agree iff $B = \frac{(N-1)W}{N(S-1)}$"),
        Equal(sp.Mul((samples - 1) * var / (samples * spatial), sp.Pow((spatial - 1) * var / spatial, -1,
                                                                      evaluate=False), evaluate=False),
              agreeing / within,
              r"that is the ratio $\mathbb{E}B/\mathbb{E}W$ of i.i.d. elements of variance $\sigma^2$ (the textbook "
              r"$\mathbb{E}B = \frac{N-1}{N}\frac{\sigma^2}{S}$, $\mathbb{E}W = \frac{S-1}{S}\sigma^2$): both "
              r"estimate $\sigma^2$ without bias there; per-instance offsets (what InstanceNorm removes) raise $B$, "
              r"and only BatchNorm's running variance sees them"),
    ), notes=(r"\texttt{nn.InstanceNorm1d} (2d, 3d) with \texttt{track\_running\_stats=True} and "
              r"\texttt{momentum=None} passes momentum 0.0 to "
              r"\texttt{F.instance\_norm}: its running statistics never change (not a cumulative average), and "
              r"$S = 1$ in training raises \texttt{Expected more than 1 spatial element when training} (torch 2.13, "
              r"tests/test\_proofs\_batchnorm.py). Eval mode with tracked statistics is the affine map of claim "
              r"bn.eval.",))



# --- the claims -------------------------------------------------------------------------------------------------
SEED_002_BATCHNORM = (
    "Batch Normalization computes, for each channel, the mean and variance over the whole mini-batch and all spatial "
    "positions, mu_c = 1/(NHW) sum_{n,h,w} x_{n,c,h,w}, sigma_c^2 = 1/(NHW) sum_{n,h,w} (x_{n,c,h,w} - mu_c)^2, "
    "normalizes every activation of the channel with them, xhat = (x - mu_c)/sqrt(sigma_c^2 + eps), and applies a "
    "per-channel affine map y = gamma_c xhat + beta_c. torch's nn.BatchNorm2d in training mode and a manual "
    "implementation (the variance taken with unbiased=False) print the same normalized values.")
SEED_002_CROSS_SAMPLE = (
    "BatchNorm computes, within a batch, the mean and variance of each feature channel: the statistics that normalize "
    "a single sample come from all the other samples of the same batch. This cross-sample statistical dependence lets "
    "the model implicitly use the distribution within the batch (a regularizing effect), but makes its performance "
    "depend heavily on the batch size.")
SEED_003_COUPLING = (
    "When BatchNorm acts on a batch mixing real and generated samples (in a GAN discriminator), it creates an "
    "unnecessary coupling between them: the normalization of a real sample depends on the statistics of the generated "
    "samples in the same batch, and vice versa. This information leak gives the generator spurious gradient signals. "
    "Layer Normalization computes its statistics inside each sample independently and solves the problem completely: "
    "replacing BN by LN in the discriminator decouples the processing of real and generated samples.")
SEED_002_SINGLE_SAMPLE = (
    "Take the extreme case N = 1: the commonality BatchNorm looks for no longer exists, since within a channel the "
    "sample can only refer to itself, not to several images. BN degenerates into a 'self-referencing' transform, "
    "which is mathematically equivalent to Instance Normalization.")
SEED_002_LIPSCHITZ = (
    "BN helps because it reparameterizes the optimization and smooths the loss landscape: smoothness in the sense of "
    "a Lipschitz constant L with ||f(x1) - f(x2)|| <= L ||x1 - x2||; a small L means gentle slopes and predictable "
    "gradients.")
SEED_002_CNN_LAYERNORM = (
    "LayerNorm in a CNN computes, for a single training sample, the mean and variance over all its feature dimensions "
    "C, H, W (mu_n = 1/(CHW) sum_{c,h,w} x_{n,c,h,w}, sigma_n^2 likewise), normalizes all its features with these "
    "statistics of the sample and applies an element-wise affine map (the formula writes y = gamma xhat + beta); the "
    "computation happens entirely inside the single sample and does not depend on any other sample of the batch.")
SEED_002_INSTANCE = (
    "Instance Normalization normalizes one channel of one sample over its spatial dimensions H x W, N x C times: "
    "mu_{n,c} = 1/(HW) sum_{h,w} x_{n,c,h,w}, sigma_{n,c}^2 likewise, y = gamma_c xhat + beta_c. Samples are "
    "independent (no statistic crosses samples) and channels are independent (none crosses channels).")

CLAIMS = (
    Claim("bn.forward", "BatchNorm in training mode: LayerNorm over each channel's N x spatial elements", "002",
          SEED_002_BATCHNORM,
          r"In training mode $y_{n,c,s} = \gamma_c\frac{x_{n,c,s} - \mu_c}{\sqrt{\sigma_c^2 + \epsilon}} + \beta_c$ "
          r"with "
          r"$\mu_c, \sigma_c^2$ the mean and population variance of channel $c$'s $n = NS$ elements: LayerNorm of the "
          r"channel's elements ($d = n$) with the channel's $\gamma_c, \beta_c$ (x viewed as $[C, NS]$).",
          (r"training mode (batch statistics)", r"$\sigma_c^2 + \epsilon > 0$ for every channel",
           r"$n = NS \ge 2$ in torch, which refuses $n = 1$ (claim bn.degenerate)"), "holds",
          r"The seed's formula is exactly per-channel LayerNorm of the channel's $NS$ elements, with the population "
          r"variance its manual code uses. Its printed outputs agree with the exact values to $10^{-6}$; the three "
          r"sixth-decimal differences between torch and the manual code are float32 rounding at a rounding tie, not a "
          r"difference of formula. The seed leaves out what makes torch's module differ from the manual code: the "
          r"running statistics it updates (claim bn.running\_statistics) and eval mode (claim bn.eval).",
          _forward),
    Claim("bn.jacobian", "Jacobian of BatchNorm with respect to the whole batch", "002", SEED_002_CROSS_SAMPLE,
          r"$\frac{\partial y_{n,c,s}}{\partial x_{n',c',s'}} = \delta_{cc'}\frac{\gamma_c}{s_c}\left(\delta_{ab} - "
          r"\frac1n - \frac{\hat{x}_a\hat{x}_b}{n}\right)$ with $a = (n,s)$, $b = (n',s')$, $n = NS$, "
          r"$s_c = \sqrt{\sigma_c^2+\epsilon}$; "
          r"$\frac{\partial L}{\partial x_b} = \frac{\gamma_c}{s_c}(g_b - \bar{g} - "
          r"\hat{x}_b\overline{g\hat{x}})$ (means over the channel's $n$ elements of the whole batch), "
          r"$\frac{\partial L}{\partial\gamma_c} = \sum_{n,s} g\hat{x}$, $\frac{\partial L}{\partial\beta_c} = "
          r"\sum_{n,s} g$. A backward holding $\mu_c, \sigma_c^2$ constant gives $\gamma_c g_b/s_c$ and misses "
          r"$-\frac{\gamma_c}{s_c}(\bar{g} + \hat{x}_b\overline{g\hat{x}})$.",
          (r"training mode", r"$\sigma_c^2 + \epsilon > 0$"), "holds",
          r"Exactly as the seed says: each sample's normalization, and its gradient, depends on every sample of the "
          r"batch through its channel's statistics, and on nothing of other channels.",
          _jacobian),
    Claim("bn.coupling", "BatchNorm couples the samples of a batch; LayerNorm does not", "003", SEED_003_COUPLING,
          r"In training mode, for two elements $a \ne b$ of one channel (in particular of two different samples) "
          r"$\partial y_a/\partial x_b = -\frac{\gamma_c}{ns_c}(1 + \hat{x}_a\hat{x}_b)$, nonzero unless "
          r"$\hat{x}_a\hat{x}_b = -1$; across channels it is 0. At $n = 2$ it is $-\gamma_c\epsilon/(2s_c^3)$, zero "
          r"for $\epsilon = 0$. LayerNorm over each sample's own axes (the features, or $(C, *)$) has "
          r"$\partial y_n/\partial x_{n'} = 0$ for $n' \ne n$.",
          (r"training mode (batch statistics; eval mode has none, claim bn.eval)",
           r"the real and generated samples share the batch, hence each channel's statistics",
           r"$n = NS \ge 2$, $\sigma_c^2 + \epsilon > 0$"), "holds only when",
          r"The coupling is real and exact in training mode when real and generated samples are normalized in one "
          r"batch: replacing a sample moves every other sample's outputs (witness above), to first order by the "
          r"derived entry. It disappears in eval mode, when the two kinds are normalized in separate batches, and for "
          r"$n = 2$ at $\epsilon = 0$. LayerNorm's decoupling of samples is exact, but only for LN over each sample's "
          r"own axes; it still couples the features within a sample, and ``solves the problem completely'' and "
          r"``more stable gradients'' are training-dynamics claims this derivation does not establish.",
          _coupling),
    Claim("bn.running_statistics", "BatchNorm's running statistics: momentum, Bessel's factor, momentum None", "",
          "torch.nn.BatchNorm (issue 28): running_mean = (1 - momentum) running_mean + momentum batch_mean, "
          "running_var likewise with the unbiased batch variance; momentum=None: a cumulative moving average; Keras "
          "writes the momentum the other way round.",
          r"Each training call: $\mu_R \leftarrow (1-m)\mu_R + m\mu_c$, $\sigma_R^2 \leftarrow (1-m)\sigma_R^2 + m"
          r"\frac{n}{n-1}\sigma_c^2$ ($n = NS$, $\sigma_c^2$ the population variance the forward uses). After $t$ "
          r"calls with one statistic $b$: $(1-m)^t\mu_R + (1-(1-m)^t)b$. Momentum None: $m = 1/t$ at call $t$, the "
          r"plain average of the $t$ batch statistics. Keras' $m_K$ is $1 - m$; the inverted convention misses by "
          r"$(2m'-1)(b - \mu_R)$, a biased running variance by $m\sigma_c^2/(n-1)$.",
          (r"$n \ge 2$ (the unbiased factor $\frac{n}{n-1}$)",
           r"$0 \le m \le 1$ ($m = 0$ leaves the running statistics as they are), or momentum None"), "holds",
          r"torch's update, exactly as derived (tests/test\_proofs\_batchnorm.py checks the oracle against "
          r"\texttt{F.batch\_norm} and \texttt{nn.BatchNorm} for both conventions and momentum None).",
          _running_statistics),
    Claim("bn.eval", "BatchNorm in eval mode: a fixed per-channel affine map", "",
          "torch's BatchNorm in eval mode normalizes with the running statistics (issue 28).",
          r"$y = \gamma_c\frac{x - \mu_R}{\sqrt{\sigma_R^2 + \epsilon}} + \beta_c = a_c x + b_c$, $a_c = "
          r"\gamma_c/\sqrt{\sigma_R^2 + \epsilon}$, $b_c = \beta_c - a_c\mu_R$; its Jacobian is "
          r"$\mathrm{diag}(a_c)$: no coupling between samples or elements. Even with the batch's own statistics "
          r"(momentum 1) it differs from training by $\sqrt{(\sigma^2+\epsilon)/(\frac{n}{n-1}\sigma^2+\epsilon)}$.",
          (r"$\sigma_R^2 + \epsilon > 0$",), "holds",
          r"An affine map per channel, independent of the batch; a kernel that uses batch statistics in eval mode "
          r"is distinguishable by the coupling and by the factor above. torch's eval mode (BatchNorm, and "
          r"InstanceNorm with tracked statistics) is this map and leaves the running buffers unchanged (checked in "
          r"the tests).",
          _eval),
    Claim("bn.degenerate", "Degenerate BatchNorm: one element per channel, constant channels", "",
          "issue 28: one element per channel (variance 0, output beta); n = 1 makes the unbiased factor undefined.",
          r"With $n = NS = 1$ (or a constant channel, any $n$) $\sigma_c^2 = 0$ and every output is $\beta_c$; at "
          r"$n = 1$ the Jacobian is 0 and the running variance's $\frac{n}{n-1}$ is undefined, so torch refuses the "
          r"training call (a kernel that accepts it leaves the running variance alone or updates it with 0, never "
          r"with $0/0$); a constant channel's Jacobian is $\frac{\gamma_c}{\sqrt\epsilon}(I - \mathbf{1}"
          r"\mathbf{1}^T/n)$.",
          (r"$\epsilon > 0$ (at $\epsilon = 0$ both are 0/0, undefined)",), "holds only when",
          r"$\beta_c$ only for $\epsilon > 0$. torch 2.13 raises \texttt{ValueError: Expected more than 1 value per "
          r"channel when training} for $n = 1$ in training, with or without running statistics; eval mode accepts it.",
          _degenerate),
    Claim("bn.single_sample", "BatchNorm of one sample is InstanceNorm", "002", SEED_002_SINGLE_SAMPLE,
          r"For $N = 1$, training-mode BatchNorm equals InstanceNorm (GroupNorm with $G = C$) with the same "
          r"$\gamma_c, \beta_c$, element by element.",
          (r"training mode", r"$S \ge 2$ for a non-degenerate output (at $S = 1$ both give $\beta_c$, and torch "
           r"refuses the call)"), "holds only when",
          r"Exact in training mode. In eval mode BatchNorm normalizes with its running statistics, which no longer "
          r"depend on the sample: the equivalence is a training-mode one.",
          _single_sample),
    Claim("bn.spectral_norm", "Spectral norm of the training-mode BatchNorm Jacobian", "002", SEED_002_LIPSCHITZ,
          r"$\|J_{\mathrm{BN}}\|_2 = \max_c|\gamma_c|\,\|J_{\mathrm{LN}}(x_{:,c,:})\|_2$ with $d = n = NS$: "
          r"$\max_c|\gamma_c|/s_c$ for $n \ge 3$, $\epsilon/s_c^3$ per channel for $n = 2$, 0 for $n = 1$; always "
          r"$\le \max_c|\gamma_c|/\sqrt\epsilon$, attained by a constant channel.",
          (r"training mode", r"$\sigma_c^2 + \epsilon > 0$", r"the bound $1/\sqrt\epsilon$ needs $\epsilon > 0$"),
          "holds only when",
          r"This is the layer's own Lipschitz constant, not the loss landscape's: locally $\max_c|\gamma_c|/"
          r"\sqrt{\sigma_c^2+\epsilon}$, which is at most 1 only where $\sigma_c^2 + \epsilon \ge \gamma_c^2$; "
          r"globally $\max_c|\gamma_c|/\sqrt\epsilon$ ($\approx 316|\gamma|$ at $\epsilon = 10^{-5}$). The seed's "
          r"smoothing of the loss surface is an optimization claim outside what is derived here.",
          _spectral_norm, evidence=THEORY),
    Claim("bn.layout_invariance", "BatchNorm does not depend on memory layout", "", "(contract)",
          r"A channels-last input gives the contiguous input's output and running statistics (statistics over the "
          r"wrong axes of a channels-last $x$ break it); in training mode, an upstream gradient strided, transposed, "
          r"channels-last or expanded (stride 0: autograd's gradient of a summed loss) gives the contiguous one's "
          r"gradients.", (), "contract", "", no_derivation),
    Claim("bn.inputs_unmodified", "BatchNorm leaves its inputs alone", "", "(contract)",
          r"$x$, the weight, the bias and the upstream gradient are never written; the running buffers are written "
          r"once per training call (claim bn.running\_statistics) and never in eval mode (claim bn.eval).", (),
          "contract", "", no_derivation),
    Claim("cln.forward", "Channel-wise LayerNorm over (C, *) per sample", "002", SEED_002_CNN_LAYERNORM,
          r"$y_{n,:,:} = \mathrm{LN}(x_{n,:,:})$ over the sample's $CS$ elements with element-wise $\gamma_{c,s}, "
          r"\beta_{c,s}$ (torch's \texttt{nn.LayerNorm} over $[C, H, W]$); its batch Jacobian is block-diagonal over "
          r"samples, "
          r"each block $\mathrm{diag}(\gamma)J_{\mathrm{LN}}$ with $d = CS$; with one weight per channel it is "
          r"GroupNorm with $G = 1$.",
          (r"$\sigma_n^2 + \epsilon > 0$",), "holds",
          r"Exact, with the samples exactly independent. The seed's formula writes scalar $\gamma, \beta$ while its "
          r"text says element-wise; both are special cases of the element-wise map torch uses.",
          _channel_layernorm),
    Claim("cln.jacobian", "Channel-wise LayerNorm kernel gradients", "", "(contract)",
          r"$dx$, $d\gamma$, $d\beta$ of a LayerNorm over each sample's $(C, *)$ elements within the LayerNorm error "
          r"model of the sample ($d = CS$; claim cln.forward's Jacobian), $d\gamma$, $d\beta$ element-wise sums over "
          r"the samples.", (), "contract", "", no_derivation),
    Claim("cln.independence", "Channel-wise LayerNorm samples are independent", "", "(contract)",
          r"Replacing one sample changes no other sample's output, bit for bit (claim cln.forward: no statistic "
          r"crosses samples).", (), "contract", "", no_derivation),
    Claim("cln.layout_invariance", "Channel-wise LayerNorm does not depend on memory layout", "", "(contract)",
          r"A channels-last input gives the contiguous input's output; an upstream gradient strided, transposed, "
          r"channels-last or expanded (stride 0: autograd's gradient of a summed loss) gives the contiguous one's "
          r"gradients.", (), "contract", "", no_derivation),
    Claim("cln.inputs_unmodified", "Channel-wise LayerNorm leaves its inputs alone", "", "(contract)",
          r"$x$, the weight, the bias and the upstream gradient are never written.", (), "contract", "",
          no_derivation),
    Claim("in.forward", "InstanceNorm: LayerNorm over each sample's channel", "002", SEED_002_INSTANCE,
          r"$y_{n,c,:} = \gamma_c\,\mathrm{LN}(x_{n,c,:}) + \beta_c$ over the $S$ spatial elements; the batch Jacobian "
          r"is block-diagonal over (sample, channel) pairs, each block $\gamma_c J_{\mathrm{LN}}$ with $d = S$.",
          (r"$\sigma_{n,c}^2 + \epsilon > 0$", r"$S \ge 2$ for a non-degenerate output (claim gn.degenerate)"), "holds",
          r"Exactly as the seed says: no statistic crosses samples or channels (with or without tracked running "
          r"statistics, which only eval mode reads).",
          _instance_norm),
    Claim("in.jacobian", "InstanceNorm kernel gradients: the block-diagonal batch Jacobian", "", "(contract)",
          r"Training-mode $dx$, $d\gamma$, $d\beta$ of an InstanceNorm kernel within the LayerNorm error model of each "
          r"(sample, channel)'s $S$ elements (claim in.forward's Jacobian: GroupNorm's with $G = C$).", (),
          "contract", "", no_derivation),
    Claim("in.eval", "InstanceNorm in eval mode: the affine map of the running statistics", "", "(contract)",
          r"With tracked statistics, eval mode is claim bn.eval's per-channel affine map of $\mu_R, \sigma_R^2$ "
          r"and writes no buffer.", (), "contract", "", no_derivation),
    Claim("in.degenerate", "Degenerate InstanceNorm: constant instances, one spatial element", "", "(contract)",
          r"A constant (sample, channel) gives $\beta_c$ ($\epsilon > 0$); $S = 1$ in training mode is refused (torch) "
          r"or gives $\beta_c$.", (), "contract", "", no_derivation),
    Claim("in.independence", "InstanceNorm samples are independent", "", "(contract)",
          r"Replacing one sample changes no other sample's output, bit for bit, in training and eval mode (no "
          r"statistic crosses samples: claim in.forward).", (), "contract", "", no_derivation),
    Claim("in.layout_invariance", "InstanceNorm does not depend on memory layout", "", "(contract)",
          r"A channels-last input gives the contiguous input's output and running statistics; in training mode, an "
          r"upstream gradient strided, transposed, channels-last or expanded (stride 0: autograd's gradient of a "
          r"summed loss) gives the contiguous one's gradients.", (), "contract", "", no_derivation),
    Claim("in.inputs_unmodified", "InstanceNorm leaves its inputs alone", "", "(contract)",
          r"$x$, the weight, the bias and the upstream gradient are never written; the running buffers once per "
          r"training call.", (), "contract", "", no_derivation),
    Claim("in.running_statistics", "InstanceNorm's running statistics (track_running_stats)", "",
          "torch's F.instance_norm given running mean and variance buffers (an InstanceNorm module with "
          "track_running_stats=True) updates them in training and normalizes with them in eval mode (issue 28).",
          r"Each training call: $\mu_R \leftarrow (1-m)\mu_R + \frac mN\sum_n\mu_{n,c}$ (BatchNorm's mean update), "
          r"$\sigma_R^2 \leftarrow (1-m)\sigma_R^2 + \frac mN\sum_n\frac{S}{S-1}\sigma_{n,c}^2$, which equals "
          r"BatchNorm's $\frac{NS}{NS-1}\sigma_c^2$ iff the between-instance variance $B$ is $\frac{(N-1)W}{N(S-1)}$ "
          r"($W$ the mean within-instance variance).",
          (r"$S \ge 2$ (torch refuses $S = 1$ in training)", r"momentum a number (the module's None becomes 0)"),
          "holds",
          r"torch's update, as derived (checked against \texttt{F.instance\_norm} in the tests): "
          r"the per-instance statistics averaged over the batch, which leaves out the spread of the instance means.",
          _instance_running_statistics),
)
