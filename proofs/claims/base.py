"""The Claim record: a statement, its exact conditions, a verdict against the seed, and its derivation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from proofs.derivation import Derivation

VERDICTS = ("holds", "holds only when", "fails", "contract")
PROPERTY, THEORY = "property", "theory"
EVIDENCE = (PROPERTY, THEORY)  # what checks a claim: a conformance test, or its derivation alone (none yet)


@dataclass(frozen=True)
class Claim:
    id: str
    title: str
    seed: str  # the seed file it comes from, e.g. "000"; "" for contracts the project adds
    seed_statement: str  # the seed's wording, translated (plain text)
    statement: str  # LaTeX (text mode, math in $...$)
    conditions: tuple[str, ...]  # LaTeX
    verdict: str
    verdict_note: str  # LaTeX: what exactly holds, and the witness where the seed is wrong
    builder: Callable[[], Derivation] = field(repr=False, compare=False)
    # A derived property whose check is bounded by the forward bounds of its own inputs, where no input regime of its
    # own exists beyond the forward claim's draws: its evidence is a view of that claim's (issue 11, point 6). The id
    # of that claim, and why (plain text); results and reports show it next to the claim's verdict.
    view_of: str | None = None
    view_reason: str = ""
    # THEORY: no conformance test checks a kernel against the claim yet (docs/ARCHITECTURE.md's "kind of claim:
    # theory"); a run or a report never counts it as checked, and tests/ refuse a property naming it.
    evidence: str = PROPERTY

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"claim {self.id}: verdict {self.verdict!r} is not one of {VERDICTS}")
        if self.evidence not in EVIDENCE:
            raise ValueError(f"claim {self.id}: evidence {self.evidence!r} is not one of {EVIDENCE}")
        if (self.view_of is None) != (not self.view_reason):
            raise ValueError(f"claim {self.id}: view_of and view_reason go together (the claim viewed, and why)")

    def derive(self) -> Derivation:
        """The derivation, built afresh (each step is verified by :meth:`Derivation.check`)."""
        return self.builder()


def no_derivation() -> Derivation:
    """The derivation of a contract claim: nothing to derive, the property checks it."""
    return Derivation((), notes=("A contract of the implementation: checked by the property, nothing to derive.",))
