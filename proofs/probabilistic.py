"""A probabilistic bound on the rounding error of a sum computed in ANY order (the default tolerance model).

Model (Higham & Mary, SIAM J. Sci. Comput. 41(5) A2815, 2019; Hallman & Ipsen, "Precision-aware
deterministic and probabilistic error bounds for floating point summation", Numer. Math. 2023,
arXiv 2107.01604): every addition of a summation tree returns fl(a + b) = (a + b)(1 + delta_v),
|delta_v| <= u, and the deltas are *mean independent*: E[delta_v | the roundings before it] = 0.
This is an assumption about round-to-nearest, stated, not proved; it fails on structured data
(constant rows, few repeated values: the same rounding recurs), so :func:`independent` detects such
sums, and :func:`aligned` those whose terms share their residues modulo the partial sums' ulps (rows shifted far
beyond their spread, integers with a fractional shift: a sequential sum's roundings then share a sign), and the
tolerance falls back to the worst case there.

Derivation (each step checked in claim numerics.error_model):
1. For any tree with internal nodes v (m - 1 of them for m terms), fl(sum) - sum = sum_v delta_v t_v,
   t_v = a_v + b_v the exact sum of the two *computed* children: node errors add with coefficient 1.
2. |t_v| <= (1 + gamma_{m-1}) A_v, A_v = sum of |x_i| under v (a deterministic, predictable bound).
3. Azuma-Hoeffding on the martingale sum_v delta_v t_v with differences bounded by u |t_v|:
   P(|fl(sum) - sum| >= lambda u (1 + gamma_{m-1}) sqrt(sum_v A_v^2)) <= 2 exp(-lambda^2 / 2).
4. Order-agnostic: sort the nodes by A_v (ancestors first on ties); the j-th has at most m - j + 1 leaves,
   so A_(j) <= T_{m-j+1}, T_k the sum of the k largest |x_i|, and sum_v A_v^2 <= sum_{k=2}^m T_k^2
   (the sequential sum of the terms in decreasing order attains it). Hence with probability >= 1 - 2 exp(-lambda^2/2)
       |fl(sum) - sum| <= P_m sum|x_i|,  P_m = lambda u (1 + gamma_{m-1}) sqrt(sum_{k=2}^m T_k^2) / T_m
   and P_m <= lambda u (1 + gamma_{m-1}) sqrt(m - 1) (equality for equal magnitudes). The worst case
   gamma_{m-1} always holds, so the factor used is min(gamma_{m-1}, P_m).
5. False alarms: one bound evaluation (a call of forward_bound/backward_bound) uses N sums; with
   lambda = sqrt(2 ln(2 N / p)) the union bound makes the probability that any of them exceeds its
   bound at most N 2 exp(-lambda^2/2) = p, p = FALSE_ALARM per evaluation. A run of K evaluations
   has at most K p (union bound again; it also covers Hypothesis' search steering towards large
   ratios, since every input it tried is among the K).
6. Half an ulp: round-to-nearest errs by at most half an ulp of the result's binade, |delta_v t_v| <= u 2^e for
   2^e <= |t_v| < 2^(e+1), a bound as predictable as u |t_v| (it depends on the roundings before v only), so step 3
   holds with the increments bounded by u 2^floor(log2((1 + gamma) A_v)) (monotone in A_v: step 4's order-agnostic
   maximum stays a maximum); :func:`node_squares`. It gains 1-2x per node (about 1.4 on average over a binade).
7. Split (a declared tree's nodes, :func:`split_sum`): for a set S of nodes fixed by the row before its roundings,
   |sum_v delta_v t_v| <= sum_{v in S} c_v + |sum_{v not in S} delta_v t_v|, and the nodes outside S are still a
   martingale: step 3 over them alone, the same lambda and probability. S takes the nodes at ulps the terms are
   aligned with (:func:`aligned_scales`) and the largest others, where Azuma would charge lambda c_v for a node
   that carries the sum alone.
"""

from __future__ import annotations

import math

import numpy as np

