"""Results documents (docs/ARCHITECTURE.md, "Results JSON") read, checked and arranged claim x kernel.

One column per kernel SPEC of every document given (a SPEC such as ``torch`` covers its
layernorm, rmsnorm and dropout kernels: a claim's prefix says which one answered it); one row per
claim id, in the order of ``proofs.claims.CLAIMS``. A cell joins every result of that claim and
SPEC (a ``core.results.SummaryRow``, as in the run's own summary): the worst status, the largest
error/bound ratio, the examples summed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core.errors import UsageError
from core.names import short_spec
from core.results import SummaryRow

SCHEMA = "normverify.results/1"
NO_KERNEL = "(no kernel)"  # the column of results whose test had no kernel parameter


@dataclass
class Column:
    """One kernel SPEC of one results document."""

    label: str
    spec: str
    environment: dict
    kernels: list[dict]
    complete: bool


@dataclass
class Report:
    """Kernel columns, claim rows (in proofs' order, unknown ids last) and the cells between them."""

    columns: list[Column]
    claims: list[str]
    cells: dict[tuple[str, int], SummaryRow]

    def cell(self, claim: str, column: int) -> SummaryRow | None:
        """Every result of ``claim`` for the kernel column: worst status, largest ratio, examples summed."""
        return self.cells.get((claim, column))


def load_results(path: Path) -> dict:
    """The results document at ``path``; a UsageError (one line) when it is missing or not one."""
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"no such results file: {path}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"cannot read {path}: {error}") from None
    except json.JSONDecodeError as error:
        raise UsageError(f"{path} is not valid JSON ({error.msg} at line {error.lineno}); "
                         "was the run that wrote it killed before it finished?") from None
    check_results(document, str(path))
    return document


def check_results(document: object, source: str = "results") -> None:
    """Raise a UsageError unless ``document`` has the shape of a ``normverify.results/1`` document."""
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        found = document.get("schema") if isinstance(document, dict) else type(document).__name__
        raise UsageError(f"{source} is not a normverify results document (schema {found!r}, expected {SCHEMA!r})")
    for key, kind in (("results", list), ("kernels", list)):
        if not isinstance(document.get(key, []), kind):
            raise UsageError(f"{source}: {key!r} must be a list")
    for number, result in enumerate(document.get("results", []), 1):
        if not isinstance(result, dict) or not result.get("claim"):
            raise UsageError(f"{source}: result {number} names no claim")


def arrange(documents: Sequence[dict]) -> Report:
    """The claim x SPEC grid of ``documents`` (each already checked)."""
    columns: list[Column] = []
    cells: dict[tuple[str, int], SummaryRow] = {}
    for document in documents:
        spec_of = {k.get("name"): k.get("spec") or k.get("name") for k in document.get("kernels", [])}
        first_column = len(columns)
        for result in document.get("results", []):
            kernel = result.get("kernel") or NO_KERNEL
            spec = result.get("spec") or spec_of.get(kernel, kernel)
            index = _column_index(columns, first_column, spec, document)
            cells.setdefault((result["claim"], index), SummaryRow(result["claim"], spec, [])).results.append(result)
        for kernel in document.get("kernels", []):
            _column_index(columns, first_column, kernel.get("spec") or kernel.get("name"), document)
    _label_columns(columns)
    from proofs.claims import CLAIMS  # imported when a report is made: it brings SymPy

    known = list(CLAIMS)
    present = {claim for claim, _ in cells}
    claims = [c for c in known if c in present] + sorted(present - set(known))
    return Report(columns, claims, cells)


def _column_index(columns: list[Column], first: int, spec: str, document: dict) -> int:
    for index in range(first, len(columns)):
        if columns[index].spec == spec:
            return index
    kernels = [k for k in document.get("kernels", []) if (k.get("spec") or k.get("name")) == spec]
    columns.append(Column(spec, spec, document.get("environment", {}), kernels, bool(document.get("complete"))))
    return len(columns) - 1


def _label_columns(columns: list[Column]) -> None:
    """A column's head is its SPEC shortened (:func:`core.names.short_spec`: ``flaggems/wrap:layer_norm`` for
    ``/home/me/flaggems/wrap.py:layer_norm``; the runs table gives the whole SPEC), numbered from the second
    column with the same head on: ``torch (2)`` for a SPEC that appears in several documents."""
    seen: dict[str, int] = {}
    for column in columns:
        label = short_spec(column.spec)
        seen[label] = seen.get(label, 0) + 1
        column.label = label if seen[label] == 1 else f"{label} ({seen[label]})"
