"""`normverify report RESULTS.json... --out DIR [--pdf]`: the conformance report from saved results,
several kernels side by side."""

from __future__ import annotations

import argparse
from pathlib import Path

from core.errors import UsageError
from verify.latex import LatexError

NAME = "report"
HELP = "write the LaTeX (and PDF) conformance report of saved results JSON files, kernels side by side"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", nargs="+", type=Path, metavar="RESULTS.json",
                        help="results files written by `normverify run --json PATH`")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="directory for report.tex and figures")
    parser.add_argument("--pdf", action="store_true", help="also compile report.pdf with pdflatex")


def run(args: argparse.Namespace) -> int:
    from core.results import load  # pydantic: only when a report is written
    from verify.report import write_report  # matplotlib: only when a report is written

    documents = [load(path) for path in args.results]
    try:
        written = write_report(documents, args.out, pdf=args.pdf)
    except LatexError as error:
        raise UsageError(f"{error} (the LaTeX source is in {args.out / 'report.tex'})") from None
    print(f"report written to {written}")
    return 0
