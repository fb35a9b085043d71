"""Mechanisms of a wrong running-statistics update (BatchNorm, claim bn.running_statistics), with fitted parameters.

A training call is meant to leave new = (1 - m) old + m b in each buffer (b the batch mean, and the unbiased variance
n/(n - 1) sigma^2). The bugs reported against real BatchNorms change what m and the variance's factor are, so both
are fitted from the evidence (proofs.mechanisms.fitting) rather than tried from a list:

    m* from the means:      new_mean = (1 - m*) old_mean + m* mean              (fitting.fit_momentum)
    f* from the variances:  new_var  = (1 - m*) old_var  + m* f* sigma^2        (per channel, then from_constraints)

and named by what they equal within their fitted ranges:

    keras_momentum           m* = 1 - m: Keras' convention, new = m old + (1 - m) batch
    updated_twice            m* = 1 - (1 - m)^2 = m (2 - m): two updates in one call
    not_updated              m* = 0: the buffers left as they were
    momentum_ignored         another m*, the momentum applied is not the one given
    biased_running_variance  f* = 1: the population variance kept, not n/(n - 1) times it
    unbiased_factor_wrong    another f*

Conditions: m* is identifiable only where some channel's batch mean differs from its running mean by more than the
update's rounding; f* only where m* sigma^2 does against the variance's bound, and 1 and n/(n - 1) are told apart only
where n is small enough that n/(n - 1) - 1 = 1/(n - 1) exceeds f*'s fitted range.

>>> old, mean = np.array([0.0, 1.0]), np.array([2.0, -1.0])
>>> [m.mechanism for m in momentum_mechanisms(fitting.fit_momentum(old, 0.1 * old + 0.9 * mean, mean), 0.1)]
['keras_momentum']
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from proofs.mechanisms import fitting
from proofs.mechanisms.base import Fit


@dataclass(frozen=True)
class Named:
    """A mechanism that explains a running update: its id and the sentence naming its fitted value."""

    mechanism: str
    text: str


def _within(fit: Fit, value: float) -> bool:
    return fit.value is not None and fit.low <= value <= fit.high


def momentum_mechanisms(fit: Fit, momentum: float) -> list[Named]:
    """What the fitted momentum ``fit`` says about a kernel given ``momentum`` (empty: m* = m, or not identified)."""
    if fit.value is None or _within(fit, momentum):
        return []
    m = float(momentum)
    if momentum != 0.5 and _within(fit, 1.0 - m):
        return [Named("keras_momentum", f"Keras' momentum convention, new = m old + (1 - m) batch ({fit.detail}; "
                                        f"declare momentum_convention='keras' if it is the kernel's)")]
    if _within(fit, m * (2.0 - m)):
        return [Named("updated_twice", f"the running statistics updated twice per call ({fit.detail} = "
                                       f"1 - (1 - {m:g})^2)")]
    if _within(fit, 0.0):
        return [Named("not_updated", f"the running statistics left as they were ({fit.detail})")]
    return [Named("momentum_ignored", f"another momentum than the {m:g} given ({fit.detail})")]


def fit_variance_factor(old_var: np.ndarray, new_var: np.ndarray, variance: np.ndarray, momentum: float,
                        bound: np.ndarray) -> Fit:
    """f* per channel from new_var = (1 - m) old_var + m f* sigma^2 (``variance``: the batch's population variance
    sigma^2, m the momentum the means show), each within +- bound / (m sigma^2); from_constraints over the channels
    where that interval is narrower than 1, f* in [0, 2]."""
    old_var, new_var, variance = (np.asarray(a, dtype=np.float64).ravel() for a in (old_var, new_var, variance))
    scale = momentum * variance
    with np.errstate(divide="ignore", invalid="ignore"):
        estimate = (new_var - (1.0 - momentum) * old_var) / scale
        resolution = np.broadcast_to(np.asarray(bound, dtype=np.float64).ravel(), old_var.shape) / np.abs(scale)
    resolved = np.isfinite(estimate) & (resolution < 0.5)
    return fitting.from_constraints(estimate[resolved], (estimate - resolution)[resolved],
                                    (estimate + resolution)[resolved], argument=None, domain=(0.0, 2.0),
                                    describe=lambda v, lo, hi: f"variance factor ≈ {v:.5g} (fitted: {lo:.5g} to "
                                                               f"{hi:.5g})",
                                    unresolved="the batch variance is negligible against the update's rounding")


def variance_mechanisms(fit: Fit, count: int, declared_unbiased: bool) -> list[Named]:
    """What the fitted variance factor says, for ``count`` elements per channel (empty: the declared factor fits)."""
    unbiased = count / (count - 1) if count > 1 else float("inf")
    declared = unbiased if declared_unbiased else 1.0
    if fit.value is None or _within(fit, declared):
        return []
    if declared_unbiased and _within(fit, 1.0):
        return [Named("biased_running_variance", f"the population variance kept, not n/(n - 1) = {unbiased:.5g} "
                                                 f"times it ({fit.detail}; declare running_variance='biased' if it "
                                                 f"is the kernel's)")]
    if not declared_unbiased and _within(fit, unbiased):
        return [Named("unbiased_running_variance", f"n/(n - 1) = {unbiased:.5g} times the population variance "
                                                   f"kept ({fit.detail})")]
    return [Named("variance_factor_wrong", f"the variance scaled by another factor than {declared:.5g} "
                                           f"({fit.detail})")]
