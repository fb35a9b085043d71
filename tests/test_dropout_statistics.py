"""The dropout tests' stated false-alarm probabilities and powers (properties/bounds/dropout_statistics.py), shown by
simulation with cheap numpy masks: at a measurable alpha a correct mask is rejected no more often than stated,
and each named alternative is rejected at least as often as its derived power."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import settings
from scipy import stats

from core.capabilities import PROBED_DTYPES
from proofs import oracles
from properties.bounds import dropout_statistics as ds
from properties.checks.dropout import SEED_PAIRS
from properties.draws import dropout_strategies as sizes


def iid_masks(rng: np.random.Generator, rows: int, width: int, p: float) -> np.ndarray:
    return (rng.random((rows, width)) >= p).astype(np.int8)


def fixed_count_masks(rng: np.random.Generator, rows: int, width: int, p: float) -> np.ndarray:
    """Exactly round(p d) dropped per row, the dropped set uniform (sampling without replacement)."""
    order = np.argsort(rng.random((rows, width)), axis=-1)
    return (order >= round(p * width)).astype(np.int8)


def block_masks(rng: np.random.Generator, rows: int, width: int, p: float, k: int) -> np.ndarray:
    return np.repeat(iid_masks(rng, rows, width // k, p), k, axis=-1)


def markov_masks(rng: np.random.Generator, rows: int, width: int, p: float, rho: float) -> np.ndarray:
    """Each bit copies its left neighbour with probability rho, else is a fresh draw: lag-1 correlation rho."""
    fresh, copy = iid_masks(rng, rows, width, p), rng.random((rows, width)) < rho
    masks = fresh.copy()
    for column in range(1, width):
        masks[:, column] = np.where(copy[:, column], masks[:, column - 1], fresh[:, column])
    return masks


def upper_confidence(hits: int, trials: int) -> float:
    """A one-sided 1 - 1e-6 Clopper-Pearson upper bound on a simulated rate."""
    return 1.0 if hits == trials else float(stats.beta.ppf(1 - 1e-6, hits + 1, trials - hits))


def lower_confidence(hits: int, trials: int) -> float:
    return 0.0 if hits == 0 else float(stats.beta.ppf(1e-6, hits, trials - hits + 1))


@pytest.mark.parametrize("family", ["dropout", "drop_add_ln"])
def test_the_budget_is_within_the_run_false_alarm(family):
    """A kernel runs one family's claims (dropout.* or drop_add_ln.*): each family's budgets sum to at most the
    run's."""
    assert sum(v for claim, v in ds.BUDGET.items() if claim.split(".")[0] == family) <= ds.RUN_FALSE_ALARM * (1 + 1e-12)
    assert {claim.split(".")[0] for claim in ds.BUDGET} == {"dropout", "drop_add_ln"}
    assert ds.per_example("dropout.keep_rate", 10, share=0.5) == ds.BUDGET["dropout.keep_rate"] / 20


@pytest.mark.parametrize(("n", "rate", "alpha"), [(10, 0.5, 0.05), (4096, 0.9, 1e-12), (2**20, 0.001, 1e-13),
                                                  (65536, 0.58, 1e-11)])
def test_binomial_acceptance_is_the_exact_equal_tailed_interval(n, rate, alpha):
    acceptance = ds.binomial_acceptance(n, rate, alpha)
    law = stats.binom(n, rate)
    assert law.cdf(acceptance.low - 1) <= alpha / 2 < law.cdf(acceptance.low)
    assert law.sf(acceptance.high) <= alpha / 2 < law.sf(acceptance.high - 1)
    assert ds.binomial_power(acceptance, n, rate) <= alpha


@pytest.mark.parametrize(("width", "p"), [(1, 0.3), (8, 0.1), (8, 0.5), (64, 0.9)])
def test_dispersion_false_alarm_is_at_most_alpha(width, p):
    """At alpha = 0.05 the Chernoff thresholds reject correct masks at most 5% of the time (conservative)."""
    rng, alpha, groups, trials = np.random.default_rng(width), 0.05, 200, 1000
    acceptance = ds.dispersion_acceptance(width, p, groups, alpha)
    hits = sum(acceptance.rejects(ds.dispersion_statistic(iid_masks(rng, groups, width, p).sum(-1), width, p))
               for _ in range(trials))
    assert lower_confidence(hits, trials) <= alpha, (hits, trials)


