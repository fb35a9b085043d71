"""The vocabulary of results documents, torch-free: test statuses (worst first) and a claim x kernel summary.

Read by the results plugin (:mod:`properties.results`), the runner and the reports alike, so the
report never imports the plugin (or torch, or pytest) to understand a results file.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# Worst first: a test (and a claim x kernel cell) shows the first of these among its parts. "unchecked": the test
# ran but none of its examples could be checked (no finite bound, or none drawn): never a pass.
STATUSES = ("error", "failed", "xpassed", "unchecked", "xfailed", "passed", "skipped")
FAILING = frozenset({"error", "failed"})
# Statuses that make `normverify run` exit 1: a failure, or a claim the run could not check.
NOT_PASSING = FAILING | {"unchecked"}


def worst(statuses: Iterable[str | None]) -> str:
    """The first of :data:`STATUSES` among ``statuses`` ("error" when there is none of them)."""
    present = set(statuses)
    return next((s for s in STATUSES if s in present), "error")


@dataclass
class SummaryRow:
    """One claim x kernel: the worst status of its tests, and their evidence together."""

    claim: str
    kernel: str
    results: list[dict]

    @property
    def status(self) -> str:
        return worst(r.get("status") for r in self.results)

    @property
    def examples(self) -> int:
        return sum(int(r.get("examples") or 0) for r in self.results)

    @property
    def unchecked(self) -> int:
        """Examples without a finite bound: counted, never evidence."""
        return sum(int(r.get("unchecked") or 0) for r in self.results)

    @property
    def worst_ratio(self) -> float | None:
        ratios = [r["worst_ratio"] for r in self.results if r.get("worst_ratio") is not None]
        return max(ratios) if ratios else None

    @property
    def seconds(self) -> float:
        return sum(float(r.get("duration_s") or 0.0) for r in self.results)
