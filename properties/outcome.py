"""Judging one example: error against bound, the evidence it leaves, and what a failure says.

:func:`compare` measures a kernel's values against the float64 reference under per-element
bounds (from :mod:`properties.bounds.tolerance`): the worst ratio |error| / bound and expected vs got at
the worst element. :func:`conclude` records the example for the results
(``properties.evidence.record``), steers Hypothesis towards large ratios with ``target()``, and
raises :class:`CheckFailure` (an AssertionError carrying expected, got and where) when the ratio exceeds 1.
Both also work outside Hypothesis (the replay of a saved counterexample calls the same check functions).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from hypothesis import note, target
from hypothesis.errors import InvalidArgument

from core import boundary
from core.results import Finding
from properties import evidence


def _values(t: torch.Tensor | np.ndarray | float) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        return boundary.to_oracle(t)
    return np.asarray(t, dtype=np.float64)


def ratios(got, expected, bound) -> np.ndarray:
    """|got - expected| / bound elementwise; inf where got is not finite but expected is, or bound is 0 < error."""
    got, expected, bound = _values(got), _values(expected), _values(bound)
    error = np.abs(got - expected)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = error / bound
    same = (got == expected) | (np.isnan(got) & np.isnan(expected))
    return np.where(same, 0.0, np.where(np.isnan(ratio), np.inf, ratio))


@dataclass(frozen=True)
class Comparison:
    """One compared quantity: its worst |error| / bound, what to say if that exceeds 1, and expected vs got at the
    worst element (``where``: the quantity and the index)."""

    ratio: float
    message: str
    unchecked: int = 0  # elements whose bound is not finite (inf; NaN where a defined value is expected)
    expected: float | None = None
    got: float | None = None
    where: str | None = None


class CheckFailure(AssertionError):
    """A violated claim, as data: the message, and expected vs got at ``where`` (None for a check without a value
    to compare). The results and ``normverify replay`` read these attributes, never the message."""

    def __init__(self, message: str, expected: float | None = None, got: float | None = None,
                 where: str | None = None) -> None:
        super().__init__(message)
        self.expected, self.got, self.where = expected, got, where


def unbounded(expected, bound) -> int:
    """How many elements have no finite bound: inf, or NaN where the expected value is defined (not NaN)."""
    expected, bound = np.broadcast_arrays(_values(expected), _values(bound))
    return int(np.sum(np.isinf(bound) | (np.isnan(bound) & ~np.isnan(expected))))


def compare(got, expected, bound, what: str) -> Comparison:
    """The worst |got - expected| / bound, with expected vs got at the worst element, and how many elements had
    no finite bound (unchecked: their ratio error/inf = 0 proves nothing)."""
    shape = np.broadcast_shapes(np.shape(_values(got)), np.shape(_values(expected)), np.shape(_values(bound)))
    ratio = np.broadcast_to(ratios(got, expected, bound), shape)
    missing = unbounded(np.broadcast_to(_values(expected), shape), np.broadcast_to(_values(bound), shape))
    if ratio.size == 0:
        return Comparison(0.0, f"{what}: empty")
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)

    def pick(a) -> float:
        return float(np.broadcast_to(_values(a), shape)[worst])

    value = float(ratio[worst])
    where = f"{what}: at index {tuple(int(i) for i in worst)}"
    return Comparison(value, f"{where} expected {pick(expected):.9g}, got {pick(got):.9g}; "
                             f"|error| = {abs(pick(got) - pick(expected)):.3g}, "
                             f"bound {pick(bound):.3g} (error/bound = {value:.3g})", missing,
                      pick(expected), pick(got), where)


def explain(text: str) -> None:
    """``note()`` inside Hypothesis (printed with a failing example); nothing on replay."""
    with contextlib.suppress(InvalidArgument):
        note(text)


def conclude(comparisons: Comparison | list[Comparison], meaning: str = "", label: str = "error/bound",
             diagnose: Callable[[float], tuple[list[dict], str] | None] | None = None, **point) -> float:
    """Record the example (worst ratio, its count of unbounded elements, plot data), ``target()`` the ratio, and
    fail when it exceeds 1.

    ``meaning`` says what a failure means (noted for Hypothesis and put in the AssertionError).
    ``diagnose(ratio)``, called on a failure, returns (the diagnosis as JSON, its one-line sentence) or None
    (properties.bounds.diagnosis): the sentence leads the AssertionError, the diagnosis goes into the evidence.
    """
    comparisons = [comparisons] if isinstance(comparisons, Comparison) else comparisons
    worst = max(comparisons, key=lambda c: c.ratio)
    found = diagnose(worst.ratio) if diagnose is not None and worst.ratio > 1.0 else None
    evidence.record(ratio=worst.ratio, unchecked=sum(c.unchecked for c in comparisons), **point,
                    **({"diagnosis": found[0]} if found else {}))
    with contextlib.suppress(InvalidArgument):
        target(float(min(worst.ratio, 1e300)), label=label)
    if worst.ratio > 1.0:
        if meaning:
            explain(meaning)
        raise CheckFailure((f"{found[1]}\n" if found else "") + worst.message + (f" -- {meaning}" if meaning else ""),
                           worst.expected, worst.got, worst.where)
    return worst.ratio


def exact(condition: bool, message: str, meaning: str = "", **point) -> None:
    """An exact (bit-for-bit) contract: record the example without a ratio, fail with ``message`` when violated."""
    evidence.record(ratio=None, **point)
    if not condition:
        if meaning:
            explain(meaning)
        raise CheckFailure(message + (f" -- {meaning}" if meaning else ""))


def measured(prop: str, declared: bool | None, forward: bool | None, backward: bool | None, found: list[str],
             meaning: str = "", **point) -> None:
    """A bitwise property a kernel may declare (core.kernel.BITWISE_DECLARATIONS), measured on one example: record
    it as a finding (core.results.Finding: whether it held in the forward and the backward, None where not compared;
    ``found``, the differences, else what was compared), and fail with the first difference only where the kernel
    declares the property (``declared`` True). Undeclared or declared False, the verdict is reported, never a
    failure."""
    finding = Finding(property=prop, declared=declared, forward=forward, backward=backward, evidence=found)
    evidence.record(ratio=None, finding=finding.model_dump(mode="json"), **point)
    if declared and finding.holds is False:
        if meaning:
            explain(meaning)
        raise CheckFailure(f"declared {prop}, but {found[0]}" + (f" -- {meaning}" if meaning else ""))