@pytest.mark.parametrize(("width", "p", "k"), [(256, 0.5, 2), (64, 0.3, 2), (32, 0.5, 4)])
def test_dispersion_power_against_blocks_is_at_least_the_derived_bound(width, p, k):
    rng, alpha, groups, trials = np.random.default_rng(k), 1e-11, 256, 300
    acceptance = ds.dispersion_acceptance(width, p, groups, alpha)
    bound = ds.dispersion_power(acceptance, ds.block_counts(width, p, k), p, groups)
    hits = sum(acceptance.rejects(ds.dispersion_statistic(block_masks(rng, groups, width, p, k).sum(-1), width, p))
               for _ in range(trials))
    assert upper_confidence(hits, trials) >= bound, (hits, trials, bound)


def test_a_fixed_count_per_row_is_rejected_with_derived_power_one():
    rng, width, p, groups = np.random.default_rng(0), 8, 0.3, 8192
    acceptance = ds.dispersion_acceptance(width, p, groups, 1e-11)
    assert ds.dispersion_power(acceptance, ds.fixed_counts(width, p), p, groups) == 1.0
    assert acceptance.rejects(ds.dispersion_statistic(fixed_count_masks(rng, groups, width, p).sum(-1), width, p))


def test_correct_masks_pass_every_independence_test_and_blocks_fail_them():
    rng, p = np.random.default_rng(1), 0.3
    assert not any(f.rejected for f in ds.independence_findings(iid_masks(rng, 1024, 64, p), p, 1e-11))
    for k in (2, 4):
        assert any(f.rejected for f in ds.independence_findings(block_masks(rng, 1024, 64, p, k), p, 1e-11))
    shared_rows = np.repeat(iid_masks(rng, 1, 64, p), 1024, axis=0)
    assert any(f.rejected for f in ds.independence_findings(shared_rows, p, 1e-11))


def test_neighbour_correlation_power_matches_simulation():
    """The copy-rho chain: derived power from the pair agreement rate p^2 + q^2 + 2 rho p q."""
    rng, p, rho, rows, width, trials = np.random.default_rng(2), 0.3, 0.03, 64, 256, 200
    pairs = rows * width // 2
    acceptance = ds.binomial_acceptance(pairs, ds.agreement_rate(p), 1e-11)
    derived = ds.binomial_power(acceptance, pairs, ds.agreement_rate(p, rho))
    hits = sum(acceptance.rejects(ds.neighbour_agreement(markov_masks(rng, rows, width, p, rho), 0)[0])
               for _ in range(trials))
    assert lower_confidence(hits, trials) <= derived <= upper_confidence(hits, trials), (hits, derived)


@pytest.mark.parametrize(("p", "offset"), [(0.125, 1.0), (0.25, 3.0), (0.5, -2.0), (0.75, 0.01)])
def test_variance_bias_plan_is_the_derivation_and_its_slack_a_quarter_of_every_effect(p, offset):
    """Rows as the conformance test draws them: offset (1 + 0.3 z)."""
    x = offset * (1 + 0.3 * np.random.default_rng(int(8 * p)).standard_normal(8))
    plan = ds.VarianceBiasPlan(x, p, 1e-12)
    mean, var = x.mean(), x.var()
    assert plan.null[0] - var == pytest.approx(float(oracles.dropout_variance_bias(p, 8, var, mean)), rel=1e-12)
    effects = plan.effects()
    assert effects["fixed count per row"] == pytest.approx(p / ((1 - p) * 8) * (mean**2 - var / 7), rel=1e-9)
    assert plan.feasible and plan.slack(plan.replicas) <= min(abs(e) for e in effects.values()) / 4
    assert min(plan.power().values()) > 1 - 1e-6


def test_variance_bias_by_simulation_accepts_iid_and_rejects_each_alternative():
    rng, p = np.random.default_rng(3), 0.5
    plan = ds.VarianceBiasPlan(3.0 + rng.standard_normal(8) * 0.9, p, 1e-12)
    acceptance, rows = plan.acceptance(), plan.replicas
    for _ in range(5):
        assert not acceptance.rejects(plan.measured(iid_masks(rng, rows, 8, p)))
        assert acceptance.rejects(plan.measured(fixed_count_masks(rng, rows, 8, p)))
        for k in (2, 4, 8):
            assert acceptance.rejects(plan.measured(block_masks(rng, rows, 8, p, k)))


def test_acceptance_ratio_exceeds_one_exactly_when_rejected():
    acceptance = ds.Acceptance(10, 20, 14, 1e-3, "count")
    assert [acceptance.ratio(v) > 1 for v in (9, 10, 14, 20, 21)] == [True, False, False, False, True]
    assert acceptance.ratio(20) == 1.0 and math.isclose(acceptance.ratio(12), 0.5)


