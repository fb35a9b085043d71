"""Statistical tests of dropout masks: each test's false-alarm probability and its power, derived.

A mask is a 0/1 array (1 = kept). Under the contract (H0) its entries are i.i.d. Bernoulli(q), q = 1 - p, and
masks of different seeds are independent (proofs.claims.dropout derives the laws used here). Every test
accepts on an interval whose complement has probability at most ``alpha`` under H0, from the exact null law or
a bound on it, and ``*_power`` bounds from below its probability of rejecting a named alternative:

* :func:`binomial_acceptance`: K ~ Binomial(n, rate) exactly (scipy.stats.binom), equal tails alpha/2. Used for
  the kept count of n elements (rate q) and for the number of equal pairs among n independent pairs of mask
  bits (rate p^2 + q^2: neighbours, rows, seeds). Its power against another rate is exact (:func:`binomial_power`).
* :func:`dispersion_acceptance`: S = sum_r (K_r - w q)^2 / (w p q) over R groups of w elements, K_r i.i.d.
  Binomial(w, q) (E S = R). A Chernoff bound with the exact pmf sets both thresholds: P(S >= t) <=
  exp(R Lambda(l) - l t) for every l > 0, Lambda the log moment generating function of one term, so
  t = min_l (R Lambda(l) + log(2/alpha)) / l has false alarm <= alpha/2 (any l is valid; the best on a grid is
  taken). A fixed count per row has S ~ 0; blocks of k elements sharing one draw have E S = k R.
  :func:`dispersion_power` bounds the miss probability by the same Chernoff bound under the alternative.
* :class:`VarianceBiasPlan`: the mean over R replicas of Var(z), z = x m / q, for one row x of d <= 16
  elements. The law of Var(z) under H0 and under each alternative is exact (all 2^d masks enumerated), so its
  mean mu0, variance s0^2 and range M are known, and Bernstein's inequality P(|mean - mu0| >= t) <=
  2 exp(-R t^2 / (2 s0^2 + 2 M t / 3)) gives the slack t; R is the least power of two with t <= a quarter of the
  smallest effect |mu_alt - mu0| of the named alternatives. The same inequality under an alternative, with
  deviation |mu_alt - mu0| - t >= 3/4 of the effect, bounds its miss probability.

* :func:`lagged_rows_finding`: the agreeing bits of rows r and r + k (k <= ROW_LAGS, r of one parity of floor(r/k))
  at each shift s, exactly Binomial(pairs, p^2 + q^2) (every bit in one pair), each (k, parity, s) at alpha / m, m
  their number (a union bound). Rows whose random streams overlap agree on every pair of one shift.

The false-alarm budget is :data:`BUDGET` per claim and kernel per run; a test divides its claim's share among
its examples (:func:`per_example`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache

import numpy as np

RUN_FALSE_ALARM = 1e-10
"""Per kernel and run, every dropout statistical test together: <= 1e-9 for a run of up to ten kernels. A kernel
runs the claims of one family: ``dropout.*`` (kind dropout) or ``drop_add_ln.*`` (kind dropout_add_layernorm, the
mask read from residual_out), each family's budgets summing to RUN_FALSE_ALARM."""
BUDGET = {
    "dropout.keep_rate": 2e-11,
    "dropout.mask_distribution": 2e-11,
    "dropout.independence": 2e-11,
    "dropout.seeds": 1e-11,
    "dropout.layout_invariance": 2e-11,
    "dropout.variance_bias": 1e-11,
    "drop_add_ln.keep_rate": 2e-11,
    "drop_add_ln.layout_invariance": 1e-11,
    "drop_add_ln.independence": 3e-11,
    "drop_add_ln.seeds": 2e-11,
    "drop_add_ln.variance_bias": 2e-11,
}


def per_example(claim: str, examples: int, share: float = 1.0) -> float:
    """The false alarm one example of a test may spend: ``share`` of the claim's budget over its ``examples``."""
    return BUDGET[claim] * share / max(1, examples)


