"""The rounding-error model (claim numerics.error_model: its derivation steps) and the forward conformance claims it
bounds (ln.forward, rms.forward). The terms it cites are proofs.error_terms'; the numerical checks its Fact steps run
are proofs.claims.numerical_checks.

The traps these claims find, as witnesses (tests/test_proofs_doctests.py runs them):

>>> import numpy as np
>>> from proofs import oracles

A one-pass variance E[x^2] - mu^2 cancels: in float32 at |mean|/std ~ 1e4 it is 0 where the variance is 2/3, and the
output is off by a factor ~260 (claim numerics.error_model: a factor ~kappa beyond the two-pass bound).

>>> x = (10000.0 + np.array([-1.0, 0.0, 1.0])).astype(np.float32)
>>> float(np.mean((x - x.mean()) ** 2)), float(np.mean(x * x) - x.mean() ** 2)
(0.6666666865348816, 0.0)
>>> [round(v, 2) for v in ((x - x.mean()) / np.sqrt(np.mean(x * x) - x.mean() ** 2 + np.float32(1e-5))).tolist()]
[-316.23, 0.0, 316.23]
>>> [round(v, 4) for v in oracles.layernorm(x, None, None, 1e-5).tolist()]
[-1.2247, 0.0, 1.2247]

eps outside the root, (x - mu)/(sigma + eps), is another function (claim ln.forward's conventions): here 4.5% off,
about eps/(2 sigma^2) - eps/sigma, where a float32 kernel's bound is ~1e-6.

>>> x, eps = np.array([1.0, 2.0, 4.0]), 0.1
>>> outside = (x - x.mean()) / (x.std() + eps)
>>> [round(v, 4) for v in (outside / oracles.layernorm(x, None, None, eps) - 1).tolist()]
[-0.0449, -0.0449, -0.0449]
"""

from __future__ import annotations

import sympy as sp

from proofs import error_terms, expressions
from proofs.algebra import RMS_AGGREGATES, d, gamma, i, j, k, ms, mu, row_sum, var, x
from proofs.claims import numerical_checks
from proofs.claims.base import Claim
from proofs.claims.moments_steps import aten_moments_steps
from proofs.derivation import Derivation, Equal, Fact

e = sp.Symbol("e", real=True)  # the error of the computed mean
rho = sp.Symbol("rho", real=True)
d1, d2 = sp.symbols("delta_1 delta_2", real=True)
eps = sp.Symbol("epsilon", positive=True)


def _rounded_tree(leaves: list, order: str) -> tuple[sp.Expr, sp.Expr]:
    """(fl(sum) - sum, sum_v delta_v t_v) for a symbolic sum of ``leaves`` (sequential or pairwise),
    t_v the exact sum of node v's two computed children."""
    deltas = iter(sp.symbols("delta_1:8", real=True))
    nodes = []

    def add(a: sp.Expr, b: sp.Expr) -> sp.Expr:
        delta = next(deltas)
        nodes.append(delta * (a + b))
        return (a + b) * (1 + delta)

    values = list(leaves)
    if order == "sequential":
        total = values[0]
        for value in values[1:]:
            total = add(total, value)
    else:
        while len(values) > 1:
            values = [add(values[k], values[k + 1]) for k in range(0, len(values), 2)]
        total = values[0]
    return total - sum(leaves), sp.Add(*nodes)


def _identity_cancellation_steps() -> tuple:
    """What survives of the kernel's errors in sum_i dx_i and c . dx (d = 3 written out; error_model.identity_bounds):
    with g^_i = g_i (1 + alpha_i), c1^ = c1 + e_1, x^_i = xhat_i + xi_i, c2^ = c2 + e_2, sum g = 3 c1, sum xhat = 0
    and sum c = 0, the error e_1 of the mean term cancels from c . dx, and the per-element xhat_i c2 from the sum."""
    g, alpha, xh, xi, c = (sp.symbols(f"{name}_1:4", real=True) for name in ("g", "alpha", "xhat", "xi", "c"))
    c1, c2, e1, e2 = sp.symbols("c_1 c_2 e_1 e_2", real=True)
    t = [g[k] * (1 + alpha[k]) - (c1 + e1) - (xh[k] + xi[k]) * (c2 + e2) for k in range(3)]
    zero_sums = {xh[2]: -xh[0] - xh[1], c[2]: -c[0] - c[1]}
    return (
        Equal(sum(t).subs(c1, sum(g) / 3), sum(g[k] * alpha[k] for k in range(3)) - 3 * e1 - (c2 + e2) * sum(xi),
              r"$\sum_i (\hat g_i - \hat c_1 - \hat x_i \hat c_2) = \sum_i \alpha_i g_i - d e_1 - \hat c_2 \sum_i "
              r"\xi_i$: the exact part is 0 and no per-element $\hat x_i c_2$ survives (identity $\sum dx = 0$)",
              aggregates={}, given=zero_sums),
        Equal(sum(c[k] * t[k] for k in range(3)),
              sum(c[k] * (g[k] * (1 + alpha[k]) - (xh[k] + xi[k]) * (c2 + e2)) for k in range(3)),
              r"$c \cdot \hat t$: the mean term and its error $e_1$ multiply $\sum_i c_i = 0$ (identity $c\cdot dx$)",
              aggregates={}, given=zero_sums),
    )


