"""Inverted dropout: dropout.values, dropout.keep_rate, dropout.variance_bias, dropout.determinism,
dropout.inputs_unmodified.

The statistical claims treat the kernel's mask as i.i.d. Bernoulli(1 - p) over the elements of one call,
which is the contract. Their tests are Hoeffding bounds, stated, not tuned:
    a mean of N independent values in [lo, hi] leaves its expectation by t (hi - lo) or more with
    probability at most 2 exp(-2 N t^2).
Each example uses FALSE_ALARM_PER_EXAMPLE = 1e-10, so a run, with at most 1 000 examples of each of the
two statistical tests per kernel (thorough: 400), raises a false alarm for a correct kernel with
probability at most 2e-7 <= 1e-6 (union bound). The seeds come from the example, so the ci profile
(derandomized) runs the same masks every time: its verdict is deterministic.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from core import guard
from core.capabilities import dtype_name
from proofs import oracles
from properties import norms, outcome, tolerance

FALSE_ALARM_PER_EXAMPLE = 1e-10


VARIANCE_REPLICAS = 1024


def hoeffding_deviation(samples: int, false_alarm: float = FALSE_ALARM_PER_EXAMPLE) -> float:
    """t with P(|mean - E| >= t (hi - lo)) <= false_alarm for ``samples`` independent values in [lo, hi]."""
    return math.sqrt(math.log(2.0 / false_alarm) / (2.0 * samples))


def _dropout(kernel, x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
    return guard.call(kernel, x, p, seed, like=x)


def check_values(kernel, x: torch.Tensor, p: float, seed: int) -> None:
    """Every output is exactly 0 or x/(1-p) within the rounding of the scaling (tolerance.dropout_scaling)."""
    y = norms.as_float64(_dropout(kernel, x, p, seed))
    scaled = norms.as_float64(x) / (1.0 - p)
    kept = y != 0
    comparison = outcome.compare(np.where(kept, y, scaled), scaled, tolerance.dropout_scaling(x, p),
                                 "a kept value vs x/(1-p)")
    outcome.conclude(comparison, "dropout must zero an element or scale it by exactly 1/(1-p)",
                     p=p, d=x.shape[-1], dtype=dtype_name(x.dtype))


def check_keep_rate(kernel, x: torch.Tensor, p: float, seed: int) -> None:
    """The kept fraction is 1-p within the Hoeffding deviation for FALSE_ALARM_PER_EXAMPLE (x has no zeros)."""
    y = _dropout(kernel, x, p, seed)
    kept = float((y != 0).double().mean())
    deviation = hoeffding_deviation(y.numel())
    outcome.conclude(outcome.compare(kept, 1.0 - p, deviation, f"kept fraction of {y.numel()} elements"),
                     f"the keep rate is not 1 - p (false-alarm probability of this check: {FALSE_ALARM_PER_EXAMPLE:g})",
                     p=p, d=x.shape[-1], measured=kept, predicted=1.0 - p)


def check_variance_bias(kernel, x: torch.Tensor, p: float, seed: int) -> None:
    """Mean over VARIANCE_REPLICAS masks of Var(dropout(x)) = Var(x) + p(d-1)/(d(1-p)) (Var(x) + mean(x)^2).

    Each replica's population variance lies in [0, M], M = mean(x^2)/(1-p)^2 (a kept value is x/(1-p)),
    so Hoeffding gives the deviation M t; the rounding of the kept values adds at most 2 Zmax D + D^2,
    Zmax = max|x|/(1-p) and D twice the largest scaling bound.
    """
    row = x[:1]
    d = row.shape[-1]
    replicas = row.expand(VARIANCE_REPLICAS, d).contiguous()
    z = norms.as_float64(_dropout(kernel, replicas, p, seed))
    x64 = norms.as_float64(row)[0]
    measured = float(z.var(axis=-1).mean())
    predicted = float(x64.var() + oracles.dropout_variance_bias(p, d, x64.var(), x64.mean()))
    largest = float(np.mean(x64**2)) / (1.0 - p) ** 2
    rounding = 2 * float(tolerance.dropout_scaling(row, p).max())
    slack = largest * hoeffding_deviation(VARIANCE_REPLICAS) + 2 * float(np.abs(x64).max()) / (1 - p) * rounding
    slack += rounding**2
    outcome.conclude(outcome.compare(measured, predicted, slack, f"mean of Var(z) over {VARIANCE_REPLICAS} masks"),
                     "the variance after dropout is not Var(x) + p(d-1)/(d(1-p)) (Var(x) + mean^2): the mask is not "
                     f"i.i.d. Bernoulli(1-p) or not rescaled (false-alarm probability {FALSE_ALARM_PER_EXAMPLE:g})",
                     p=p, d=d, measured=measured, predicted=predicted, var=float(x64.var()), mean=float(x64.mean()))


def check_determinism(kernel, x: torch.Tensor, p: float, seed: int) -> None:
    """The same seed gives the same output, bit for bit."""
    first, second = _dropout(kernel, x, p, seed), _dropout(kernel, x, p, seed)
    outcome.exact(torch.equal(first, second),
                  f"two calls with seed {seed} differ in {int((first != second).sum())} of {x.numel()} elements",
                  "dropout must be a function of (x, p, seed)", p=p, d=x.shape[-1])


def check_inputs_unmodified(kernel, x: torch.Tensor, p: float, seed: int) -> None:
    """x is not written by the call."""
    before = x.clone()
    _dropout(kernel, x, p, seed)
    outcome.exact(torch.equal(before, x), f"x changed in {int((before != x).sum())} elements",
                  "the kernel wrote into its input", d=x.shape[-1])
