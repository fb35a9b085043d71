"""Fitting rules for the free parameters of mechanisms (:class:`proofs.mechanisms.base.Parameter`, issue 28).

A kernel that hard-codes its own constant (an eps, a momentum) follows a one-parameter family of models; which
member is a question the evidence answers, not a list of guesses. Two rules:

``from_constraints``: a closed form. Each element j of the evidence pins the parameter to an interval
[low_j, high_j] (its output within the bound B_j of the model's value; one-sided where B_j is too wide) around its
own estimate t_j. The
value is the median of the estimates of the best-resolved elements (interval no wider than BEST_RESOLVED times
the narrowest: a median is not moved by a few outliers, and ill-resolved elements do not outvote well-resolved
ones); the values the evidence allows are the intersection [max low_j, min high_j] (the model holds on every
element, so its parameter lies in every element's interval).

``by_search``: no closed form (eps from the gradients). The value minimizes the worst ratio |got - center(t)| /
bound over a grid, refined between the grid's neighbours; the values allowed run to where the worst ratio
reaches 1 (bisected).

Either way the parameter is **identifiable** from the evidence only when some element resolves it (a finite
interval) and the allowed range excludes the value a correct kernel would use (``argument``). A range that includes
it rules the mechanism out where it resolves the argument (narrower than it, away from the floor: the kernel
honours the argument), and otherwise says "not identifiable from this evidence" (with why) instead of a value: a
correct kernel explains the evidence as well. Values below the parameter's domain (``domain``: eps in [0, 1],
momentum in [0, 1]) rule the mechanism out (as do values above its ceiling: a fitted "eps" of 1e35 is the rows'
scale moving, not a constant); a range reaching the floor reports the floor ("eps ≈ 0 ..., at most ..."). The
fitted value is never its own evidence: the diagnosis checks the model at it on every output and on the probes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from proofs.mechanisms.base import Fit

BEST_RESOLVED = 4.0  # the median is over the elements whose interval is at most this times the narrowest
FLOAT32_UPDATE_ROUNDINGS = 3  # (1 - m) old + m batch in float32: two products and a sum, each rounded once
U_FLOAT32 = 2.0**-24

Describe = Callable[[float, float, float], str]  # (value, low, high) -> the estimate in words
Domain = tuple[float, float]  # (floor, ceiling): the values a mechanism's parameter admits
MOMENTUM_DOMAIN = (0.0, 1.0)


def from_constraints(estimate: np.ndarray, low: np.ndarray, high: np.ndarray, *, argument: float | None,
                     domain: Domain, describe: Describe, unresolved: str) -> Fit:
    """The fit from the elements' constraints: 1-D arrays over the elements that constrain the parameter, low_j
    finite, high_j inf where the element bounds it from one side only, estimate_j NaN where its interval is not
    finite (it gives none).

    ``argument``: the value a correct kernel uses (None: none); ``domain``: (floor, ceiling), the values the
    mechanism admits; ``describe(value, low, high)``: the estimate in words; ``unresolved``: why no element
    constrains it, where none does."""
    if low.size == 0:
        return Fit(None, detail=f"not identifiable from this evidence: {unresolved}", identifiable=False)
    width = high - low
    resolved = np.isfinite(estimate) & np.isfinite(width)
    allowed_low, allowed_high = float(np.max(low)), float(np.min(high))
    if resolved.any():
        best = resolved & (width <= BEST_RESOLVED * np.min(width[resolved]))
        value = float(np.median(estimate[best]))
    else:  # one-sided or wide constraints only: the middle of what they allow
        value = allowed_low if np.isinf(allowed_high) else (allowed_low + allowed_high) / 2
    if allowed_low > allowed_high:  # no single value meets every element: the model does not hold (kept: checked)
        allowed_low = allowed_high = value
    return _within_domain(value, allowed_low, allowed_high, argument, domain, describe)


def by_search(worst_ratio: Callable[[float], float], grid: np.ndarray, *, argument: float | None, domain: Domain,
              describe: Describe, unresolved: str) -> Fit:
    """The fit minimizing ``worst_ratio`` over the increasing ``grid`` (values within ``domain``), refined by bounded
    Brent between the best grid value's neighbours; the allowed range's ends bisected (EDGE_STEPS halvings) between the
    value and the nearest grid values that do not fit. None (ruled out) where no value brings the ratio to 1."""
    ratios = np.array([worst_ratio(float(t)) for t in grid])
    if not np.isfinite(ratios).any():
        return Fit(None, detail=f"not identifiable from this evidence: {unresolved}", identifiable=False)
    best = int(np.nanargmin(ratios))
    value, ratio = float(grid[best]), float(ratios[best])
    lo, hi = float(grid[max(best - 1, 0)]), float(grid[min(best + 1, len(grid) - 1)])
    if hi > lo:
        from scipy.optimize import minimize_scalar  # here: scipy.optimize is 0.3 s of every process's start-up

        refined = minimize_scalar(worst_ratio, bounds=(lo, hi), method="bounded", options={"xatol": 1e-6 * hi})
        if refined.fun < ratio:
            value, ratio = float(refined.x), float(refined.fun)
    if ratio > 1.0:
        return Fit(None, detail="no value fits every element")
    failing = ~(ratios <= 1.0)
    below, above = grid[(grid < value) & failing], grid[(grid > value) & failing]
    low = _edge(worst_ratio, value, float(below.max())) if below.size else float(grid[0])
    high = _edge(worst_ratio, value, float(above.min())) if above.size else float(grid[-1])
    return _within_domain(value, low, high, argument, domain, describe)


EDGE_STEPS = 40


def _edge(worst_ratio: Callable[[float], float], inside: float, outside: float) -> float:
    """The last value from ``inside`` (fits) towards ``outside`` (does not) that still fits, by bisection
    (geometric where both are positive)."""
    for _ in range(EDGE_STEPS):
        middle = np.sqrt(inside * outside) if inside > 0 and outside > 0 else (inside + outside) / 2
        if worst_ratio(float(middle)) <= 1.0:
            inside = float(middle)
        else:
            outside = float(middle)
    return inside


def _within_domain(value: float, low: float, high: float, argument: float | None, domain: Domain,
                   describe: Describe) -> Fit:
    floor, ceiling = domain
    if high < floor or low > ceiling:
        return Fit(None, low, high, f"only values outside [{floor:g}, {ceiling:g}] fit ({low:.3g} to {high:.3g})")
    if argument is not None and low <= argument <= high:
        if low > floor and high - low <= abs(argument):  # resolved, and it is the argument: the kernel honours it
            return Fit(None, low, high, f"the argument {argument:g} fits ({low:.3g} to {high:.3g})")
        return Fit(None, low, high, f"not identifiable from this evidence: every value from {low:.3g} to {high:.3g}, "
                                    f"the argument {argument:g} included, fits", identifiable=False)
    if low <= floor:
        value, low = floor, floor
    value = min(max(value, low), high, ceiling)
    return Fit(value, low, high, describe(value, low, high))


def fit_momentum(old: np.ndarray, new: np.ndarray, batch_mean: np.ndarray, bound: np.ndarray | None = None,
                 declared: float | None = None) -> Fit:
    """The momentum m* a running-mean update actually applied: new = (1 - m*) old + m* batch_mean, per channel.

    Each channel gives m* = (new - old) / (batch_mean - old), within +-B / |batch_mean - old| for an update within
    B of the model's (``bound``; default the float32 update's roundings, FLOAT32_UPDATE_ROUNDINGS u (|old| +
    |batch_mean|)). Identifiable from a channel only where |batch_mean - old| is not negligible against B (the
    channel's interval narrower than the whole domain [0, 1]); with the statistics equal to the running values
    nothing moves and any momentum fits: "not identifiable from this evidence". ``declared``: the momentum the
    kernel was given (a fit that allows it does not tell an inverted or wrong momentum apart). Torch's
    ``new = (1 - m) old + m batch`` fitted on a Keras-style kernel (``m old + (1 - m) batch``) gives m* = 1 - m.
    """
    old, new, batch_mean = (np.asarray(a, dtype=np.float64).ravel() for a in (old, new, batch_mean))
    if bound is None:
        bound = FLOAT32_UPDATE_ROUNDINGS * U_FLOAT32 * (np.abs(old) + np.abs(batch_mean))
    bound = np.broadcast_to(np.asarray(bound, dtype=np.float64).ravel(), old.shape)
    step = batch_mean - old
    with np.errstate(divide="ignore", invalid="ignore"):
        estimate = (new - old) / step
        resolution = bound / np.abs(step)
    resolved = np.isfinite(estimate) & (resolution < 0.5)
    return from_constraints(estimate[resolved], (estimate - resolution)[resolved], (estimate + resolution)[resolved],
                            argument=declared, domain=MOMENTUM_DOMAIN, describe=_momentum_words,
                            unresolved="the batch statistics equal the running ones within the update's rounding")


def _momentum_words(value: float, low: float, high: float) -> str:
    return f"momentum ≈ {value:.4g} applied (fitted: {low:.4g} to {high:.4g})"
