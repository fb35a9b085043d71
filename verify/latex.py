"""Compiling the LaTeX documents normverify writes (derivations, conformance reports)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from core.errors import UsageError

# The Debian packages of the PDF steps: pdflatex and the LaTeX packages our documents use, and poppler's
# pdftotext/pdfinfo for the tests that read the PDFs. scripts/system-packages.sh installs this list.
PACKAGES = ("texlive-latex-base", "texlive-latex-recommended", "lmodern", "poppler-utils")
INSTALL = "apt-get install -y --no-install-recommends " + " ".join(PACKAGES)
# Files a pass reads back in the next one (labels, page numbers, table of contents, PDF bookmarks).
_AUXILIARY = (".aux", ".toc", ".out")


class LatexError(RuntimeError):
    """pdflatex ran and failed; the message carries the error lines of its log."""


def missing(*tools: str) -> str | None:
    """Why the PDF steps cannot run here (the ``tools`` not on PATH, and how to install them), or None."""
    absent = [tool for tool in tools if shutil.which(tool) is None]
    if not absent:
        return None
    return f"{', '.join(absent)} not found; to install: `make setup` as root, or `sudo {INSTALL}`"


def _auxiliary(tex: Path) -> tuple[bytes | None, ...]:
    return tuple(path.read_bytes() if path.is_file() else None for path in map(tex.with_suffix, _AUXILIARY))


def compile_pdf(tex: Path, max_runs: int = 4, timeout: float = 120.0) -> Path:
    """Run pdflatex on ``tex`` in its folder until its cross-references settle, and return the PDF path.

    A pass reads the .aux/.toc/.out files the previous one wrote; when a pass writes them unchanged the
    next would typeset the same pages, so the references are right. That takes two passes for a
    document whose references do not move, three when the table of contents itself shifts the pages
    it lists; ``max_runs`` caps it. A missing pdflatex is a UsageError with the install hint; a failed
    compile a LatexError.
    """
    reason = missing("pdflatex")
    if reason is not None:
        raise UsageError(f"{reason}; or leave out --pdf")
    tex = Path(tex).resolve()
    before = _auxiliary(tex)
    for _ in range(max_runs):
        proc = subprocess.run(
            [shutil.which("pdflatex"), "-interaction=nonstopmode", "-halt-on-error", tex.name],
            cwd=tex.parent, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )
        if proc.returncode != 0:
            errors = [line for line in proc.stdout.splitlines() if line.startswith("!") or "Error" in line]
            raise LatexError(f"pdflatex failed on {tex}: " + ("; ".join(errors[:5]) or proc.stdout[-800:]))
        after = _auxiliary(tex)
        if after == before:
            break
        before = after
    return tex.with_suffix(".pdf")
