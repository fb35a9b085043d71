"""The Claim record: a statement, its exact conditions, a verdict against the seed, and its derivation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from proofs.derivation import Derivation

VERDICTS = ("holds", "holds only when", "fails", "contract")


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

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"claim {self.id}: verdict {self.verdict!r} is not one of {VERDICTS}")

    def derive(self) -> Derivation:
        """The derivation, built afresh (each step is verified by :meth:`Derivation.check`)."""
        return self.builder()
