"""Assembling the report document and writing it (atomically) with its figures."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from core.files import write_atomically
from core.results import Document
from verify.latex import compile_pdf
from verify.report.claims import claim_section, theory_verdicts
from verify.report.model import Report, arrange, check_results, with_local_counterexamples
from verify.report.tables import bitwise_table, runs_table, summary_table
from verify.report.texify import escape

TEX_NAME = "report.tex"
FIGURE_DIR = "figures"
# Packages the report adds to the derivations' preamble (which defines the macros claim_latex uses).
REPORT_PACKAGES = r"""\usepackage{array,booktabs,longtable}
\usepackage{float}
\usepackage{fancyvrb}
\usepackage[dvipsnames]{xcolor}
\setlength{\emergencystretch}{3em}
"""


def write_report(results: Document | dict | Sequence[Document | dict], out_dir: Path, pdf: bool = False) -> Path:
    """Write ``out_dir/report.tex`` (and its figures) from one results document, or several side by side.

    The saved counterexamples are copied to ``out_dir/counterexamples/`` and replayed from there by relative
    paths, so the report's folder can be moved or sent as it is. Returns the .tex path, or the compiled PDF's
    path when ``pdf`` is true. Raises UsageError when a document is not a ``normverify.results/1`` document,
    ``verify.latex.LatexError`` when pdflatex fails.
    """
    given = [results] if isinstance(results, (Document, dict)) else list(results)
    out_dir = Path(out_dir)
    documents = [with_local_counterexamples(check_results(document, f"results document {number}"), out_dir)
                 for number, document in enumerate(given, 1)]
    figure_dir = out_dir / FIGURE_DIR
    figure_dir.mkdir(parents=True, exist_ok=True)
    tex = out_dir / TEX_NAME
    write_atomically(tex, render(arrange(documents), out_dir, figure_dir))
    return compile_pdf(tex) if pdf else tex


def render(report: Report, out_dir: Path, figure_dir: Path) -> str:
    """The whole LaTeX document of ``report``; figures are written into ``figure_dir``."""
    from proofs.render import PREAMBLE  # imported when a report is made: it brings SymPy

    kernels = ", ".join(column.label for column in report.columns) or "no kernel"
    incomplete = [column.label for column in report.columns if not column.complete]
    parts = [PREAMBLE + REPORT_PACKAGES, rf"\title{{normverify conformance report: {escape(kernels)}}}",
             r"\date{}", r"\begin{document}", r"\maketitle", r"\section*{Runs}", runs_table(report)]
    if incomplete:
        parts.append(rf"\textbf{{Incomplete:}} the run of {escape(', '.join(incomplete))} was interrupted; "
                     r"the results below are what it finished.")
    parts += [r"\section*{Summary}",
              r"Status per claim and kernel; ``ratio'' is the worst measured error divided by the derived bound "
              r"(above 1 is a violation). ``theory'' is the derivation's verdict.",
              summary_table(report, theory_verdicts()) if report.claims else r"\emph{The results hold no test.}"]
    bitwise = bitwise_table(report)
    if bitwise:
        parts += [r"\section*{Bitwise properties}",
                  r"Batch invariance (the same rows give the same bits in another batch size and position: outputs, "
                  r"dx, d residual) and run-to-run determinism (outputs and every gradient), measured per kernel: a "
                  r"contract where the kernel declares it, else a finding, never a failure.", bitwise]
    parts.append(r"\clearpage")
    parts += [claim_section(report, claim, out_dir, figure_dir) for claim in report.claims]
    parts.append(r"\end{document}")
    return "\n".join(parts) + "\n"