def _declared_shape_steps() -> tuple:
    """A declared reduction shape (proofs.reduction): the error of a tree sum through each term's path, the depth D;
    a row of several blocks summed in block-wide lanes (our Triton kernels) is such a tree, and its two-pass variance
    has no first-order mean term."""
    a = sp.symbols("a_1:5", nonnegative=True)
    leaves = list(sp.symbols("x_1:5", real=True))
    d1_, d2_, d3_ = sp.symbols("delta_1:4", real=True)
    pairwise = ((leaves[0] + leaves[1]) * (1 + d1_) + (leaves[2] + leaves[3]) * (1 + d2_)) * (1 + d3_)
    paths = ((1 + d1_) * (1 + d3_),) * 2 + ((1 + d2_) * (1 + d3_),) * 2
    sequential_nodes = (a[0] + a[1]) + (a[0] + a[1] + a[2]) + sum(a)
    folded = _rounded_tree([leaves[0], leaves[2], leaves[1], leaves[3]], "pairwise")
    row_mean = sum(leaves) / 4
    over_blocks = sum(sum((v - (row_mean + e)) ** 2 for v in block) for block in (leaves[:2], leaves[2:]))
    return (
        Equal(pairwise, sum(x_i * path for x_i, path in zip(leaves, paths, strict=True)),
              r"a tree sum is $\sum_i x_i \prod_{v \ni i}(1+\delta_v)$ over the $D_i$ additions on $i$'s path "
              r"(pairwise, 4 terms: $D_i = 2$), so $|\mathrm{fl}(\sum) - \sum| \le \gamma_D \sum|x_i|$, "
              r"$D = \max_i D_i$ (Higham 2002, eq. (4.3)): the declared depth replaces $d - 1$, no assumption",
              aggregates={}),
        Equal(sequential_nodes, 3 * a[0] + 3 * a[1] + 2 * a[2] + a[3],
              r"$\sum_v A_v = \sum_i |x_i| D_i$ (sequential, 4 terms: $D = 3, 3, 2, 1$); with $A_v \le T$, "
              r"$\sum_v A_v^2 \le T \sum_v A_v \le D\,T^2$: the probabilistic factor of a declared shape is at most "
              r"$\lambda u (1+\gamma_D)\sqrt{D}$", aggregates={}),
        Equal(folded[0], folded[1],
              r"a row of 2 blocks $(x_1, x_2), (x_3, x_4)$ added into 2 lanes, $x_1 + x_3$ and $x_2 + x_4$, then the "
              r"lanes summed: a tree over the row, so steps 1-3 hold with its own nodes (a lane node per block after "
              r"the first, $A_v$ the lane's running $\sum|x|$; \texttt{Reduction.tree\_factor}), depth "
              r"$D$ = blocks $- 1$ + the lanes' tree", aggregates={}),
        Equal(over_blocks, sum((v - row_mean) ** 2 for v in leaves) + 4 * e**2,
              r"two-pass over blocks: the blocks' sums of squares of deviations from the row's one computed mean "
              r"$\hat\mu = \mu + e$ add to $d\sigma^2 + d e^2$ ($d = 4$, 2 blocks): no first-order term in $e$ at any "
              r"width, so a two-pass shape drops the Welford term $2\phi_\mu\kappa$ (\texttt{Reduction.welford}; "
              r"blocks two-pass each and merged by Chan's update keep it)", aggregates={}),
        Fact(r"|\mathrm{fl}_{32}^{\text{numpy}}(\textstyle\sum x) - \sum x| \le \min(\gamma_D, P_D)\sum|x|;\ "
             r"\text{a sequential sum declared pairwise exceeds it}",
             r"numpy's pairwise float32 sum (the Triton interpreter's \texttt{tl.sum}), $D$ of "
             r"\texttt{reduction.NUMPY\_PAIRWISE}; our Triton kernels' declared tree (zero-padded to a power of two, "
             r"or blocks of 8192 added into lanes summed by numpy: \texttt{simulate.lanes\_sum}, the kernel's "
             r"bits) also within $\lambda u (1+\gamma_D)\sqrt{\sum_v A_v^2}$ of its own tree; "
             r"normal/uniform/integer rows, offsets to $10^3$, $d$ to 65536; a "
             r"sequential sum at $d = 65536$, $|\mu|/\sigma = 10^3$, exceeds that bound on most rows (up to "
             r"$> 3\times$) and stays within the order-agnostic one: a declaration is a claim the check can refute",
             numerical_checks.declared_sums_within_the_depth_bounds),
        Fact(r"|\mathrm{fl}_{32}^{\text{ATen}}(\textstyle\sum x) - \sum x| \le \lambda u (1+\gamma_D)"
             r"\sqrt{\textstyle\sum_v A_v^2}",
             r"ATen's CPU float32 sum, a cascade of runs and levels, and a one-row call split over threads "
             r"(\texttt{SumKernel.cpp}; emulated in \texttt{proofs.aten\_sum}, torch's own bit for bit in "
             r"\texttt{tests/test\_aten\_sum.py}): its "
             r"magnitudes' $\sum_v A_v^2$ is the explicit tree's node-by-node sum, and its sums of squared normal, "
             r"uniform and integer rows, offsets to $10^3$, $d$ to 65536, stay within its own tree's bound "
             r"(\texttt{exact\_tree} of torch's RMSNorm); a sequential sum at $d = 65536$ exceeds it on most rows",
             numerical_checks.aten_cascade_sum_within_its_tree),
        Fact(r"|\mathrm{fl}(\textstyle\sum x) - \sum x| \le \sum_v u\,2^{\lfloor\log_2((1+\gamma_D)A_v)"
             r"\rfloor} \le u(1+\gamma_D)\sum_v A_v",
             r"a declared exact tree's rigorous worst case over its own nodes (steps 1, 2 and the half ulp), "
             r"used where it is below $\gamma_D$ (structured rows and the worst-case bound; "
             r"\texttt{Reduction.tree\_sums}): the float32 sums of both exact trees of integer + 0.1, constant, "
             r"two-valued and "
             r"$10^3$-offset rows and their squares, $d$ to 65536, stay within it; a sequential sum declared as our "
             r"Triton tree exceeds it on $10^3$-offset rows at $d = 65536$",
             numerical_checks.exact_trees_within_their_node_sums),
        Equal(sp.exp(-(_split_at - _rigid) ** 2 / (2 * _c**2 * _q_rest)),
              sp.exp(-_lam**2 / 2),
              r"split: $|\sum_v \delta_v t_v| \le \sum_{v \in S} c_v + |\sum_{v \notin S} \delta_v t_v|$ and the "
              r"nodes outside $S$ are still a martingale, so Azuma--Hoeffding over them alone ($Q_M = \sum_{v \notin "
              r"S} A_v^2$) gives $P(|\mathrm{fl}(\sum) - \sum| \ge \sum_{v \in S} c_v + \lambda c\sqrt{Q_M}) \le "
              r"2e^{-\lambda^2/2}$ for any $S$ fixed by the row before its roundings; "
              r"\texttt{probabilistic.split\_sum} takes $S$ = the nodes at aligned ulps and the $k$ largest others, "
              r"$k$ the row's best"),
        Fact(r"|\mathrm{fl}_{32}(\textstyle\sum x) - \sum x| \le \min_k \big(\sum_{v \in S_k} c_v + \lambda "
             r"\sqrt{\textstyle\sum_{v \notin S_k} c_v^2}\big)",
             r"our Triton tree's float32 sums (\texttt{Reduction.tree\_split}, increments $c_v = u\,2^{\lfloor "
             r"\log_2((1+\gamma_D)A_v)\rfloor}$, nodes whose ulp the terms' residues are concentrated at forced into "
             r"$S$: \texttt{probabilistic.aligned\_scales}) of $10^3$-offset, integer + 0.1 / 49.3 / 4900.25 and "
             r"lognormal rows and their squares, $d$ to 65536; a sequential sum declared as that tree exceeds it on "
             r"every $10^3$-offset row at $d = 65536$", numerical_checks.split_trees_within_their_bound),
    )


