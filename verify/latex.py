"""Compiling the LaTeX documents normverify writes (derivations, conformance reports)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from core.errors import UsageError


class LatexError(RuntimeError):
    """pdflatex ran and failed; the message carries the error lines of its log."""


def compile_pdf(tex: Path, runs: int = 2, timeout: float = 120.0) -> Path:
    """Run pdflatex on ``tex`` (in its folder, ``runs`` times for references) and return the PDF path.

    A missing pdflatex is a UsageError with the install hint; a failed compile a LatexError.
    """
    exe = shutil.which("pdflatex")
    if exe is None:
        raise UsageError("pdflatex not found: install it (Debian: apt-get install texlive-latex-base "
                         "texlive-latex-recommended lmodern) or leave out --pdf")
    tex = Path(tex).resolve()
    for _ in range(runs):
        proc = subprocess.run(
            [exe, "-interaction=nonstopmode", "-halt-on-error", tex.name],
            cwd=tex.parent, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            errors = [line for line in proc.stdout.splitlines() if line.startswith("!") or "Error" in line]
            raise LatexError(f"pdflatex failed on {tex}: " + ("; ".join(errors[:5]) or proc.stdout[-800:]))
    return tex.with_suffix(".pdf")