# --- the power of each conformance test at the sizes and false alarms it runs with under ci ---------------------

CI_EXAMPLES = settings.get_profile("ci").max_examples


def ci_alpha(claim: str, fraction: float, share: float = 1.0) -> float:
    return ds.per_example(claim, max(1, round(CI_EXAMPLES * fraction)), share)


def power_table() -> list[tuple[str, float, int, str, float]]:
    """(test, p, d, alternative, derived power) of every statistical test at its ci size and false alarm."""
    rows = []
    alpha = ci_alpha("dropout.keep_rate", sizes.KEEP_RATE_FRACTION, share=sizes.KEEP_RATE_SHARES["drawn"])
    n = sizes.KEEP_RATE_ELEMENTS
    for p in sizes.KEEP_RATE_PROBABILITIES:
        acceptance = ds.binomial_acceptance(n, 1 - p, alpha)
        if p < 0.1:
            rows.append(("keep_rate", p, n, "identity for p < 0.1", ds.binomial_power(acceptance, n, 1.0)))
        rows.append(("keep_rate", p, n, "keep probability p", ds.binomial_power(acceptance, n, p)))
    # in each dtype: a uniform on bfloat16's grid k/256 keeps u >= p, 255/256 of the elements at p = 0.001, none at
    # p = 0.999 (smallest: the elements of the widest width's rows)
    alpha = ci_alpha("dropout.keep_rate", sizes.EXTREME_FRACTION,
                     share=sizes.KEEP_RATE_SHARES["extreme"] / len(PROBED_DTYPES))
    n = min(sizes.KEEP_RATE_ELEMENTS // d * d for d in sizes.KEEP_RATE_WIDTHS)
    for p in sizes.EXTREME_PROBABILITIES:
        acceptance = ds.binomial_acceptance(n, 1 - p, alpha)
        kept = sum(k / 256 >= p for k in range(256)) / 256
        rows.append(("keep_rate", p, n, "a uniform drawn in bfloat16", ds.binomial_power(acceptance, n, kept)))
    alpha = ci_alpha("dropout.mask_distribution", sizes.MASK_FRACTION)
    for p in sizes.TESTED_PROBABILITIES:
        for width in sizes.MASK_WIDTHS:
            groups = sizes.MASK_ELEMENTS // width
            acceptance = ds.dispersion_acceptance(width, p, groups, alpha)
            laws = {"fixed count per row": ds.fixed_counts(width, p),
                    **{f"blocks of {k}": ds.block_counts(width, p, k) for k in (2, 4) if width % k == 0}}
            rows += [("mask_distribution", p, width, name, ds.dispersion_power(acceptance, law, p, groups))
                     for name, law in laws.items()]
    alpha = ci_alpha("dropout.independence", sizes.INDEPENDENCE_FRACTION, share=0.5) / 4
    pairs = sizes.INDEPENDENCE_ELEMENTS // 2  # neighbours at offset 0, even widths
    for p in sizes.TESTED_PROBABILITIES:
        acceptance = ds.binomial_acceptance(pairs, ds.agreement_rate(p), alpha)
        for rho in (0.05, 0.1, 0.25):
            rows.append(("independence", p, 0, f"neighbour correlation {rho}",
                         ds.binomial_power(acceptance, pairs, ds.agreement_rate(p, rho))))
        rows.append(("independence", p, 0, "blocks of 2 or 4 (pairs agree)", ds.binomial_power(acceptance, pairs, 1.0)))
    alpha = ci_alpha("dropout.seeds", sizes.MASK_FRACTION) / len(SEED_PAIRS)
    n = sizes.SEED_ELEMENTS
    for p in sizes.TESTED_PROBABILITIES:
        acceptance = ds.binomial_acceptance(n, ds.agreement_rate(p), alpha)
        rows.append(("seeds", p, n, "seed ignored / seed % 2 (s + 2)", ds.binomial_power(acceptance, n, 1.0)))
    return rows


KNOWN_WEAK = {("mask_distribution", 0.5, 1, "fixed count per row"),  # d = 1, p = 1/2: both laws give S = R
              ("keep_rate", 0.5, sizes.KEEP_RATE_ELEMENTS, "keep probability p")}  # p = 1 - p
"""Where a test has no power, by the mathematics (the alternative is H0 there)."""


def test_every_statistical_test_has_its_stated_power_at_its_ci_size():
    weak = []
    for test, p, width, alternative, power in power_table():
        if (test, p, width, alternative) in KNOWN_WEAK or alternative.startswith("neighbour correlation"):
            continue
        if power < 1 - 1e-6:
            weak.append((test, p, width, alternative, power))
    assert not weak, weak


def test_neighbour_correlation_power_is_stated_by_p():
    """A copy-rho chain is caught with power >= 1 - 1e-6 at rho = 0.25 for every tested p, and at rho = 0.1 for
    p >= 0.1 (the agreement rate moves by 2 rho p q: small p leaves little to move)."""
    table = {(p, alternative): power for test, p, _, alternative, power in power_table() if test == "independence"}
    assert all(table[(p, "neighbour correlation 0.25")] > 1 - 1e-6 for p in sizes.TESTED_PROBABILITIES)
    assert all(table[(p, "neighbour correlation 0.1")] > 1 - 1e-6 for p in sizes.TESTED_PROBABILITIES if p >= 0.1)


# --- rows compared at every lag and shift (dropout_statistics.lagged_rows_finding) ------------------------------


def overlapping_row_masks(rng: np.random.Generator, rows: int, width: int, p: float, offset: int) -> np.ndarray:
    """Row r reads one stream of uniforms from r * offset (offset < width: rows overlap by width - offset)."""
    stream = rng.random((rows - 1) * offset + width)
    return (stream[np.arange(rows)[:, None] * offset + np.arange(width)] >= p).astype(np.int8)


def test_lagged_agreements_count_the_pairs_of_each_shift():
    """The FFT's counts are those of the row pairs (r, r + k), floor(r / k) of the parity, at each shift, by hand."""
    rng = np.random.default_rng(5)
    masks = iid_masks(rng, 7, 9, 0.3)
    for lag, parity in ((1, 0), (1, 1), (2, 0), (3, 1)):
        shifts, agreeing, pairs = ds.lagged_agreements(masks, lag, parity)
        firsts = [r for r in range(7 - lag) if (r // lag) % 2 == parity]
        for s, got, n in zip(shifts, agreeing, pairs, strict=True):
            columns = [j for j in range(9) if 0 <= j + s < 9]
            assert n == len(firsts) * len(columns)
            assert got == sum(masks[r, j + s] == masks[r + lag, j] for r in firsts for j in columns)


@pytest.mark.parametrize(("rows", "width", "p"), [(16, 32, 0.5), (8, 16, 0.9)])
def test_lagged_rows_false_alarm_is_at_most_alpha(rows, width, p):
    """At alpha = 0.05 the union of the exact binomial tests rejects correct masks at most 5% of the time."""
    rng, alpha, trials = np.random.default_rng(rows), 0.05, 300
    hits = sum(ds.lagged_rows_finding(iid_masks(rng, rows, width, p), p, alpha).rejected for _ in range(trials))
    assert lower_confidence(hits, trials) <= alpha, (hits, trials)


LAGGED_CI_ALPHA = ci_alpha("dropout.independence", 0.1, share=0.2)  # test_no_row_repeats_another_at_any_shift's


@pytest.mark.parametrize("width", [64, 512, 8192])
@pytest.mark.parametrize("p", [0.05, 0.5, 0.9])  # the extremes of TESTED_PROBABILITIES: the weakest
def test_overlapping_row_streams_are_rejected_at_the_ci_false_alarm(width, p):
    """2^16 elements (the test's size): rows offset by d/2 (flagos-ai/FlagGems#85) and by 1, and row r repeated 5
    rows on, shifted by 3, are rejected; rows offset by d - 32 (32 shared draws a row) wherever the derived power
    condition holds: every one of the floor(R/2) 32 pairs of lag 1 agrees, a tail (p^2 + q^2)^n <= alpha / (2 m),
    m <= 16 (2d - 1) tests. i.i.d. masks of the same sizes pass."""
    rng, rows = np.random.default_rng(width), 2**16 // width
    assert not ds.lagged_rows_finding(iid_masks(rng, rows, width, p), p, LAGGED_CI_ALPHA).rejected
    for offset in (width // 2, 1):
        assert ds.lagged_rows_finding(overlapping_row_masks(rng, rows, width, p, offset), p, LAGGED_CI_ALPHA).rejected
    shared = rows // 2 * 32
    if ds.agreement_rate(p) ** shared <= LAGGED_CI_ALPHA / (2 * 16 * (2 * width - 1)):
        masks = overlapping_row_masks(rng, rows, width, p, width - 32)
        assert ds.lagged_rows_finding(masks, p, LAGGED_CI_ALPHA).rejected
    repeated = iid_masks(rng, rows, width, p)
    for r in range(5, rows):
        repeated[r, 3:] = repeated[r - 5, :-3]
    assert ds.lagged_rows_finding(repeated, p, LAGGED_CI_ALPHA).rejected
