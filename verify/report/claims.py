"""One section per claim: the derivation's statement (from proofs, by id), the evidence of every
kernel column, the failures with their minimal counterexample and replay command, the figures."""

from __future__ import annotations

from pathlib import Path

from verify.report import plots
from verify.report.model import Report
from verify.report.tables import label_of, longtable, verdict_word
from verify.report.texify import command_block, escape, number, verbatim_block

MAX_LISTED_WIDTHS = 12
NOT_PASSING = ("failed", "error", "xpassed", "unchecked")


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
        return _unrendered(claim, f"The derivation of {claim} could not be rendered: {type(error).__name__}: {error}")


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


def evidence_table(rows: list[tuple[str, dict]]) -> str:
    """One row per (kernel column label, result record): status, examples, worst ratio, dtypes, widths, worst case."""
    rows_latex = []
    for label, record in rows:
        test = record.get("test", "").rpartition("::")[2]
        rows_latex.append([rf"\textbf{{{escape(label)}}}\newline{{\scriptsize\ttfamily {escape(test)}}}",
                           verdict_word(record.get("status", "error")), _examples(record),
                           number(record.get("worst_ratio")),
                           escape(_listing([str(d).removeprefix("torch.") for d in record.get("dtypes") or []])),
                           escape(_listing(record.get("widths") or [])),
                           escape(compact(record.get("worst_case") or "--"))])
    return longtable([share for _, share in EVIDENCE_COLUMNS], [heading for heading, _ in EVIDENCE_COLUMNS],
                     rows_latex)


def _examples(record: dict) -> str:
    """The example count, and how many of them were unchecked (no finite bound: never evidence)."""
    text = str(int(record.get("examples") or 0))
    unchecked = int(record.get("unchecked") or 0)
    return text + (rf"\newline({unchecked} unchecked)" if unchecked else "")


def failure_details(label: str, record: dict) -> str:
    """Why a kernel did not pass: the message, the minimal counterexample and the command that replays it."""
    parts = [rf"\textbf{{{escape(label)}}}, {verdict_word(record.get('status', 'error'))} in "
             rf"\texttt{{{escape(record.get('test', ''))}}}:"]
    if record.get("message"):
        parts.append(verbatim_block(record["message"], max_lines=12))
    counterexample = record.get("counterexample")
    if counterexample:
        parts += ["Minimal counterexample:", verbatim_block(counterexample.get("text", ""), max_lines=30)]
        if counterexample.get("replay"):
            parts += ["Replay it with:", command_block(counterexample["replay"])]
    return "\n".join(parts) + "\n"


def figure(path: Path, caption: str, out_dir: Path) -> str:
    return "\n".join([r"\begin{figure}[H]\centering",
                      rf"\includegraphics[width=\linewidth]{{{path.relative_to(out_dir).as_posix()}}}",
                      rf"\caption{{{caption}}}", r"\end{figure}", ""])


def claim_section(report: Report, claim: str, out_dir: Path, figure_dir: Path) -> str:
    """The section of ``claim``: its derivation, then the evidence of every kernel column and the figures."""
    parts = [derivation_latex(claim), r"\subsection*{Evidence}"]
    rows, series = [], []
    for index, column in enumerate(report.columns):
        cell = report.cell(claim, index)
        if cell is not None:
            rows += [(column.label, record) for record in cell.results]
            series.append((column.label, [point for record in cell.results for point in record.get("points") or []]))
    parts.append(evidence_table(rows))
    parts += [failure_details(label, record) for label, record in rows
              if record.get("status") in NOT_PASSING and (record.get("message") or record.get("counterexample"))]
    for path, caption in plots.figures(claim, series, figure_dir):
        parts.append(figure(path, caption, out_dir))
    return "\n".join(parts)
