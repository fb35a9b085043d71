"""One section per claim: the derivation's statement (from proofs, by id), the evidence of every
kernel column, the failures with their minimal counterexample and replay command, the figures."""

from __future__ import annotations

from pathlib import Path

from core.errors import one_line
from core.results import NOT_PASSING, Point, Result
from verify.report import plots
from verify.report.model import Report
from verify.report.tables import label_of, longtable, verdict_word
from verify.report.texify import command_block, escape, number, verbatim_block

MAX_LISTED_WIDTHS = 12
SHOWN_FAILING = NOT_PASSING | {"xpassed"}  # results whose message and counterexamples the section shows


def theory_verdicts() -> dict[str, str]:
    """claim id -> the derivation's verdict ("holds", "holds only when", "fails", "contract")."""
    from proofs.claims import CLAIMS

    return {claim_id: claim.verdict for claim_id, claim in CLAIMS.items()}


def derivation_latex(claim: str) -> str:
    """The claim's section as ``normverify derive`` typesets it (``proofs.render.claim_latex``: heading,
    label, statement, conditions, verified steps, verdict).

    A claim proofs does not know, or whose rendering fails, gets a heading and a visible note
    instead, so one bad claim never costs the report.
    """
    from proofs import claims, render

    if claim not in claims.CLAIMS:
        return _unrendered(claim, f"{claim} is not a claim of proofs.claims: the results name a claim the "
                                  "derivations do not know.")
    try:
        return render.claim_latex(claim) + "\n"
    except Exception as error:
        return _unrendered(claim, f"The derivation of {claim} could not be rendered: {one_line(error)}")


def _unrendered(claim: str, note: str) -> str:
    return rf"\section{{{escape(claim)}}}\label{{{label_of(claim)}}}" + "\n" + rf"\emph{{{escape(note)}}}" + "\n"


def _listing(values: list, limit: int = MAX_LISTED_WIDTHS) -> str:
    values = sorted(set(values), key=lambda v: (isinstance(v, str), v))
    if len(values) > limit:
        return f"{', '.join(map(str, values[: limit - 2]))}, ..., {values[-1]} ({len(values)} distinct)"
    return ", ".join(map(str, values)) or "--"


def compact(value: object) -> str:
    """A short one-line rendering of a worst case: numbers to 4 digits, long lists cut."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{key}={compact(item)}" for key, item in value.items())
    if isinstance(value, (list, tuple)):
        shown = ", ".join(compact(item) for item in value[:8])
        return f"[{shown}{', ...' if len(value) > 8 else ''}]"
    return str(value)


EVIDENCE_COLUMNS = (  # (heading, share of the line width)
    ("kernel / test", 0.22), ("status", 0.08), ("examples", 0.09), ("worst ratio", 0.08), ("dtypes", 0.11),
    ("widths", 0.12), ("worst case", 0.28),
)


def evidence_table(rows: list[tuple[str, Result]]) -> str:
    """One row per (kernel column label, result): status, examples, worst ratio, dtypes, widths, worst case."""
    rows_latex = []
    for label, result in rows:
        test = result.test.rpartition("::")[2]
        worst_case = result.worst_case.model_dump(exclude_none=True) if result.worst_case is not None else "--"
        rows_latex.append([rf"\textbf{{{escape(label)}}}\newline{{\scriptsize\ttfamily {escape(test)}}}",
                           verdict_word(result.status), _examples(result), number(result.worst_ratio),
                           escape(_listing([str(d).removeprefix("torch.") for d in result.dtypes])),
                           escape(_listing(result.widths)), escape(compact(worst_case))])
    return longtable([share for _, share in EVIDENCE_COLUMNS], [heading for heading, _ in EVIDENCE_COLUMNS],
                     rows_latex)


def coverage_paragraph(rows: list[tuple[str, Result]]) -> str:
    """What the examples of each kernel column covered (``Result.coverage`` summed over its tests): examples per
    dtypes (x and parameters), layout class, width class and dimensions of x; so a reader sees what "passed" covered."""
    totals: dict[str, dict[str, dict[str, int]]] = {}
    for label, result in rows:
        for axis, classes in result.coverage.items():
            for name, count in classes.items():
                cell = totals.setdefault(label, {}).setdefault(axis, {})
                cell[name] = cell.get(name, 0) + count
    if not totals:
        return ""
    lines = [r"\paragraph{What the examples covered.}"]
    for label, axes in totals.items():
        described = "; ".join(f"{axis}: " + ", ".join(f"{name} {count}" for name, count in sorted(classes.items()))
                              for axis, classes in axes.items())
        lines.append(rf"\textbf{{{escape(label)}}}: {escape(described)}.\par")
    return "\n".join(lines) + "\n"


def view_paragraph(rows: list[tuple[str, Result]]) -> str:
    """What a pass of a claim declared a view of another claim's evidence (core.results.View) means, once."""
    views = dict.fromkeys(result.view.text() for _, result in rows if result.view is not None)
    return "".join(rf"\paragraph{{A view.}} This claim's evidence is {escape(text)}." + "\n" for text in views)