@dataclass(frozen=True)
class Acceptance:
    """Accept when ``low <= statistic <= high``; H0 gives a statistic outside with probability <= ``alpha``."""

    low: float
    high: float
    center: float
    alpha: float
    what: str

    def rejects(self, statistic: float) -> bool:
        return not self.low <= statistic <= self.high

    def ratio(self, statistic: float) -> float:
        """|statistic - center| over the distance from center to the bound on its side: > 1 exactly when rejected."""
        side = self.high if statistic >= self.center else self.low
        gap = abs(side - self.center)
        rejected = self.rejects(statistic)
        ratio = abs(statistic - self.center) / gap if gap > 0 else (math.inf if rejected else 0.0)
        return max(ratio, math.nextafter(1.0, 2.0)) if rejected else min(ratio, 1.0)

    def describe(self, statistic: float) -> str:
        return (f"{self.what}: expected in [{self.low:.6g}, {self.high:.6g}] (false-alarm probability "
                f"{self.alpha:.3g}), got {statistic:.6g}")


# --- exact binomial test ----------------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def binomial_acceptance(n: int, rate: float, alpha: float, what: str = "count") -> Acceptance:
    """[lo, hi] with P(K < lo) <= alpha/2 and P(K > hi) <= alpha/2 for K ~ Binomial(n, rate), 0 < rate < 1 (kept
    for its arguments: the tests ask for the same few laws again and again)."""
    from scipy import stats  # imported where used: scipy costs a worker ~0.7 s at start-up
    half = alpha / 2
    law = stats.binom(n, rate)
    # low: the least k with P(K <= k) > alpha/2; high: the least k with P(K > k) <= alpha/2 (both monotone in k: a
    # bisection over [0, n], exact where scipy's ppf/isf are not at tiny alpha)
    low = _least(lambda k: law.cdf(k) > half, n)
    high = _least(lambda k: law.sf(k) <= half, n)
    return Acceptance(low, high, n * rate, alpha, what)


def _least(holds, n: int) -> int:
    """The least k in [0, n] where the monotone predicate ``holds`` (false ... false, true ... true) is true; n if
    none before it."""
    lo, hi = 0, n
    while lo < hi:
        middle = (lo + hi) // 2
        if holds(middle):
            hi = middle
        else:
            lo = middle + 1
    return lo


def binomial_power(acceptance: Acceptance, n: int, rate: float) -> float:
    """P(reject) when K ~ Binomial(n, rate): exact."""
    from scipy import stats  # imported where used: scipy costs a worker ~0.7 s at start-up
    law = stats.binom(n, rate)
    return float(law.cdf(acceptance.low - 1) + law.sf(acceptance.high))


def agreement_rate(p: float, correlation: float = 0.0) -> float:
    """P(two mask bits agree) for Bernoulli(1 - p) bits with correlation ``correlation``: p^2 + q^2 + 2 rho p q."""
    q = 1.0 - p
    return p * p + q * q + 2.0 * correlation * p * q


# --- dispersion of kept counts ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CountLaw:
    """The law of the kept count K of a group of ``width`` elements: values and their log-probabilities (logs, so
    that no tail probability underflows to 0: the moment generating function needs every term)."""

    width: int
    values: np.ndarray
    log_probabilities: np.ndarray

    def dispersion_terms(self, p: float) -> tuple[np.ndarray, np.ndarray]:
        """Values and log-probabilities of (K - w q)^2 / (w p q)."""
        q = 1.0 - p
        return (self.values - self.width * q) ** 2 / (self.width * p * q), self.log_probabilities


def independent_counts(width: int, p: float) -> CountLaw:
    """H0: K ~ Binomial(w, 1 - p) (scipy.stats.binom.logpmf)."""
    from scipy import stats  # imported where used: scipy costs a worker ~0.7 s at start-up
    values = np.arange(width + 1)
    return CountLaw(width, values, stats.binom.logpmf(values, width, 1.0 - p))


def fixed_counts(width: int, p: float) -> CountLaw:
    """Sampling without replacement: exactly round(p w) of the w elements dropped."""
    return CountLaw(width, np.array([width - round(p * width)]), np.array([0.0]))


