"""verify.latex: pdflatex passes until the cross-references settle; the PDF tools' install hint."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from core.errors import UsageError
from verify import latex

ROOT = Path(__file__).resolve().parents[1]
FAKE_PDFLATEX = """#!/bin/sh
# A stand-in for pdflatex whose .aux settles after SETTLE passes: it counts its passes in NAME.runs.
name="${3%.tex}"
echo pass >> "$name.runs"
n=$(wc -l < "$name.runs")
if [ "$n" -le SETTLE ]; then echo "pass $n" > "$name.aux"; fi
touch "$name.pdf"
"""


@pytest.mark.parametrize(("settle", "passes"), [(1, 2), (2, 3), (99, 4)])
def test_passes_run_until_the_auxiliary_files_stop_changing(tmp_path, monkeypatch, settle, passes):
    """A pass that rewrites .aux unchanged is the last; a document that never settles stops at max_runs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "pdflatex"
    fake.write_text(FAKE_PDFLATEX.replace("SETTLE", str(settle)))
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    tex = tmp_path / "doc.tex"
    tex.write_text("")
    assert latex.compile_pdf(tex, max_runs=4) == tex.with_suffix(".pdf")
    assert len((tmp_path / "doc.runs").read_text().splitlines()) == passes


TOC_SHIFTS_PAGES = r"""\documentclass{article}
\begin{document}
\tableofcontents
\clearpage
""" + "".join(rf"\section{{Part {n}}}text\clearpage" + "\n" for n in range(1, 80)) + r"\end{document}"


@pytest.mark.skipif(latex.missing("pdflatex", "pdftotext") is not None,
                    reason=str(latex.missing("pdflatex", "pdftotext")))
def test_a_table_of_contents_that_moves_the_pages_lists_the_right_pages(tmp_path):
    """80 sections fill two pages of contents, so the pages of pass 2 move again: a third pass fixes the list."""
    tex = tmp_path / "toc.tex"
    tex.write_text(TOC_SHIFTS_PAGES)
    pdf = latex.compile_pdf(tex)
    pages = subprocess.run(["pdftotext", "-layout", pdf, "-"], capture_output=True, text=True,
                           check=True).stdout.split("\f")
    listed = int(re.search(r"Part 1\b[ .]*(\d+)", pages[0])[1])
    actual = next(number for number, text in enumerate(pages, 1) if re.search(r"^\s*1\s+Part 1\s*$", text, re.M))
    assert listed == actual > 2


def test_missing_pdflatex_is_a_usage_error_with_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UsageError, match=r"pdflatex not found; to install: .*apt-get install"):
        latex.compile_pdf(tmp_path / "doc.tex")


def test_the_set_up_script_installs_the_packages_the_hint_names():
    script = (ROOT / "scripts" / "system-packages.sh").read_text()
    listed = re.search(r"^PACKAGES=\((.*)\)$", script, re.M)[1].split()
    assert tuple(listed) == latex.PACKAGES