def finding_paragraph(rows: list[tuple[str, Result]]) -> str:
    """What a bitwise claim measured for each kernel (core.results.Finding): "batch invariant: no (...)" and the
    evidence, whether the claim passed (a finding) or failed (declared)."""
    lines = [rf"\textbf{{{escape(label)}}}: {escape(result.finding.line())}\par" for label, result in rows
             if result.finding is not None]
    return (r"\paragraph{Measured.}" + "\n" + "\n".join(lines) + "\n") if lines else ""


def _examples(result: Result) -> str:
    """The example count, and how many of them were unchecked (no finite bound: never evidence)."""
    return str(result.examples) + (rf"\newline({result.unchecked} unchecked)" if result.unchecked else "")


def failure_details(label: str, result: Result) -> str:
    """Why a kernel did not pass: the message, and each distinct failure's minimal counterexample and the
    command that replays it."""
    parts = [rf"\textbf{{{escape(label)}}}, {verdict_word(result.status)} in \texttt{{{escape(result.test)}}}:"]
    if result.message:
        parts.append(verbatim_block(result.message, max_lines=12))
    several = len(result.counterexamples) > 1
    for number_, example in enumerate(result.counterexamples, 1):
        heading = f"Minimal counterexample {number_} ({escape(example.message)})" if several else \
            "Minimal counterexample:"
        parts += [heading, verbatim_block(example.text, max_lines=30), "Replay it with:", command_block(example.replay)]
    return "\n".join(parts) + "\n"


def _plain(point: Point) -> dict:
    """A point as the figures read it: its recorded keys and values."""
    return point.model_dump(exclude_none=True)


def figure(path: Path, caption: str, out_dir: Path) -> str:
    return "\n".join([r"\begin{figure}[H]\centering",
                      rf"\includegraphics[width=\linewidth]{{{path.relative_to(out_dir).as_posix()}}}",
                      rf"\caption{{{caption}}}", r"\end{figure}", ""])


def claim_section(report: Report, claim: str, out_dir: Path, figure_dir: Path) -> str:
    """The section of ``claim``: its derivation, then the evidence of every kernel column and the figures."""
    parts = [derivation_latex(claim), r"\subsection*{Evidence}"]
    rows: list[tuple[str, Result]] = []
    series = []
    for index, column in enumerate(report.columns):
        cell = report.cell(claim, index)
        if cell is not None:
            rows += [(column.label, result) for result in cell.results]
            series.append((column.label, [_plain(point) for result in cell.results for point in result.points]))
    parts.append(evidence_table(rows))
    parts.append(view_paragraph(rows))
    parts.append(finding_paragraph(rows))
    parts.append(coverage_paragraph(rows))
    parts += [failure_details(label, result) for label, result in rows
              if result.status in SHOWN_FAILING and (result.message or result.counterexamples)]
    for path, caption in plots.figures(claim, series, figure_dir):
        parts.append(figure(path, caption, out_dir))
    return "\n".join(parts)
