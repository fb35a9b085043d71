"""Margins: the suite's own checks on inputs where a bug of the corpus shows. First ln.forward
(properties.checks.forward.check_forward, its error model and bounds) for each numerical bug: the bug must fail
by a wide margin (worst error/bound ratio above corpus.WIDE_MARGIN); the correct kernels, on the same inputs,
must pass (ratio < 1).

How much room a correct kernel has depends on what dominates the bound. Where the accumulation term does
(float32, |mean|/std = 1e4, or eps comparable to sigma^2) the correct kernels use 1-20% of it (measured:
0.009 and 0.19). Where the final rounding to float16 does, a correctly rounded output uses up to u |y| of a
bound of about u |y| + (accumulation term): 0.5-0.9 (measured 0.91 here), the same for every correct kernel
(they all round the same float32 value), and never above 1, by the definition of rounding to nearest.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch
from corpus import BROKEN, WIDE_MARGIN

from core.registry import Kernel, resolve
from properties import evidence
from properties.checks.dropout import check_variance_bias
from properties.checks.forward import check_forward

ROOT = Path(__file__).resolve().parents[1]
CORRECT_MAX_RATIO = 1.0


def kernel(spec: str) -> Kernel:
    (found,) = resolve(str(ROOT / spec))
    return found


def recorded_ratio(check, k: Kernel, example: dict) -> float:
    """The worst error/bound ratio ``check`` records for the example (it may also fail: that is the point)."""
    evidence.start()
    with contextlib.suppress(AssertionError):
        check(k, **example)
    ratios = [e["ratio"] for e in evidence.take()]
    assert ratios and ratios[0] is not None, f"{check.__name__} recorded no ratio"
    return max(ratios)


def forward_ratio(k: Kernel, example: dict) -> float:
    return recorded_ratio(check_forward, k, example)


def example(n: int, d: int, mean: float, std: float, dtype: torch.dtype, eps: float, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)
    x = mean + std * torch.randn(n, d, generator=generator, dtype=torch.float64)
    weight = 1.0 + 0.5 * torch.randn(d, generator=generator, dtype=torch.float64)
    bias = torch.randn(d, generator=generator, dtype=torch.float64)
    return {"x": x.to(dtype), "weight": weight.to(dtype), "bias": bias.to(dtype), "eps": eps}


# Where each numerical bug shows (within the error model's range: |mean|/std <= 0.05 / ((d + 1) u_acc)).
SHOWING = {
    "tests/corpus/statistics.py:LN_ONE_PASS_VARIANCE": example(4, 64, mean=1e4, std=1.0, dtype=torch.float32,
                                                               eps=1e-5),
    "tests/corpus/statistics.py:LN_STORAGE_DTYPE_ACCUMULATION": example(4, 64, mean=30.0, std=1.0,
                                                                        dtype=torch.float16, eps=1e-5),
    "tests/corpus/statistics.py:LN_EPS_OUTSIDE_ROOT": example(4, 64, mean=0.0, std=1e-2, dtype=torch.float32,
                                                              eps=1e-2),
}
CORRECT_LAYERNORMS = ["tests/corpus/statistics.py:LN_TEXTBOOK", "tests/corpus/fused.py:LN_FUSED",
                      "tests/corpus/correct.py:LN_TWO_PASS_FLOAT64", "tests/corpus/correct.py:LN_WELFORD"]


def test_every_numerical_bug_of_the_manifest_has_an_input_here():
    assert {entry.spec for entry in BROKEN if entry.margin == "ln.forward"} == set(SHOWING)


@pytest.mark.parametrize("spec", SHOWING, ids=lambda spec: spec.split(":")[-1])
def test_numerical_bug_fails_ln_forward_by_a_wide_margin(spec):
    ratio = forward_ratio(kernel(spec), SHOWING[spec])
    assert ratio > WIDE_MARGIN, f"error/bound {ratio:.3g}"


@pytest.mark.parametrize("spec", SHOWING, ids=lambda spec: spec.split(":")[-1])
@pytest.mark.parametrize("correct", CORRECT_LAYERNORMS, ids=lambda spec: spec.split(":")[-1])
def test_correct_kernels_pass_where_the_bugs_show(spec, correct):
    ratio = forward_ratio(kernel(correct), SHOWING[spec])
    assert ratio < CORRECT_MAX_RATIO, f"error/bound {ratio:.3g}"


def test_variance_bias_check_catches_the_per_row_mask_only_when_the_mean_is_large():
    """dropout_mask_per_row changes E[Var(z)] by p/(1-p) (v/d - (d-1)/d mu^2) against i.i.d. masks: nothing at
    mu = 0 (any mask with the right marginals only moves it by O(v/d) there). The suite's check tells the two
    apart at |mean|/std = 3 (by a factor ~2, its Hoeffding slack is loose), not at mean 0, where the ci strategy
    draws its rows: that is why the corpus run does not catch this kernel on dropout.variance_bias."""
    generator = torch.Generator().manual_seed(0)
    noise = torch.randn(1, 64, generator=generator)
    per_row, bernoulli = (kernel(f"tests/corpus/dropout.py:{attr}") for attr in ("DROPOUT_MASK_PER_ROW",
                                                                                 "DROPOUT_BERNOULLI"))
    offset = {"x": 3.0 + noise, "p": 0.5, "seed": 1}
    assert recorded_ratio(check_variance_bias, per_row, offset) > 1.5
    assert recorded_ratio(check_variance_bias, bernoulli, offset) < 0.5
    assert recorded_ratio(check_variance_bias, per_row, {"x": noise, "p": 0.5, "seed": 1}) < 1