_lam, _events, _false_alarm, _q, _c = sp.symbols(r"\lambda N p Q c", positive=True)
_q_rest, _rigid = sp.symbols(r"Q_M C_S", positive=True)  # the split: Azuma over the nodes outside S, S rigorous
_split_at = _rigid + _lam * _c * sp.sqrt(_q_rest)


def _probabilistic_steps() -> tuple:
    """The default (probabilistic) factor of a sum in any order: proofs.probabilistic, steps 1-5."""
    sequential = _rounded_tree(list(sp.symbols("x_1:5", real=True)), "sequential")
    pairwise = _rounded_tree(list(sp.symbols("x_1:5", real=True)), "pairwise")
    azuma_t = _lam * _c * sp.sqrt(_q)
    return (
        Equal(sequential[0], sequential[1],
              r"any summation tree: $\mathrm{fl}(\sum) - \sum = \sum_v \delta_v t_v$, $t_v$ the exact sum of the "
              r"computed children (sequential, 4 terms; no expansion in $\delta$: exact)", aggregates={}),
        Equal(pairwise[0], pairwise[1], r"the same for the pairwise tree of 4 terms", aggregates={}),
        Fact(r"\max_{\text{trees}} \sum_v A_v^2 = \sum_{k=2}^m T_k^2,\ T_k = \text{sum of the } k "
             r"\text{ largest } |x_i|",
             r"order-agnostic: the sequential sum in decreasing order is the worst tree (proof: the $j$-th largest "
             r"node has at most $m-j+1$ leaves); checked on every tree of $m \le 6$ leaves",
             numerical_checks.decreasing_sequential_is_the_worst_tree),
        Equal(sp.exp(-azuma_t**2 / (2 * _c**2 * _q)), sp.exp(-_lam**2 / 2),
              r"Azuma--Hoeffding (assumed theorem: martingale differences $|\delta_v t_v| \le c\,A_v$, "
              r"$c = u(1+\gamma_{m-1})$, $Q = \sum_v A_v^2$): $P(|\sum_v\delta_v t_v| \ge \lambda c\sqrt{Q}) "
              r"\le 2e^{-t^2/(2c^2Q)}$ at $t = \lambda c\sqrt{Q}$ is $2e^{-\lambda^2/2}$"),
        Fact(r"|\mathrm{fl}(t) - t| \le u\,2^{\lfloor \log_2 |t| \rfloor}",
             r"round-to-nearest errs by at most half an ulp of the result's binade (probabilistic step 6: the "
             r"increments of Azuma--Hoeffding bounded by $u\,2^{\lfloor\log_2((1+\gamma)A_v)\rfloor}$, "
             r"\texttt{probabilistic.node\_squares}); checked on $10^6$ float64 values rounded to float32, float16 "
             r"and bfloat16, binade edges included, and attained within a factor $1 + 2^{-10}$",
             numerical_checks.half_ulp_bounds_round_to_nearest),
        Equal(_events * 2 * sp.exp(-sp.sqrt(2 * sp.log(2 * _events / _false_alarm)) ** 2 / 2), _false_alarm,
              r"$\lambda = \sqrt{2\ln(2N/p)}$: a union bound over the $N$ sums of one bound evaluation gives false "
              r"alarm $p$ per evaluation (\texttt{probabilistic.FALSE\_ALARM} $= 10^{-13}$), $K p$ per run of $K$"),
        Fact(r"|\mathrm{fl}_{32}(\textstyle\sum x) - \sum x| \le \min(\gamma_{m-1}, P_m)\sum|x| \text{ on the suite's "
             r"rows; not on a constant row}",
             r"float32 sequential, pairwise and blocked sums, normal/uniform/sparse/integer rows, offsets to $10^3$, "
             r"$m$ to 8192; a constant row (0.1, $m = 65536$) summed sequentially breaks $P_m$: "
             r"\texttt{probabilistic.independent} sends such rows to the worst case",
             numerical_checks.float32_sums_within_the_probabilistic_factor),
        Fact(r"R_q = |\overline{e^{2\pi i x/q}}| > 4/\sqrt{m} \Rightarrow \text{worst case}",
             r"roundings share a sign when the terms' residues modulo the partial sums' ulps $q$ are concentrated: "
             r"a sequential float32 sum of rows $999.7 + N(0,1)$ at $m = 65536$ and of integers $+ 49.3$ at "
             r"$m = 8192$ breaks the sqrt bound; \texttt{probabilistic.aligned} sends such sums to the worst case "
             r"(evenly spread residues give $R_q \approx m^{-1/2}$)", numerical_checks.aligned_rows_fall_back),
    )