# Probability that one bound evaluation (all sums of one call) is exceeded by a correct kernel under the model.
FALSE_ALARM = 1e-13
# A sum is treated as having independent roundings only when no nonzero term value recurs in more than this
# share of its nonzero terms (constant rows, a few repeated values, tiled rows fall back to the worst case).
REPEATED_SHARE = 1 / 8
MIN_TERMS = 8
# A sum is treated as having mean-zero roundings only when its terms' residues modulo the partial sums' ulps are
# spread: mean resultant length at most ALIGNED_R / sqrt(m) (:func:`aligned`; evenly spread residues exceed 4/sqrt(m)
# with probability about exp(-16)). Measured on a sequential float32 sum of the suite's rows (d 512..65536,
# |mean|/std 0..5e3): ratio <= 0.21 at 4 (8 or 4 ulp scales alike); at 24 integer rows at d = 512 reach 0.99 and
# shifted rows at d = 65536 fail.
ALIGNED_R = 4.0
# The ulps checked: the largest a partial sum reaches and ULP_SCALES - 1 finer ones (each halving, a sequential sum
# of like terms spends half as many additions below it: the bias they add shrinks geometrically).
ULP_SCALES = 4
# aligned_scales tests its moduli in blocks of at most this many (modulus, term) pairs (a few temporary float64 arrays
# of that size: ~32 MB each).
SCALES_AT_ONCE = 1 << 22


def lam(events: int, false_alarm: float = FALSE_ALARM) -> float:
    """lambda with events * 2 exp(-lambda^2 / 2) = false_alarm (step 5)."""
    return math.sqrt(2.0 * math.log(2.0 * max(int(events), 1) / false_alarm))


