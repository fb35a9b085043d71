"""What a person reads after a run: the skips and the dtypes not tested grouped by reason, one line each with the
claims and kernels it covers and a count, and the claims counted as checked, skipped for a stated reason, failed.

A reason is the same reason whatever kernel, claim or measured figure it names: the grouping key is its text with the
kernel's name taken out and every number replaced by ``#`` (``8 rows took 0.03 s, ..., 65537 rows would take ~311 s``
and ``... ~148 s`` are one reason); the line shows the first such text as its example. The JSON and the report keep
every line, and ``normverify run -v`` prints them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from core.results import NOT_PASSING, Document, Result

_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[+-]?\d+)?")


@dataclass
class Group:
    """One reason: its example text, and the claims, kernels and items (tests or dtypes) it covers."""

    reason: str
    claims: list[str] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)
    count: int = 0

    def add(self, claim: str | None, kernel: str) -> None:
        self.count += 1
        if claim is not None and claim not in self.claims:
            self.claims.append(claim)
        if kernel not in self.kernels:
            self.kernels.append(kernel)

    def line(self) -> str:
        """``(3) REASON [claims a, b; kernels x, y]``."""
        covers = [f"claims {', '.join(self.claims)}"] if self.claims else []
        covers.append(f"{'kernels' if len(self.kernels) > 1 else 'kernel'} {', '.join(self.kernels)}")
        return f"({self.count}) {self.reason} [{'; '.join(covers)}]"


def general(reason: str, kernel: str) -> str:
    """The reason's text with the kernel's own name taken out (``triton:layernorm does not compute in bfloat16`` ->
    ``does not compute in bfloat16``)."""
    text = reason.replace(f"kernel {kernel} ", "kernel ").replace(f"{kernel}: ", "").replace(f"{kernel} ", "")
    return text.strip() or reason


def _grouped(items: list[tuple[str | None, str, str]]) -> list[Group]:
    groups: dict[str, Group] = {}
    for claim, kernel, reason in items:
        text = general(reason, kernel)
        groups.setdefault(_NUMBER.sub("#", text), Group(text)).add(claim, kernel)
    return list(groups.values())


def reason(result: Result) -> str:
    """A skipped test's reason: the first line of its message."""
    return (result.message or "no reason given").strip().splitlines()[0]


def skipped(document: Document) -> list[Group]:
    """The skipped tests by reason (a skip is never a pass: each reason is shown)."""
    return _grouped([(r.claim, r.kernel, reason(r)) for r in document.results if r.status == "skipped"])


def untested(document: Document) -> list[Group]:
    """The dtypes and dtype mixes the kernels were not checked in, by reason (``in float16: reason``)."""
    items = []
    for kernel in document.kernels:
        not_tested = kernel.capabilities.not_tested if kernel.capabilities is not None else {}
        items += [(None, kernel.name, f"in {dtype}: {why}") for dtype, why in not_tested.items()]
    return _grouped(items)


def claim_totals(document: Document) -> dict[str, int]:
    """Claim x kernel pairs: "checked" (at least one test ran its examples and none failed), "skipped" (every test
    skipped, each for a stated reason), "failed" (any failing, erroring or unchecked test)."""
    pairs: dict[tuple[str, str], set[str]] = {}
    for result in document.results:
        pairs.setdefault((result.claim, result.kernel), set()).add(result.status)
    totals = {"checked": 0, "skipped": 0, "failed": 0}
    for statuses in pairs.values():
        totals["failed" if statuses & NOT_PASSING else "skipped" if statuses == {"skipped"} else "checked"] += 1
    return totals