def block_counts(width: int, p: float, k: int) -> CountLaw:
    """One draw shared by each block of k elements (k divides w): K = k Binomial(w / k, 1 - p)."""
    if width % k:
        raise ValueError(f"block size {k} does not divide the width {width}")
    blocks = independent_counts(width // k, p)
    return CountLaw(width, k * blocks.values, blocks.log_probabilities)


LAMBDAS = np.geomspace(1e-6, 4.0, 400)
"""The Chernoff parameters tried: every one gives a valid bound, the best is taken."""


def _log_mgf(values: np.ndarray, log_probabilities: np.ndarray, lambdas: np.ndarray) -> np.ndarray:
    """log E[exp(l X)] for each l, X taking ``values`` with probabilities exp(``log_probabilities``)."""
    from scipy import special  # imported where used: scipy costs a worker ~0.7 s at start-up
    support = np.isfinite(log_probabilities)
    return special.logsumexp(log_probabilities[support] + np.outer(lambdas, values[support]), axis=1)


@lru_cache(maxsize=1024)
def dispersion_acceptance(width: int, p: float, groups: int, alpha: float,
                          what: str = "dispersion of kept counts") -> Acceptance:
    """Chernoff thresholds of S = sum over ``groups`` i.i.d. terms (K - w q)^2 / (w p q), K ~ Binomial(w, q) (kept
    for its arguments, as :func:`binomial_acceptance`)."""
    values, log_probabilities = independent_counts(width, p).dispersion_terms(p)
    log_two_over_alpha = math.log(2.0 / alpha)
    high = np.min((groups * _log_mgf(values, log_probabilities, LAMBDAS) + log_two_over_alpha) / LAMBDAS)
    low = np.max(-(groups * _log_mgf(values, log_probabilities, -LAMBDAS) + log_two_over_alpha) / LAMBDAS)
    return Acceptance(float(low), float(high), float(groups), alpha, f"{what} ({groups} groups of {width})")


def dispersion_statistic(counts: np.ndarray, width: int, p: float) -> float:
    q = 1.0 - p
    return float(np.sum((np.asarray(counts, dtype=np.float64) - width * q) ** 2) / (width * p * q))


def dispersion_power(acceptance: Acceptance, alternative: CountLaw, p: float, groups: int) -> float:
    """Lower bound on P(reject) when the ``groups`` counts are i.i.d. with the alternative's law (Chernoff)."""
    values, log_probabilities = alternative.dispersion_terms(p)
    below_high = np.min(groups * _log_mgf(values, log_probabilities, -LAMBDAS) + LAMBDAS * acceptance.high)
    above_low = np.min(groups * _log_mgf(values, log_probabilities, LAMBDAS) - LAMBDAS * acceptance.low)
    return float(max(0.0, 1.0 - math.exp(min(below_high, above_low, 0.0))))


# --- variance bias over replicas of one row ---------------------------------------------------------------------


def bernstein_deviation(variance: float, spread: float, samples: int, alpha: float) -> float:
    """t with 2 exp(-n t^2 / (2 s^2 + 2 M t / 3)) = alpha: a mean of n i.i.d. values with variance s^2 and
    |X - E X| <= M leaves its expectation by t or more with probability at most alpha."""
    log_term = math.log(2.0 / alpha)
    linear = spread * log_term / 3.0
    return (linear + math.sqrt(linear**2 + 2.0 * samples * variance * log_term)) / samples


def _bernstein_tail(variance: float, spread: float, samples: int, deviation: float) -> float:
    if deviation <= 0:
        return 1.0
    return min(1.0, 2.0 * math.exp(-samples * deviation**2 / (2.0 * variance + 2.0 * spread * deviation / 3.0)))


BLOCK_SIZES = (2, 4)
MAX_ENUMERATED_WIDTH = 16


@dataclass(frozen=True)
class MaskLaw:
    """A law over the 2^d masks of one row: its name and a weight per mask."""

    name: str
    weights: np.ndarray


@dataclass(frozen=True)
class VarianceBiasPlan:
    """The variance-bias test of one row ``x`` (float64, d <= 16) at drop probability ``p``: of Var(z), z = x m / q,
    or, with a ``residual`` row r (the fused dropout + add kind), of Var(r + x m / q)."""

    x: np.ndarray
    p: float
    alpha: float
    max_replicas: int = 2**16
    residual: np.ndarray | None = None
    masks: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        d = self.x.shape[-1]
        if not 2 <= d <= MAX_ENUMERATED_WIDTH or not 0.0 < self.p < 1.0:
            raise ValueError(f"the variance-bias plan needs 2 <= d <= {MAX_ENUMERATED_WIDTH} and 0 < p < 1")
        object.__setattr__(self, "masks", ((np.arange(2**d)[:, None] >> np.arange(d)) & 1).astype(bool))

    def _variance(self, masks: np.ndarray) -> np.ndarray:
        """Var(z) (population), z = [r +] x m / q, of each mask (row of ``masks``)."""
        z = self.x / (1.0 - self.p) * masks
        return (z if self.residual is None else self.residual + z).var(axis=-1)

    @cached_property
    def variances(self) -> np.ndarray:
        """Var(z) for every mask."""
        return self._variance(self.masks)

    def laws(self) -> list[MaskLaw]:
        """H0 first, then the named alternatives: a fixed count per row, blocks of k = 2, 4 (k | d), a mask per row."""
        d, p, q = self.x.shape[-1], self.p, 1.0 - self.p
        kept = self.masks.sum(-1)
        laws = [MaskLaw("i.i.d. Bernoulli", q**kept * p ** (d - kept)),
                MaskLaw("fixed count per row", (kept == d - round(p * d)).astype(np.float64))]
        for k in (*(k for k in BLOCK_SIZES if d % k == 0 and k < d), d):
            blocks = self.masks.reshape(-1, d // k, k)
            constant = np.all(blocks == blocks[..., :1], axis=(1, 2))
            name = "one draw per row" if k == d else f"blocks of {k} elements"
            laws.append(MaskLaw(name, np.where(constant, q ** (kept / k) * p ** ((d - kept) / k), 0.0)))
        return laws

    def moments(self, law: MaskLaw) -> tuple[float, float, float]:
        """Mean, variance and largest |Var(z) - mean| of Var(z) under the law."""
        weights = law.weights / law.weights.sum()
        mean = float(weights @ self.variances)
        support = weights > 0
        return mean, float(weights @ (self.variances - mean) ** 2), float(np.abs(self.variances[support] - mean).max())

    @cached_property
    def null(self) -> tuple[float, float, float]:
        return self.moments(self.laws()[0])

    def effects(self) -> dict[str, float]:
        """mu_alt - mu0 for each named alternative."""
        return {law.name: self.moments(law)[0] - self.null[0] for law in self.laws()[1:]}

    def slack(self, replicas: int) -> float:
        _, variance, spread = self.null
        return bernstein_deviation(variance, spread, replicas, self.alpha)

    @cached_property
    def replicas(self) -> int:
        """The least power of two whose slack is at most a quarter of the smallest effect (max_replicas + 1 if none)."""
        smallest = min(abs(effect) for effect in self.effects().values())
        replicas = 1
        while replicas <= self.max_replicas and self.slack(replicas) > smallest / 4:
            replicas *= 2
        return replicas

    @property
    def feasible(self) -> bool:
        return self.replicas <= self.max_replicas

    def power(self) -> dict[str, float]:
        """Lower bound on P(reject) for each alternative at :attr:`replicas` (Bernstein under the alternative)."""
        slack, mean0 = self.slack(self.replicas), self.null[0]
        powers = {}
        for law in self.laws()[1:]:
            mean, variance, spread = self.moments(law)
            powers[law.name] = 1.0 - _bernstein_tail(variance, spread, self.replicas, abs(mean - mean0) - slack)
        return powers

    def acceptance(self) -> Acceptance:
        mean0, slack = self.null[0], self.slack(self.replicas)
        return Acceptance(mean0 - slack, mean0 + slack, mean0, self.alpha,
                          f"mean of Var(z) over {self.replicas} masks")

    def measured(self, masks: np.ndarray) -> float:
        """Mean over the rows of ``masks`` ([R, d], 0/1) of Var([r +] x m / q)."""
        return float(self._variance(masks).mean())


# --- statistics of a batch of masks -----------------------------------------------------------------------------


def pair_agreement(first: np.ndarray, second: np.ndarray) -> tuple[int, int]:
    """(number of equal bits, number of pairs) of two equally shaped 0/1 arrays."""
    return int(np.count_nonzero(first == second)), int(first.size)


def neighbour_agreement(masks: np.ndarray, offset: int) -> tuple[int, int]:
    """Disjoint pairs of neighbours (offset + 2j, offset + 2j + 1) within each row of ``masks`` [R, d]."""
    usable = (masks.shape[-1] - offset) // 2 * 2
    pairs = masks[:, offset:offset + usable].reshape(masks.shape[0], -1, 2)
    return pair_agreement(pairs[..., 0], pairs[..., 1])


def row_agreement(masks: np.ndarray, apart: int = 1) -> tuple[int, int]:
    """Disjoint pairs of rows column by column: (2r, 2r + 1) for ``apart`` = 1 (neighbouring rows), else
    (r, r + apart) for r < apart (``apart`` = R/2: rows half the batch apart, so a mask that repeats every k rows,
    k dividing R/2, makes every pair agree)."""
    if apart == 1:
        usable = masks.shape[0] // 2 * 2
        return pair_agreement(masks[0:usable:2], masks[1:usable:2])
    return pair_agreement(masks[:apart], masks[apart:2 * apart])


def group_counts(masks: np.ndarray, rows: int = 1) -> np.ndarray:
    """Kept counts of consecutive groups of ``rows`` rows (a partial last group is left out)."""
    usable = masks.shape[0] // rows * rows
    return masks[:usable].reshape(-1, rows * masks.shape[-1]).sum(-1)


@dataclass(frozen=True)
class Finding:
    """One test of a batch: its acceptance interval and the statistic the masks gave."""

    acceptance: Acceptance
    statistic: float

    @property
    def rejected(self) -> bool:
        return self.acceptance.rejects(self.statistic)

    @property
    def ratio(self) -> float:
        return self.acceptance.ratio(self.statistic)

    def describe(self) -> str:
        return self.acceptance.describe(self.statistic)

    def named(self, where: str) -> Finding:
        """The same finding, its description prefixed with ``where`` (e.g. the input's layout)."""
        return Finding(replace(self.acceptance, what=f"{where}: {self.acceptance.what}"), self.statistic)


def agreement_finding(agreeing: int, pairs: int, p: float, alpha: float, what: str) -> Finding:
    """Exact binomial test of ``agreeing`` ~ Binomial(pairs, p^2 + q^2)."""
    return Finding(binomial_acceptance(pairs, agreement_rate(p), alpha, f"{what} ({pairs} pairs)"), agreeing)


def dispersion_finding(masks: np.ndarray, p: float, alpha: float, rows: int = 1) -> Finding:
    """Dispersion of the kept counts of groups of ``rows`` rows of ``masks`` [R, d]."""
    counts = group_counts(masks, rows)
    width = rows * masks.shape[-1]
    what = "dispersion of per-row kept counts" if rows == 1 else f"dispersion of kept counts of {rows} rows"
    return Finding(dispersion_acceptance(width, p, counts.size, alpha, what), dispersion_statistic(counts, width, p))


def independence_findings(masks: np.ndarray, p: float, alpha: float) -> list[Finding]:
    """Neighbours (pairs at even and at odd offsets), rows (one column of two rows: neighbouring rows, and rows half
    the batch apart, alpha / 8 each) and the dispersion of two-row counts: alpha / 4 each. Tests without pairs
    (d = 1, one row) are left out."""
    findings = []
    for offset in (0, 1):
        agreeing, pairs = neighbour_agreement(masks, offset)
        if pairs:
            findings.append(agreement_finding(agreeing, pairs, p, alpha / 4, f"neighbours at offset {offset}"))
    rows = masks.shape[0]
    if rows >= 2:
        findings.append(agreement_finding(*row_agreement(masks), p, alpha / 8, "rows 2r and 2r+1"))
        findings.append(agreement_finding(*row_agreement(masks, rows // 2), p, alpha / 8,
                                          f"rows r and r+{rows // 2}"))
        findings.append(dispersion_finding(masks, p, alpha / 4, rows=2))
    return findings


# --- a row's draws repeated in another row, at any shift --------------------------------------------------------

ROW_LAGS = 8
"""The row lags k (rows r and r + k) :func:`lagged_rows_finding` compares, 1..ROW_LAGS: a per-row random offset
advanced by less than the row consumes repeats row r's draws in rows r + 1, r + 2, ... (shifted), and a per-program
offset that forgets the program's other rows repeats them a few rows on."""


def lagged_agreements(masks: np.ndarray, lag: int, parity: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(shifts s, agreeing pairs, pairs) of the row pairs (r, r + lag) with floor(r / lag) = parity mod 2, at every
    shift s in (-d, d): the pairs (row r [j + s], row r + lag [j]) over the columns where both exist, summed over the
    row pairs. Each row is in at most one of those row pairs and each bit of a row in one pair of a shift, so under
    H0 the agreeing count of a shift is exactly Binomial(pairs, p^2 + q^2). One FFT cross-correlation of the +-1
    rows gives every shift at once (the counts are integers; the FFT's error, < 1e-6 at these sizes, is rounded
    away)."""
    rows, d = masks.shape
    firsts = np.array([r for r in range(rows - lag) if (r // lag) % 2 == parity], dtype=np.int64)
    shifts = np.arange(-(d - 1), d)
    if firsts.size == 0:
        return shifts, np.zeros(shifts.size, np.int64), np.zeros(shifts.size, np.int64)
    size = 2 * d
    spectra = np.fft.rfft(2.0 * masks.astype(np.float64) - 1.0, n=size, axis=-1)
    correlation = np.fft.irfft(np.sum(spectra[firsts] * np.conj(spectra[firsts + lag]), axis=0), n=size)
    pairs = firsts.size * (d - np.abs(shifts))
    agreeing = (pairs + np.rint(correlation[shifts % size]).astype(np.int64)) // 2
    return shifts, agreeing, pairs


def lagged_rows_finding(masks: np.ndarray, p: float, alpha: float, lags: int = ROW_LAGS) -> Finding | None:
    """Rows r and r + k (k = 1..lags, both parities of floor(r / k)) compared at every shift s in (-d, d): the exact
    two-sided binomial test of each (k, parity, s) at level alpha / m, m the number of them (a union bound: the false
    alarm of the whole is at most alpha). The finding of the most extreme one (smallest tail probability); None for a
    single row.

    Power: rows whose random offsets advance by delta < d per row (row r + 1's first d - delta draws are row r's
    last) make every pair of the shift delta agree: rows / 2 (d - delta) pairs of lag 1, rejected whenever
    (p^2 + q^2)^(rows / 2 (d - delta)) <= alpha / (2 m) (for 1024 rows of 64 with delta = 32, p = 0.9: 10^-1420).
    A row repeated k <= lags rows on, at any shift, likewise."""
    from scipy import stats  # imported where used: scipy costs a worker ~0.7 s at start-up
    rows = masks.shape[0]
    rate = agreement_rate(p)
    tests = [(k, parity, *lagged_agreements(masks, k, parity))
             for k in range(1, min(lags, rows - 1) + 1) for parity in (0, 1)]
    tests = [test for test in tests if test[-1].any()]
    if not tests:
        return None
    each = alpha / sum(test[-1].size for test in tests)
    worst = None
    for k, parity, shifts, agreeing, pairs in tests:
        tail = np.minimum(stats.binom.cdf(agreeing, pairs, rate), stats.binom.sf(agreeing - 1, pairs, rate))
        tail = np.where(pairs > 0, tail, 1.0)
        at = int(np.argmin(tail))
        if worst is None or tail[at] < worst[0]:
            worst = (float(tail[at]), k, parity, int(shifts[at]), int(agreeing[at]), int(pairs[at]))
    _, k, parity, shift, agreeing, pairs = worst
    what = (f"rows r and r+{k} (floor(r/{k}) {'even' if parity == 0 else 'odd'}), row r shifted by {shift}: "
            f"agreeing bits, the most extreme of every lag <= {min(lags, rows - 1)} and shift")
    return Finding(binomial_acceptance(pairs, rate, each, f"{what} ({pairs} pairs)"), agreeing)