def gamma(m: np.ndarray | int, u: float) -> np.ndarray:
    """gamma_m = m u / (1 - m u), inf where m u >= 1 (a 0-d array for scalar m and u, computed in Python's float64
    arithmetic, the same operations without numpy's per-call cost: the bounds take it thousands of times a run)."""
    if np.ndim(m) == 0 and np.ndim(u) == 0:
        mu = float(m) * float(u)
        return np.asarray(mu / (1 - mu) if mu < 1 else np.inf)
    m = np.asarray(m, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.where(m * u < 1, m * u / (1 - m * u), np.inf)


def node_squares(magnitude: np.ndarray, inflation: float | np.ndarray | None = None) -> np.ndarray:
    """The squared bound a node of magnitude bound A contributes to sum_v A_v^2: A^2, or with ``inflation``
    (= 1 + gamma, so that |t_v| <= inflation A_v, step 2) (2^floor(log2(inflation A)) / inflation)^2: a node whose
    computed value t_v lies in [2^e, 2^(e+1)) rounds with error at most half an ulp, u 2^e, not u |t_v| (step 6);
    the factor lambda u inflation sqrt(sum_v ...) is then over those half-ulps. Never above A^2."""
    a = np.asarray(magnitude, dtype=np.float64)
    if inflation is None:
        return a * a
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        top = np.exp2(np.floor(np.log2(np.where(a > 0, a * inflation, 1.0)))) / inflation
    return np.where(a > 0, np.minimum(top, a), 0.0) ** 2


def split_sum(increments: np.ndarray, lam_value: float, forced: np.ndarray | None = None) -> np.ndarray:
    """A bound on |sum_v delta_v t_v| from the nodes' increments c_v >= |delta_v t_v| (last axis, dropped): the
    nodes of a set S bounded rigorously and the rest by Azuma-Hoeffding, sum_{v in S} c_v + lambda
    sqrt(sum_{v not in S} c_v^2), exceeded with probability at most 2 exp(-lambda^2/2) under the model (step 7);
    S = the ``forced`` nodes (their roundings may share a sign: :func:`aligned_scales`) and the k largest others,
    k chosen per row to make the bound smallest (the increments are fixed by the row before any rounding, so the
    choice is too). k = 0 is Azuma over every unforced node; k = all is the rigorous sum_v c_v."""
    c = np.asarray(increments, dtype=np.float64)
    forced = np.zeros(c.shape, dtype=bool) if forced is None else np.broadcast_to(forced, c.shape)
    base = np.sum(np.where(forced, c, 0.0), axis=-1)
    free = -np.sort(-np.where(forced, 0.0, c), axis=-1)
    zero = np.zeros((*free.shape[:-1], 1))
    head = np.concatenate([zero, np.cumsum(free, axis=-1)], axis=-1)
    rest = np.concatenate([np.cumsum((free * free)[..., ::-1], axis=-1)[..., ::-1], zero], axis=-1)
    return base + np.min(head + lam_value * np.sqrt(rest), axis=-1)


def aligned_scales(terms: np.ndarray, u: float, exponents: np.ndarray) -> np.ndarray:
    """Per row of ``terms`` (last axis) and per binade exponent e of ``exponents`` (shape (..., k)): whether the terms'
    residues modulo q = 2 u 2^e are concentrated (mean resultant length above ALIGNED_R / sqrt(m), as
    :func:`aligned`), i.e. whether additions whose results lie in [2^e, 2^(e+1)) may round alike."""
    a = np.asarray(terms, dtype=np.float64)
    q = 2 * u * np.exp2(np.asarray(exponents, dtype=np.float64))
    step = max(1, SCALES_AT_ONCE // max(a.size, 1))  # the moduli tested together: at most ~SCALES_AT_ONCE elements
    return np.concatenate([_concentrated_at(a[..., None, :], q[..., start:start + step, None])
                           for start in range(0, max(q.shape[-1], 1), step)], axis=-1)


def grouped(values: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """|values| summed over the runs of equal ``keys`` along the last axis (padded with zeros to its length): a
    rounding is a function of the value rounded, so elements whose rounded values are equal round alike and make one
    increment of Azuma-Hoeffding, not several (a row of few distinct values: its roundings add like its groups).
    Each row's group totals are in the order of their keys (ascending, NaN keys each a group of their own, last), each
    summed over the row's elements in their order (np.add.reduceat over the rows' stable sorts laid end to end)."""
    magnitude = np.abs(np.asarray(values, dtype=np.float64))
    keys = np.broadcast_to(np.asarray(keys, dtype=np.float64), magnitude.shape)
    width = magnitude.shape[-1]
    flat_values, flat_keys = magnitude.reshape(-1, width), keys.reshape(-1, width)
    out = np.zeros_like(flat_values)
    if out.size == 0:
        return out.reshape(magnitude.shape)
    order = np.argsort(flat_keys, axis=-1, kind="stable")
    sorted_keys = np.take_along_axis(flat_keys, order, axis=-1)
    starts = np.ones(sorted_keys.shape, dtype=bool)
    starts[:, 1:] = sorted_keys[:, 1:] != sorted_keys[:, :-1]
    totals = np.add.reduceat(np.take_along_axis(flat_values, order, axis=-1).ravel(), np.flatnonzero(starts))
    rows, _ = np.nonzero(starts)
    out[rows, np.cumsum(starts, axis=-1)[starts] - 1] = totals
    return out.reshape(magnitude.shape)


def concentrated(values: np.ndarray, u: float) -> np.ndarray:
    """Whether rounding ``values`` to unit roundoff u errs alike (last axis kept): the residues of the nonzero values
    modulo their own ulps, 2u 2^floor(log2|v|), have mean resultant length above ALIGNED_R / sqrt(m) (as
    :func:`aligned`). A grid value shifted by a row constant and rounded (dy_i - m on a 16-bit grid, then stored)
    keeps the constant's residue: its roundings share a sign."""
    v = np.asarray(values, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ulp = 2 * u * np.exp2(np.floor(np.log2(np.where(v != 0, np.abs(v), 1.0))))
    return _concentrated_at(np.where(np.isfinite(v), v, 0.0), ulp)[..., None]


def tree_factor(terms: np.ndarray, axis: int = -1, inflation: float | np.ndarray | None = None) -> np.ndarray:
    """sqrt(sum_{k=2}^m T_k^2) / T_m, T_k the sum of the k largest |terms| along ``axis`` (kept); 0 for zero sums
    (``inflation``: each T_k^2 taken by :func:`node_squares`).

    At most sqrt(m - 1): the order-agnostic bound on sqrt(sum_v A_v^2) / sum|x| over every summation tree (step 4).
    """
    a = np.moveaxis(np.abs(np.asarray(terms, dtype=np.float64)), axis, -1)
    partial = np.cumsum(-np.sort(-a, axis=-1), axis=-1)
    total = partial[..., -1:]
    if inflation is not None:
        inflation = np.moveaxis(np.broadcast_to(inflation, np.shape(np.moveaxis(total, -1, axis))), axis, -1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        factor = np.sqrt(np.sum(node_squares(partial[..., 1:], inflation), axis=-1, keepdims=True)) / np.where(
            total > 0, total, 1.0)
    return np.moveaxis(np.where(np.isfinite(total), factor, np.inf), -1, axis)


def independent(terms: np.ndarray, axis: int = -1) -> np.ndarray:
    """Whether a sum's roundings may be modelled as independent: at least MIN_TERMS nonzero terms, and no nonzero
    value repeated in more than REPEATED_SHARE of them (axis kept). Zeros add exactly and do not count."""
    a = np.sort(np.moveaxis(np.asarray(terms, dtype=np.float64), axis, -1), axis=-1)
    index = np.broadcast_to(np.arange(a.shape[-1]), a.shape)
    starts = np.concatenate([np.ones_like(a[..., :1], dtype=bool), a[..., 1:] != a[..., :-1]], axis=-1)
    run = index - np.maximum.accumulate(np.where(starts, index, 0), axis=-1) + 1
    longest = np.max(np.where(a != 0, run, 0), axis=-1, initial=0)
    nonzero = np.count_nonzero(a, axis=-1)
    result = (nonzero >= MIN_TERMS) & (longest <= REPEATED_SHARE * nonzero) & np.isfinite(a).all(axis=-1)
    return np.moveaxis(result[..., None], -1, axis)


def aligned(terms: np.ndarray, u: float, axis: int = -1, top: np.ndarray | None = None) -> np.ndarray:
    """Whether the terms' residues modulo the partial sums' ulps are concentrated (axis kept): then the roundings of a
    long run of additions share a sign and a sequential sum's error grows like m, not sqrt(m) (rows shifted far from 0
    with a spread below the ulp of their partial sums, integer-valued rows with a fractional shift). Measured for each
    q = 2u 2^floor(log2 T) / 2^j, j < ULP_SCALES (T = sum|x|: the largest ulp a partial sum reaches, and finer
    ones) by the mean resultant length R_q = |mean exp(2 pi i x / q)| of the nonzero terms (phases in float32):
    residues spread evenly give R_q about
    m^(-1/2), and a rounding bias of at most R_q q / pi per addition stays below the sqrt bound while
    R_q <= ALIGNED_R / sqrt(m) (see ALIGNED_R). ``top``: the largest ulp the accumulators reach instead, where
    they do not sum the terms (a running mean stays within the terms' range: proofs.aten_moments.modelled);
    R_q is the same for terms shifted by a constant."""
    a = np.moveaxis(np.asarray(terms, dtype=np.float64), axis, -1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if top is None:
            total = np.sum(np.abs(a), axis=-1, keepdims=True)
            top = 2 * u * np.exp2(np.floor(np.log2(np.where(total > 0, total, 1.0))))
        else:
            top = np.moveaxis(np.asarray(top, dtype=np.float64), axis, -1)
        scales = top[..., None] / 2.0 ** np.arange(ULP_SCALES)[:, None]  # (..., ULP_SCALES, 1)
        found = np.any(_concentrated_at(a[..., None, :], scales), axis=-1)
    return np.moveaxis(found[..., None], -1, axis)


def _concentrated_at(a: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Whether |mean exp(2 pi i a / q)| over the nonzero terms of the last axis (dropped; q broadcast with the axis
    kept, several moduli at once along a leading axis; phases in float32) exceeds ALIGNED_R / sqrt(m), m their count:
    the test of :func:`aligned`, :func:`aligned_scales` and :func:`concentrated`."""
    angle = (2 * np.pi * _residue_fraction(a, q)).astype(np.float32)
    present = a != 0
    cos = np.sum(np.where(present, np.cos(angle), 0), axis=-1, dtype=np.float64)
    sin = np.sum(np.where(present, np.sin(angle), 0), axis=-1, dtype=np.float64)
    nonzero = np.maximum(np.count_nonzero(present, axis=-1), 1)
    return np.hypot(cos, sin) / nonzero > ALIGNED_R / np.sqrt(nonzero)


def _residue_fraction(a: np.ndarray, q: np.ndarray) -> np.ndarray:
    """np.mod(a, q) / q, the residue's fraction of the modulus in [0, 1], computed as t - floor(t) with t = a / q
    (np.mod's fmod is some ten times slower): the same number wherever q is a normal power of two and t = a / q is
    normal (or a = 0). Then t = a 2^-k is exact, floor(t) too, and t - floor(t) = (a mod q) / q, the exact value
    where it has at most 53 bits (a's bits below q: always when |t| >= 1 or t >= 0), else (-q < a < 0 with bits
    far below q) fl(1 + a / q) = fl(a + q) / q, the value np.mod rounds to (its fmod(a, q) + q, scaled exactly by
    q). np.mod where those conditions fail (q not a power of two, subnormal or infinite; t subnormal or
    infinite)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        t = a / q
        fraction = t - np.floor(t)
        tiny = np.finfo(np.float64).tiny
        modulus = np.asarray(q, dtype=np.float64)
        exact = (np.frexp(modulus)[0] == 0.5) & (modulus >= tiny) & np.isfinite(modulus)
        exact = exact & ((a == 0) | (np.abs(t) >= tiny)) & np.isfinite(t)
        return fraction if np.all(exact) else np.where(exact, fraction, np.mod(a, q) / q)


def sum_factor(terms: np.ndarray, u: float, lam_value: float | None, axis: int = -1,
               pattern: np.ndarray | None = None, depth: int | None = None,
               exact: np.ndarray | None = None, linear: np.ndarray | None = None,
               split: np.ndarray | None = None) -> np.ndarray:
    """The relative error factor of a sum of ``terms`` along ``axis`` (kept), relative to sum|terms|:
    min(gamma_D, P) where the roundings may be modelled as independent (:func:`independent` of ``pattern``,
    the signed terms, default ``terms``), gamma_D elsewhere or when ``lam_value`` is None (the worst case).
    D = ``depth``, the declared depth of the summation tree (proofs.reduction), default m - 1 (any order); P is
    P_m (step 4) and with a declared depth at most lambda u (1 + gamma_D) sqrt(D) (sum_v A_v^2 <= D T^2), or with
    ``exact`` (sqrt(sum_v A_v^2) / T of the sum's own tree, proofs.reduction.Reduction.tree_factor) at most that.
    ``linear`` (sum_v A_v / T of that tree, Reduction.tree_sums): the worst case is at most u (1 + gamma_D) linear
    (|fl(sum) - sum| <= sum_v u |t_v|, |t_v| <= (1 + gamma_D) A_v: rigorous, structured rows included).
    ``split``: that tree's split factor (Reduction.tree_split: its aligned and largest nodes rigorously, the rest by
    Azuma-Hoeffding), used where the terms are :func:`independent` (alignment is handled node by node there)."""
    m = np.shape(terms)[axis]
    depth = m - 1 if depth is None else min(depth, m - 1)
    inflation = 1 + gamma(depth, u)  # |t_v| <= (1 + gamma_D) A_v (step 2)
    worst = gamma(depth, u)
    if linear is not None:
        worst = np.minimum(worst, u * inflation * linear)
    shape = list(np.shape(terms))
    shape[axis] = 1
    if lam_value is None or m < 2:
        return np.broadcast_to(worst, shape).copy()
    with np.errstate(over="ignore", invalid="ignore"):
        share = np.minimum(tree_factor(terms, axis, inflation=inflation), np.sqrt(depth))
        chance = lam_value * u * inflation * (share if exact is None else np.minimum(share, exact))
    pattern = terms if pattern is None else pattern
    smaller = (chance < worst) | (split is not None and np.any(split < worst))
    if not np.any(smaller):  # the worst case is the smaller factor (a declared shallow tree): nothing to model
        return np.broadcast_to(worst, np.shape(chance)).copy()
    spread = independent(pattern, axis)
    modelled = spread & ~aligned(pattern, u, axis)
    factor = np.where(modelled, np.minimum(chance, worst), worst)
    return factor if split is None else np.where(spread, np.minimum(factor, split), factor)
