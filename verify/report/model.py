"""Results documents (docs/ARCHITECTURE.md, "Results JSON") read, checked and arranged claim x kernel.

One column per kernel SPEC of every document given (a SPEC such as ``torch`` covers its
layernorm, rmsnorm and dropout kernels: a claim's prefix says which one answered it); one row per
claim id, grouped by family (ln, rms, dropout, ...) in the order of ``proofs.claims.CLAIMS``
(``core.results.ordered_claims``). A cell joins every result of that claim and
SPEC (a ``core.results.SummaryRow``, as in the run's own summary): the worst status, the largest
error/bound ratio, the examples summed.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core import results
from core.names import short_spec
from core.results import NO_KERNEL, Document, Environment, KernelEntry, SummaryRow, ordered_claims

COUNTEREXAMPLE_DIR = "counterexamples"  # next to report.tex: the saved counterexamples the report replays


@dataclass
class Column:
    """One kernel SPEC of one results document."""

    label: str
    spec: str
    environment: Environment
    kernels: list[KernelEntry]
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


def check_results(document: Document | object, source: str = "results") -> Document:
    """``document`` as a :class:`core.results.Document` (a dict is validated); a UsageError (one line) when it is
    not a ``normverify.results/1`` document."""
    return document if isinstance(document, Document) else results.parse(document, source)


def with_local_counterexamples(document: Document, out_dir: Path) -> Document:
    """``document`` with each saved counterexample copied to ``out_dir/counterexamples/`` and replayed from there
    by a path relative to ``out_dir`` (a file that no longer exists keeps its entry as it was)."""
    updated = []
    for result in document.results:
        examples = []
        for example in result.counterexamples:
            source = Path(example.file) if example.file else None
            if source is not None and source.is_file():
                local = Path(COUNTEREXAMPLE_DIR) / source.name
                (out_dir / COUNTEREXAMPLE_DIR).mkdir(parents=True, exist_ok=True)
                if source.resolve() != (out_dir / local).resolve():
                    shutil.copyfile(source, out_dir / local)
                example = example.model_copy(update={"file": local.as_posix(), "replay": results.replay_command(local)})
            examples.append(example)
        updated.append(result.model_copy(update={"counterexamples": examples}))
    return document.model_copy(update={"results": updated})


def arrange(documents: Sequence[Document]) -> Report:
    """The claim x SPEC grid of ``documents``."""
    columns: list[Column] = []
    cells: dict[tuple[str, int], SummaryRow] = {}
    for document in documents:
        spec_of = {k.name: k.spec or k.name for k in document.kernels}
        first_column = len(columns)
        for result in document.results:
            kernel = result.kernel or NO_KERNEL
            spec = result.spec or spec_of.get(kernel, kernel)
            index = _column_index(columns, first_column, spec, document)
            cells.setdefault((result.claim, index), SummaryRow(result.claim, spec, [])).results.append(result)
        for kernel in document.kernels:
            _column_index(columns, first_column, kernel.spec or kernel.name, document)
    _label_columns(columns)
    from proofs.claims import CLAIMS  # imported when a report is made: it brings SymPy

    return Report(columns, ordered_claims((claim for claim, _ in cells), list(CLAIMS)), cells)


def _column_index(columns: list[Column], first: int, spec: str, document: Document) -> int:
    for index in range(first, len(columns)):
        if columns[index].spec == spec:
            return index
    kernels = [k for k in document.kernels if (k.spec or k.name) == spec]
    columns.append(Column(spec, spec, document.environment, kernels, document.complete))
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
