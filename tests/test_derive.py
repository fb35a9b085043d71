"""`normverify derive`: the LaTeX document, its compilation, and its one-line errors."""

from __future__ import annotations

import pytest

from proofs import render
from proofs.claims import CLAIMS
from verify.cli import main
from verify.latex import missing

SOME = "ln.seed_example,dropout.variance_bias,ln.row_independence"


def test_writes_a_section_per_selected_claim(tmp_path, capsys):
    assert main(["derive", "--out", str(tmp_path), "--claims", SOME]) == 0
    tex = (tmp_path / "derivations.tex").read_text()
    assert tex.startswith("\\documentclass") and tex.rstrip().endswith("\\end{document}")
    assert tex.count("\\section{") == 3
    assert "\\checkmark" in tex and "NOT VERIFIED" not in tex
    assert render.claim_latex("ln.seed_example") in tex
    assert "wrote" in capsys.readouterr().out


@pytest.mark.skipif(missing("pdflatex") is not None, reason=str(missing("pdflatex")))
def test_the_whole_document_compiles_without_overfull_lines(tmp_path):
    assert main(["derive", "--out", str(tmp_path), "--pdf"]) == 0
    tex = (tmp_path / "derivations.tex").read_text()
    assert tex.count("\\section{") == len(CLAIMS)
    for claim in CLAIMS.values():
        assert f"Verdict: {claim.verdict}" in tex
    assert (tmp_path / "derivations.pdf").stat().st_size > 50_000
    log = (tmp_path / "derivations.log").read_text(errors="replace")
    assert "Overfull \\hbox" not in log


def test_unknown_claim_is_a_one_line_error(tmp_path, capsys):
    assert main(["derive", "--out", str(tmp_path), "--claims", "ln.nonsense"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown claim id(s): ln.nonsense" in err


def test_missing_pdflatex_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["derive", "--out", str(tmp_path), "--claims", "ln.seed_example", "--pdf"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pdflatex not found" in err


def test_escaping_of_seed_text():
    assert render.escape_text("50% of x_i & {y}") == r"50\% of x\_i \& \{y\}"
