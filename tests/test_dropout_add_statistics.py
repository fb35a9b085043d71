"""The dropout + add kind's statistical tests (properties/test_dropout_add.py): the mask they read from residual_out
is the mask the kernel drew, and each test has its stated power against named alternatives at the sizes and false
alarms it runs with under ci (the tests themselves, and their false alarms, are
properties/bounds/dropout_statistics.py's, shown there by tests/test_dropout_statistics.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from corpus.dropout_add import DROP_ADD_CORRECT, _mask
from hypothesis import settings

from core.capabilities import PROBED_DTYPES
from properties.bounds import dropout_statistics as ds
from properties.checks.dropout import SEED_PAIRS
from properties.checks.dropout_add import LAYOUT_FRACTION, LAYOUTS, kept_mask
from properties.draws import fused_strategies as sizes
from properties.draws.dropout_strategies import (
    EXTREME_FRACTION,
    EXTREME_PROBABILITIES,
    KEEP_RATE_PROBABILITIES,
    TESTED_PROBABILITIES,
    nonzero_values,
)

CI_EXAMPLES = settings.get_profile("ci").max_examples


def ci_alpha(claim: str, fraction: float) -> float:
    return ds.per_example(claim, max(1, round(CI_EXAMPLES * fraction)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("residual", ["zeros", "within x"])
def test_the_mask_read_from_residual_out_is_the_mask_drawn(dtype, residual):
    """The corpus control draws its mask from torch.Generator(seed): residual_out != residual recovers it exactly."""
    shape, p, seed = (8, 512), 0.3, 7
    x = nonzero_values(shape, 1, 1.0, 0.01).to(dtype)
    fraction = torch.zeros(shape, dtype=torch.float64) if residual == "zeros" else torch.rand(shape) * 2 - 1
    r = (x.double() * fraction).to(dtype)
    assert (kept_mask(DROP_ADD_CORRECT, x, r, None, 1e-5, p, seed) == _mask(shape, p, seed, "").numpy()).all()


def power_table() -> list[tuple[str, float, str, float]]:
    """(test, p, alternative, derived power) of the fused kind's statistical tests at their ci sizes."""
    rows = []
    n = sizes.MASK_SHAPES[0][0] * sizes.MASK_SHAPES[0][1]
    alpha = ci_alpha("drop_add_ln.keep_rate", sizes.KEEP_RATE_FRACTION) * sizes.KEEP_RATE_SHARES["drawn"]
    for p in KEEP_RATE_PROBABILITIES:
        acceptance = ds.binomial_acceptance(n, 1 - p, alpha)
        if p != 0.5:
            rows.append(("keep_rate", p, "keep probability p (keep and drop swapped)", ds.binomial_power(acceptance,
                                                                                                          n, p)))
        if p < 0.1:
            rows.append(("keep_rate", p, "no dropout for p < 0.1", ds.binomial_power(acceptance, n, 1.0)))
    # in each dtype, p = 0.001 and 0.999: a uniform on bfloat16's grid k/256 keeps 255/256 of the elements, or none
    alpha = ci_alpha("drop_add_ln.keep_rate", EXTREME_FRACTION) * sizes.KEEP_RATE_SHARES["extreme"] / len(PROBED_DTYPES)
    for p in EXTREME_PROBABILITIES:
        acceptance = ds.binomial_acceptance(n, 1 - p, alpha)
        kept = sum(k / 256 >= p for k in range(256)) / 256
        rows.append(("keep_rate", p, "a uniform drawn in bfloat16", ds.binomial_power(acceptance, n, kept)))
    # each of test_mask_bits_are_independent's two shapes at 0.3 of the claim's budget, a quarter of it per test
    alpha = ci_alpha("drop_add_ln.independence", sizes.INDEPENDENCE_FRACTION) * 0.3 / 4
    for rows_, d in sizes.MASK_SHAPES:
        neighbours, column_pairs = rows_ * (d // 2), (rows_ // 2) * d
        for p in TESTED_PROBABILITIES:
            acceptance = ds.binomial_acceptance(neighbours, ds.agreement_rate(p), alpha)
            rows.append(("independence", p, "blocks of 2 (neighbours agree)",
                         ds.binomial_power(acceptance, neighbours, 1.0)))
            rows.append(("independence", p, "neighbour correlation 0.1 (reported)",
                         ds.binomial_power(acceptance, neighbours, ds.agreement_rate(p, 0.1))))
            acceptance = ds.binomial_acceptance(column_pairs, ds.agreement_rate(p), alpha / 2)
            rows.append(("independence", p, "one mask for every row (rows 2r, 2r+1 agree)",
                         ds.binomial_power(acceptance, column_pairs, 1.0)))
            rows.append(("independence", p, f"a mask repeating every k rows, k | {rows_ // 2} (rows r, r+"
                         f"{rows_ // 2} agree)", ds.binomial_power(acceptance, column_pairs, 1.0)))
    alpha = ci_alpha("drop_add_ln.seeds", sizes.SEED_FRACTION) / len(SEED_PAIRS)
    for rows_, d in sizes.SEED_SHAPES:
        for p in TESTED_PROBABILITIES:
            acceptance = ds.binomial_acceptance(rows_ * d, ds.agreement_rate(p), alpha)
            rows.append(("seeds", p, "seed ignored, or seed % 2 (s + 2)", ds.binomial_power(acceptance, rows_ * d,
                                                                                             1.0)))
    # drop_add_ln.layout_invariance: in each layout, the keep-rate test at alpha/6 and each independence test at
    # alpha/24 (check_layout_invariance), against a layout's mask with keep and drop swapped, blocks, shared rows
    alpha = ci_alpha("drop_add_ln.layout_invariance", LAYOUT_FRACTION) / len(LAYOUTS) / 2
    for rows_, d in sizes.MASK_SHAPES:
        for p in TESTED_PROBABILITIES:
            acceptance = ds.binomial_acceptance(rows_ * d, 1 - p, alpha)
            rows.append(("layout", p, "keep probability p in a layout", ds.binomial_power(acceptance, rows_ * d, p)))
            for pairs, alternative, share in ((rows_ * (d // 2), "blocks of 2 in a layout", 4),
                                              ((rows_ // 2) * d, "one mask for every row in a layout", 8)):
                acceptance = ds.binomial_acceptance(pairs, ds.agreement_rate(p), alpha / share)
                rows.append(("layout", p, alternative, ds.binomial_power(acceptance, pairs, 1.0)))
    return rows


def test_every_statistical_test_has_its_stated_power_at_its_ci_size():
    weak = [row for row in power_table() if "(reported)" not in row[2] and row[3] < 1 - 1e-6
            and row[:3] != ("layout", 0.5, "keep probability p in a layout")]  # p = 1/2: that is H0 itself
    assert not weak, weak


def test_neighbour_correlation_power_as_stated():
    """The weak alternative, stated: correlation 0.1 between neighbours (32 768 pairs, alpha ~ 1.5e-12) is detected
    with probability >= 0.9 for 0.1 <= p <= 0.9 (1 - 1e-6 for 0.3 <= p <= 0.7); at p = 0.05 only 0.09."""
    powers = {}
    for _, p, alternative, power in power_table():
        if alternative.startswith("neighbour correlation"):
            powers[p] = min(power, powers.get(p, 1.0))
    assert all(powers[p] >= 0.9 for p in (0.1, 0.9)) and all(powers[p] > 1 - 1e-6 for p in (0.3, 0.5, 0.7)), powers
    assert 0.05 < powers[0.05] < 0.2, powers


@pytest.mark.parametrize(("p", "offset"), [(0.125, 1.0), (0.25, 3.0), (0.5, -2.0), (0.75, 0.01)])
def test_variance_bias_with_a_residual_is_the_derivation_and_has_its_power(p, offset):
    """drop_add_ln.variance_bias's test (properties.checks.dropout_add.check_variance_bias): rows as it draws them
    (offset (1 + 0.3 z), residual x u with u uniform in [-1, 1]); the exact law's mean is Var(r + x) plus the
    derived bias in the branch's statistics, and the plan reaches power 1 - 1e-6 against every named alternative
    within 2^15 replicas (64 rows of 4096: one call); where it cannot within 2^16 (here p = 1/8: the residual's
    cross terms spread Var(h)), the test leaves the row out (assume), never passes it."""
    from proofs import fused_oracles

    rng = np.random.default_rng(int(8 * p))
    x = offset * (1 + 0.3 * rng.standard_normal(8))
    r = x * rng.uniform(-1, 1, 8)
    plan = ds.VarianceBiasPlan(x, p, ci_alpha("drop_add_ln.variance_bias", 0.25), residual=r)
    bias = float(fused_oracles.dropout_add_variance_bias(p, 8, x.var(), x.mean()))
    assert plan.null[0] == pytest.approx((r + x).var() + bias, rel=1e-12)
    if p == 0.125:
        assert not plan.feasible
        return
    assert plan.feasible and min(plan.power().values()) > 1 - 1e-6
    assert plan.replicas <= 2**15