def _worst_case(term: str) -> sp.Expr:
    """A piece of the LayerNorm forward bound with the worst-case statistic factors gamma_{d+1}, gamma_{d+5}."""
    return error_terms.forward_terms("ln")[term].subs(error_terms.WORST_CASE_FACTORS["ln"])


def _first_order_bound() -> sp.Expr:
    """|gamma_i| (|xhat_i| ((d+1) kappa + (d+5)/2 + C_RSQRT + 3 + C_WEIGHT) + (d+1) E_x): the mean's error enters
    the variance only squared (second order), the output linearly."""
    m = error_terms
    return m.g * (m.xhat * ((m.n + 1) * m.kappa + (m.n + 5) / sp.Integer(2) + m.C_RSQRT + 3 + m.C_WEIGHT)
                  + (m.n + 1) * m.mean_abs)


def _error_model() -> Derivation:
    centred_sum = row_sum((x[k] - (mu + e)) ** 2)
    kappa2 = (mu**2 + var) / (var + eps)
    one_pass_error = (var + mu**2) * (1 + d2) - mu**2 * (1 + d1) ** 2 - var
    drho = sp.diff((1 - rho) ** sp.Rational(-1, 2) + (1 + rho) ** sp.Rational(-1, 2), rho)
    return Derivation((
        *_probabilistic_steps(),
        *_declared_shape_steps(),
        *aten_moments_steps(),
        *_identity_cancellation_steps(),
        Fact(r"|\mathrm{fl}(\textstyle\sum_k x_k) - \sum_k x_k| \le \gamma_{d-1}\sum_k|x_k|,\ "
             r"\gamma_m = \frac{m u}{1-m u}, \text{ any order}",
             "Higham (2002) Lemma 3.1 and eq. (4.4); checked on float32 sequential and pairwise sums",
             numerical_checks.sum_order_bound_holds),
        Equal(centred_sum, d * var + d * e**2,
              r"two-pass: the mean's error $e$ adds $d e^2$ to $\sum_k(x_k-\hat\mu)^2$; the cross term "
              r"$-2e\sum_k(x_k-\mu)$ is 0"),
        Fact(r"\frac{d}{d\rho}\left[(1-\rho)^{-1/2} + (1+\rho)^{-1/2}\right] = " + sp.latex(drho) + r" \ge 0 "
             r"\text{ on } [0, 1)",
             r"so $|(1+t)^{-1/2}-1| \le (1-\rho)^{-1/2} - 1$ for $|t| \le \rho < 1$ (the rsqrt step); "
             r"SymPy's solveset finds no point where the derivative is negative",
             lambda: sp.solveset(drho < 0, rho, sp.Interval.Ropen(0, 1)) == sp.S.EmptySet),
        Equal(one_pass_error, (var + mu**2) * d2 - 2 * mu**2 * d1 - mu**2 * d1**2,
              r"one pass: $\widehat{E[x^2]} - \hat\mu^2 - \sigma^2$ with relative errors $\delta_2$ of $E[x^2]$ "
              r"and $\delta_1$ of $\mu$"),
        Equal((var + mu**2) * d2 / (var + eps), kappa2 * d2,
              r"relative to $s^2 = \sigma^2+\epsilon$ that is $\kappa^2\delta_2$, $\kappa^2 = "
              r"\frac{\mu^2+\sigma^2}{\sigma^2+\epsilon}$: a factor $\kappa$ beyond the two-pass/Welford "
              r"$(2\kappa+1)\gamma_{d+5}$"),
        Equal(sp.diff(_worst_case("product"), error_terms.u).subs({error_terms.u: 0, error_terms.eta: 0}),
              _first_order_bound(),
              r"the bound to first order in $u$ (coefficient of $u$ before the storage rounding): linear in $d$, "
              r"in $\kappa$ and in $E_x = \mathrm{mean}|x|/s \le \kappa$"),
        Equal(_worst_case("bound").subs({error_terms.u: 0, error_terms.eta: 0}),
              error_terms.w * error_terms.y + error_terms.eta_out,
              r"with exact arithmetic only the rounding of the output remains: $u_{out}|y_i|$ (+ underflow)"),
        Fact(r"\max |y_{\text{two-pass}} - y| / B \le 1 \text{ (float32, float16 out; sequential, pairwise, Welford)}",
             "simulated in numpy on rows |mean|/std up to 1e4, d up to 1024, eps 1e-12..1e-2",
             numerical_checks.two_pass_within_the_bound),
        Fact(r"\max |dx_{\text{float32}} - dx| / B_{dx} \le 1",
             r"the backward bound (\texttt{backward\_bound}) on a float32 simulation of "
             r"$r(g - \bar g - \hat{x}\,\overline{g\hat{x}})$, rows $|\mu|/\sigma$ up to $10^3$, $d \le 1024$",
             numerical_checks.backward_within_bound),
        Fact(r"\max |y_{\text{one-pass}} - y| / B > 10 \text{ at } \kappa \approx 10^4,\ d \le 64",
             "the one-pass variance breaks the bound by a wide margin where kappa exceeds d",
             numerical_checks.one_pass_breaks_the_bound),
    ))


