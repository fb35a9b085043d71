"""Issue 11, point 6: each derived-property claim either catches a corpus bug that ``*.forward``'s inputs miss, or is
declared a view of the forward evidence (proofs.claims.base.Claim.view_of) and every output says so next to its
verdict: the results JSON (core.results.View), the terminal summary and the LaTeX report."""

from __future__ import annotations

import io

import pytest
from corpus import BROKEN
from rich.console import Console

from core.results import Document, Result, View
from proofs.claims import CLAIMS
from proofs.claims.base import Claim
from properties.run.results import claim_view
from verify.commands.run import print_views, summary_table
from verify.report import write_report

# The derived-property claims the conformance suite checks on kernels (properties/test_mean_stability.py,
# test_affine.py, test_variance.py): each is bounded by forward bounds of its own inputs.
DERIVED = ("ln.mean_stability", "ln.shift_invariance", "ln.affine", "rms.affine", "ln.variance_insensitivity")
VIEW = View(of="ln.forward", reason="its bound is the mean of the forward bounds")


def forward_of(claim: str) -> str:
    return f"{claim.partition('.')[0]}.forward"


@pytest.mark.parametrize("claim", DERIVED)
def test_a_derived_claim_catches_a_bug_forward_misses_or_is_declared_a_view(claim):
    caught = [entry.spec for entry in BROKEN if claim in entry.expect and forward_of(claim) in entry.missed_by]
    declared = CLAIMS[claim].view_of
    assert bool(caught) != bool(declared), f"{claim}: corpus bugs {caught}, declared a view of {declared}"
    assert declared in (None, forward_of(claim))


def test_mean_stability_is_a_view_of_the_forward_evidence_with_its_reason():
    assert CLAIMS["ln.mean_stability"].view_of == "ln.forward"
    assert claim_view("ln.mean_stability") == {"of": "ln.forward", "reason": CLAIMS["ln.mean_stability"].view_reason}
    assert claim_view("ln.shift_invariance") is None
    assert claim_view("ln.not_a_claim") is None


def test_a_view_needs_its_reason():
    claim = CLAIMS["ln.mean_stability"]
    with pytest.raises(ValueError, match="view_of and view_reason"):
        Claim(claim.id, claim.title, claim.seed, claim.seed_statement, claim.statement, claim.conditions,
              claim.verdict, claim.verdict_note, claim.builder, view_of="ln.forward")


def document() -> Document:
    results = [Result(claim="ln.mean_stability", kernel="torch:layernorm", kind="layernorm", spec="torch",
                      test="properties/test_mean_stability.py::test_output_mean_is_the_mean_of_beta",
                      status="passed", examples=10, worst_ratio=0.3, view=VIEW),
               Result(claim="ln.shift_invariance", kernel="torch:layernorm", kind="layernorm", spec="torch",
                      test="properties/test_mean_stability.py::test_shift_invariance", status="passed", examples=10,
                      worst_ratio=0.8)]
    return Document(complete=True, results=results)


def test_the_view_is_in_the_results_json():
    data = document().as_json()
    assert data["results"][0]["view"] == {"of": "ln.forward", "reason": VIEW.reason}
    assert data["results"][1]["view"] is None
    assert Document.model_validate(data).results[0].view == VIEW


def test_the_terminal_summary_shows_the_view_next_to_the_verdict():
    console = Console(file=io.StringIO(), width=400)
    console.print(summary_table(document()))
    print_views(console, document())
    text = console.file.getvalue()
    assert "passed (view of ln.forward)" in text
    assert "VIEW ln.mean_stability: passes with the ln.forward evidence (a view of it; why: JSON, report)" in text
    assert VIEW.reason not in text  # one short line: the reason is in the JSON and the report
    assert text.count("view of") == 2  # the shift claim's row and line say nothing
    print_views(console, document(), verbose=True)
    assert f"VIEW ln.mean_stability: a view of the ln.forward evidence: {VIEW.reason}" in console.file.getvalue()


def test_the_latex_report_shows_the_view_in_the_summary_and_the_claim_section(tmp_path):
    tex = write_report(document(), tmp_path).read_text().replace(r"\allowbreak{}", "")
    assert r"\newline view of ln.forward" in tex
    assert rf"\paragraph{{A view.}} This claim's evidence is a view of the ln.forward evidence: {VIEW.reason}." in tex