def _conventions(kind: str) -> Derivation:
    """What the oracle becomes under the other conventions kernels use (claims ln.forward, rms.forward)."""
    offset = sp.IndexedBase("w", real=True)
    definition = expressions.LN_DEFINITION if kind == "ln" else expressions.RMS_DEFINITION
    gemma = definition.replace(lambda z: isinstance(z, sp.Indexed) and z.base == gamma,
                               lambda z: 1 + offset[z.indices[0]])
    by_gamma = sp.Derivative(definition, gamma[j]).doit().subs(gamma[i], 1 + offset[i])
    steps = [Equal(sp.Derivative(gemma, offset[j]), by_gamma,
                   r"Gemma's weight $1 + w$: the oracle takes $\gamma = 1 + w$ (one more rounding, $C_{weight}$), "
                   r"and $\partial y/\partial w = \partial y/\partial\gamma$",
                   aggregates=expressions.LN_AGGREGATES if kind == "ln" else RMS_AGGREGATES)]
    if kind == "ln":
        centred, scale = x[i] - mu, sp.sqrt(var + eps)
        unbiased = centred / sp.sqrt(d * var / (d - 1) + eps)
        steps += [
            Equal(unbiased, sp.sqrt((d - 1) / d) * centred / sp.sqrt(var + eps * (d - 1) / d),
                  r"unbiased variance ($\frac{d}{d-1}\sigma^2$): $\sqrt{\frac{d-1}{d}}\,"
                  r"\mathrm{LN}_{\epsilon(d-1)/d}(x)$, off by $\approx \frac{1}{2d}$ relative: far beyond the bound"),
            Equal(centred / (sp.sqrt(var) + eps), centred / scale * (scale / (sp.sqrt(var) + eps)),
                  r"$\epsilon$ outside the root: $\mathrm{LN}_\epsilon(x)\cdot\frac{\sqrt{\sigma^2+\epsilon}}"
                  r"{\sigma+\epsilon}$, a relative change $\approx \frac{\epsilon}{2\sigma^2} - \frac{\epsilon}"
                  r"{\sigma}$ for $\sigma^2 \gg \epsilon$"),
        ]
    else:
        steps.append(Equal(x[i] / sp.sqrt(ms) , x[i] / sp.sqrt(ms + eps) * sp.sqrt(ms + eps) / sp.sqrt(ms),
                           r"no $\epsilon$ (or $\epsilon$ outside the root): $\mathrm{RMS}_\epsilon$ times "
                           r"$\sqrt{(q+\epsilon)/q}$", aggregates=RMS_AGGREGATES))
    return Derivation(tuple(steps), notes=(r"The bound itself is derived in claim numerics.error\_model.",))


FORWARD_STATEMENT = (r"$|y^{\text{kernel}}_i - y_i| \le B_i$ with $y$ the float64 oracle on the same rounded inputs "
                     r"and "
                     r"$B_i$ the bound of \texttt{proofs.error\_model.forward\_bound} (derivation below).")

FORWARD_ORIGIN = ("(added by normverify) a kernel is compared with the float64 oracle on the exact inputs it received, "
                  "within a bound derived from the dtypes, the width and the row's condition number.")

CLAIMS = (
    Claim("numerics.error_model", "Rounding-error bound of two-pass / Welford LayerNorm and RMSNorm", "",
          "(added by normverify) tolerances are derived from the dtype, the width and the conditioning of the row.",
          r"For accumulation with unit roundoff $u$ and storage with $u_{out}$, summation in any order, "
          r"$|\hat{y}_i - y_i| \le |\gamma_i|(|\hat{x}_i|\epsilon_1 + E(1+\epsilon_1)) + (|y_i| + \ldots)"
          r"((1+u)(1+u_{out})-1)$, $E = \gamma_{d+1}\,\mathrm{mean}|x|/s$, $\epsilon_1$ from "
          r"$\rho_t = (1+E^2)(1+\gamma_{d+5}) - 1 + 2\gamma_{d+1}\kappa$ and 4 ulps for the rsqrt. "
          r"The one-pass variance errs by $\kappa^2 d u$ relative to $s^2$: a factor $\sim\kappa$ beyond the bound. "
          r"The backward bound composes the same pieces for $dx = r(g' - \bar{g'} - \hat{x}\,\overline{g'\hat{x}})$, "
          r"$g' = \gamma\odot g$ (4 roundings to combine the terms), and $\gamma_{\text{rows}}$ for the sums of "
          r"$d\gamma$, $d\beta$ over rows. That is the worst case (\texttt{--bound worst-case}); the default "
          r"(probabilistic) bound replaces each sum's $\gamma_{m-1}$ by $\min(\gamma_{m-1}, P_m)$, "
          r"$P_m = \lambda u (1+\gamma_{m-1})\sqrt{\sum_{k=2}^m T_k^2}/T_m \le \lambda u(1+\gamma_{m-1})\sqrt{m-1}$ "
          r"for a sum in any order, $\lambda = \sqrt{2\ln(2N/p)}$ for $N$ sums per evaluation and false-alarm "
          r"probability $p = 10^{-13}$ per evaluation. A kernel that declares its reduction shape "
          r"(\texttt{Kernel.reduction}, \texttt{proofs.reduction}) has each statistic's $m - 1$ replaced by the "
          r"shape's depth $D$ (pairwise: $\lceil\log_2 d\rceil$) in both bounds, and $\sqrt{D}$ caps "
          r"$\sqrt{\sum_k T_k^2}/T_m$; a two-pass declaration drops the Welford term $2\gamma_{d+1}\kappa$.",
          (r"inputs already rounded, exactly representable in the accumulation dtype",
           r"probabilistic bound: the roundings of a sum are mean independent (Higham and Mary 2019; Hallman and "
           r"Ipsen 2023) -- assumed, used only for sums whose terms are not dominated by one repeated value "
           r"(\texttt{probabilistic.independent}); elsewhere the worst case",
           r"$\rho_t < 1$ and $(d+9)u < 1$ (else the bound is $\infty$)",
           r"the Welford term $2\gamma_{d+1}\kappa$ is a first-order model, checked numerically"),
          "holds", r"The bound holds for two-pass, pairwise and Welford float32 simulations on adversarial rows; "
          r"a one-pass variance exceeds it by $>10\times$ at $\kappa \approx 10^4$.", _error_model),
    Claim("ln.forward", "LayerNorm kernel output within the error-model bound", "", FORWARD_ORIGIN, FORWARD_STATEMENT,
          (r"$\sigma^2 + \epsilon > 0$", r"the kernel's convention: population variance, $\epsilon$ inside the "
           r"root, effective weight $\text{offset} + w$"), "holds",
          r"Other conventions are different functions (derived below); the tolerance is the bound "
          r"of claim \texttt{numerics.error\_model}.",
          lambda: _conventions("ln")),
    Claim("rms.forward", "RMSNorm kernel output within the error-model bound", "", FORWARD_ORIGIN, FORWARD_STATEMENT,
          (r"$q + \epsilon > 0$", r"$\epsilon$ inside the root, effective weight $\text{offset} + w$"), "holds",
          r"Other conventions are different functions (derived below); the tolerance is the bound "
          r"of claim \texttt{numerics.error\_model}.",
          lambda: _conventions("rms")),
)
