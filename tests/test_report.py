"""The conformance report: LaTeX that compiles, names every claim, fits the page, shows each failure's replay."""

from __future__ import annotations

import json
import math
import random
import re
import shlex
import subprocess
import sys
import types
from pathlib import Path

import pytest

from core.names import short_spec
from core.results import parse
from verify.cli import main
from verify.latex import missing
from verify.report import write_report
from verify.report.claims import derivation_latex
from verify.report.model import NO_KERNEL, arrange
from verify.report.texify import command_block, escape, verbatim_block

TRICKY_SPEC = "my_broken&50%#$kernel$.py:ln"
TRICKY_MESSAGE = r"kernel raised RuntimeError: path C:\tmp\x_1 {y} ~ ^ 50% & $x$ σ² ≤ ε"
REPLAY = "normverify replay /tmp/runs/counterexamples/ln.forward-my_broken_kernel-3f9a21.pt"
CLAIM_KINDS = {"ln.forward": "layernorm", "rms.forward": "rmsnorm", "rms.spectral_norm": "rmsnorm",
               "dropout.variance_bias": "dropout", "rms.mean_stability": "rmsnorm", "ln.special_inputs": "layernorm",
               "dropout.keep_rate": "dropout", "ln.not_a_claim": "layernorm"}
UNKNOWN_CLAIM = "ln.not_a_claim"


def forward_points(rng: random.Random, largest: float) -> list[dict]:
    return [{"ratio": rng.uniform(0, largest), "kappa": 10 ** rng.uniform(0, 5), "d": rng.choice([8, 64]),
             "dtype": rng.choice(["float32", "float16"])} for _ in range(40)]


def spectral_points(rng: random.Random) -> list[dict]:
    points = []
    for eps in (1e-5, 1e-2):
        for _ in range(20):
            sigma2 = 10 ** rng.uniform(-8, 2)
            derived = 1 / math.sqrt(sigma2 + eps)
            points.append({"sigma2": sigma2, "eps": eps, "measured": derived * (1 + rng.uniform(-1e-3, 1e-3)),
                           "derived": derived, "bound": 1 / math.sqrt(eps)})
    return points


def dropout_points(rng: random.Random) -> list[dict]:
    """E[Var(z)] over masks (measured) around Var(x) + p(d-1)/(d(1-p)) (Var(x) + mean^2) (predicted)."""
    points = []
    for d in (4, 64):
        for _ in range(12):
            p, var, mean = rng.uniform(0.05, 0.9), rng.uniform(0.5, 2.0), rng.uniform(-1.0, 1.0)
            bias = p * (d - 1) / (d * (1 - p)) * (var + mean**2)
            points.append({"p": p, "d": d, "measured": var + bias * (1 + rng.gauss(0, 0.05)),
                           "predicted": var + bias, "var": var, "mean": mean})
    return points


def result(claim: str, spec: str, status: str = "passed", ratio: float | None = None, points=(),
           counterexample=None, message: str = "") -> dict:
    kind = CLAIM_KINDS[claim]
    return {"claim": claim, "kernel": f"{spec}:{kind}", "kind": kind, "test": f"properties/test_x.py::test_{claim}",
            "status": status, "examples": 20, "worst_ratio": ratio, "dtypes": ["float32", "float16"],
            "widths": [1, 2, 3, 64, 4096], "worst_case": {"d": 64, "dtype": "float16", "kappa": 1234.5},
            "points": list(points), "counterexamples": [counterexample] if counterexample else [], "message": message,
            "duration_s": 1.25}


def results_document(spec: str, broken: bool = False, seed: int = 0) -> dict:
    """A ``normverify.results/1`` document as docs/ARCHITECTURE.md describes it, made by hand."""
    rng = random.Random(seed)
    counterexample = {"text": "x = tensor([[5.0, 5.0, 0.0, 0.0]], dtype=torch.float16)\nweight = None, eps = 1e-05",
                      "file": "/tmp/runs/counterexamples/x.pt", "replay": REPLAY, "rerun": "python -m pytest ..."}
    results = [
        result("ln.forward", spec, "failed" if broken else "passed", 517.0 if broken else 0.21,
               forward_points(rng, 600.0 if broken else 0.3), counterexample if broken else None,
               "output: at index (0, 0) expected 0.99999, got 1.5; |error| = 0.5" if broken else ""),
        result("rms.forward", spec, ratio=0.05, points=forward_points(rng, 0.1)),
        result("rms.spectral_norm", spec, points=spectral_points(rng)),
        result("dropout.variance_bias", spec, points=dropout_points(rng)),
        result("rms.mean_stability", spec, "xfailed"),
        result("ln.special_inputs", spec, "skipped"),
        result("dropout.keep_rate", spec, "error", message=TRICKY_MESSAGE),
        result(UNKNOWN_CLAIM, spec),
    ]
    environment = {"normverify": "0.1.0", "python": "3.11.7", "torch": "2.13.0", "triton": "3.9.0",
                   "hypothesis": "6.140.0", "device": "cpu (x86_64)", "profile": "ci", "commit": "abc1234def56",
                   "date": "2026-11-21T23:50:00+00:00"}
    kernels = [{"spec": spec, "name": f"{spec}:{kind}", "kind": kind, "weight_offset": 0.0,
                "capabilities": {"device": "cpu", "dtypes": ["float32", "float16", "bfloat16"], "backward": True}}
               for kind in ("layernorm", "rmsnorm", "dropout")]
    return {"schema": "normverify.results/1", "complete": not broken, "environment": environment,
            "kernels": kernels, "results": results}


SPECS = ["torch", TRICKY_SPEC, "triton", "liger", "hf_llama", "torch_compiled"]
# The PDF tests compile with pdflatex and read the pages back with poppler's pdfinfo/pdftotext.
NO_PDF_TOOLS = missing("pdflatex", "pdfinfo", "pdftotext")
needs_pdf_tools = pytest.mark.skipif(NO_PDF_TOOLS is not None, reason=str(NO_PDF_TOOLS))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One PDF of six kernels side by side (one of them failing), with its text per page and its LaTeX log."""
    if NO_PDF_TOOLS:
        pytest.skip(NO_PDF_TOOLS)
    out = tmp_path_factory.mktemp("report")
    documents = [results_document(spec, broken=spec == TRICKY_SPEC, seed=n) for n, spec in enumerate(SPECS)]
    pdf = write_report(documents, out, pdf=True)
    pages = int(re.search(r"Pages:\s+(\d+)", subprocess.run(["pdfinfo", pdf], capture_output=True, text=True,
                                                                check=True).stdout)[1])
    text = [subprocess.run(["pdftotext", "-layout", "-f", str(n), "-l", str(n), pdf, "-"], capture_output=True,
                           text=True, check=True).stdout for n in range(1, pages + 1)]
    return types.SimpleNamespace(pdf=pdf, out=out, pages=text, log=(out / "report.log").read_text(errors="replace"))


def squeeze(text: str) -> str:
    """``text`` without whitespace and shell line continuations, to find what the PDF wraps across lines."""
    return re.sub(r"\\?\s+", "", text)


def test_pdf_pages_name_every_claim_in_the_summary_and_a_section_each(built):
    assert len(built.pages) >= 4
    first = built.pages[0]
    assert "Runs" in first and "Summary" in first and "abc1234def56" in first and "cpu (x86_64)" in first
    summary = squeeze("".join(built.pages[:2]))
    sections = squeeze("".join(built.pages[1:]))
    for claim in CLAIM_KINDS:
        assert claim in summary, f"{claim} missing from the summary table"
        assert claim in sections, f"{claim} has no section"
    assert "Statement" in sections, "each claim section should carry the derivation's statement"
    assert squeeze(f"{UNKNOWN_CLAIM} is not a claim of proofs.claims") in sections


def test_a_derivation_that_fails_to_render_is_a_note_not_a_lost_report(monkeypatch):
    import proofs.render

    def broken(claim):
        raise KeyError(claim)

    monkeypatch.setattr(proofs.render, "claim_latex", broken)
    note = derivation_latex("ln.forward")
    assert note.startswith(r"\section{ln.\allowbreak{}forward}\label{claim:ln.forward}")
    assert r"\emph{The derivation of" in note and "could not be rendered" in note and "KeyError" in note


def test_nothing_overflows_the_page(built):
    overfull = re.findall(r"Overfull \\hbox \((\d+\.\d+)pt too wide\)", built.log)
    assert not [width for width in overfull if float(width) > 2.0], overfull


def test_failure_shows_its_counterexample_and_replay_command(built):
    text = "\n".join(built.pages)
    assert "failed" in text and "517" in text
    assert "Minimal counterexample" in text and "x = tensor([[5.0, 5.0, 0.0, 0.0]]" in text
    assert squeeze(REPLAY) in squeeze(text)


def test_text_with_latex_specials_is_printed_literally(built):
    text = squeeze("\n".join(built.pages))
    assert squeeze(short_spec(TRICKY_SPEC)) in text  # a column head; the whole SPEC is in the runs table
    assert squeeze(r"C:\tmp\x_1 {y} ~ ^ 50% & $x$") in text


def test_figures_are_vector_pdfs_included_in_the_report(built):
    figures = sorted(p.name for p in (built.out / "figures").glob("*.pdf"))
    assert figures == ["dropout-variance-bias-dropout.pdf", "ln-forward-ratio.pdf", "rms-forward-ratio.pdf",
                       "rms-spectral-norm-spectral.pdf"]
    text = "\n".join(built.pages)
    for label in ("condition number", "row variance", "drop probability"):
        assert label in text, f"no figure with the axis label {label!r} in the PDF"


def test_escape_and_verbatim_keep_structure_characters_out():
    assert escape("a_b&c%d$e#f{g}h~i^j\\k", breakable=False) == \
        r"a\_b\&c\%d\$e\#f\{g\}h\textasciitilde{}i\textasciicircum{}j\textbackslash{}k"
    block = verbatim_block("x" * 200, width=50, max_lines=3)
    body = block.splitlines()[1:-1]
    assert len(body) == 3 and all(len(line) <= 50 for line in body) and body[-1] == "... (3 more lines)"
    block = verbatim_block("\\end{Verbatim} σ² \x1b[31mred\x1b[0m \x07 ok")
    assert block.splitlines()[1] == "\\end {Verbatim} sigma^2 red ? ok" and block.isascii()


@pytest.mark.parametrize("path", ["/very/long/path/" * 3, "/very/long/path/" * 12])
def test_a_long_replay_command_wraps_into_lines_a_shell_still_runs(path):
    command = f"python -m pytest {path}test_forward.py::test[x] --kernel torch --profile ci"
    lines = command_block(command, width=60).splitlines()[1:-1]
    assert len(lines) > 2 and all(len(line) <= 60 and line.endswith("\\") for line in lines[:-1])
    assert shlex.split("\n".join(lines).replace("\\\n", "")) == shlex.split(command)


def write_json(path, document) -> str:
    """The document as a results file, without plot points (this test is about the tables: no figures)."""
    for result in document["results"]:
        result["points"] = []
    path.write_text(json.dumps(document))
    return str(path)


def test_report_command_puts_several_results_side_by_side(tmp_path, capsys):
    first = write_json(tmp_path / "torch.json", results_document("torch"))
    second = write_json(tmp_path / "broken.json", results_document(TRICKY_SPEC, broken=True))
    third = write_json(tmp_path / "again.json", results_document("torch", seed=3))
    assert main(["report", first, second, third, "--out", str(tmp_path / "out")]) == 0
    tex = (tmp_path / "out" / "report.tex").read_text()
    assert "report written to" in capsys.readouterr().out
    header = next(line for line in tex.splitlines() if line.startswith("claim & theory"))
    assert header.count(r"\textbf{") == 3 and escape("torch (2)") in header
    assert escape(short_spec(TRICKY_SPEC)) in header
    assert escape(TRICKY_SPEC) in tex, "the runs table gives the whole SPEC of a shortened column head"
    assert r"\textbf{Incomplete:}" in tex, "an interrupted run should be flagged"


def test_results_are_arranged_claim_by_kernel_with_the_worst_status_and_ratio():
    document = results_document("torch")
    document["results"] += [{**result("ln.forward", "torch", "failed", 3.5), "test": "second"},
                            {"claim": "ln.forward", "status": "error", "message": "no kernel"}]
    report = arrange([parse(document)])
    assert [c.label for c in report.columns] == ["torch", NO_KERNEL]
    cell = report.cell("ln.forward", 0)
    assert cell.status == "failed" and cell.worst_ratio == 3.5 and cell.examples == 40
    assert report.cell("ln.forward", 1).status == "error" and report.cell("rms.forward", 1) is None


@pytest.mark.parametrize(("content", "says"), [
    (None, "no such results file"),
    ('{"schema": "normverify.results/1", "results": [', "not valid JSON"),
    ('{"schema": "something/else"}', "not a normverify results document"),
    ('{"schema": "normverify.results/1", "kernels": [], "results": [{"status": "passed"}]}',
     "results.0.claim: Field required"),
])
def test_bad_results_files_are_one_line_errors(tmp_path, capsys, content, says):
    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    assert main(["report", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1


UNCENTERED_LAYERNORM = '''
import torch

def layernorm(x, weight, bias, eps):
    """A LayerNorm that forgets to subtract the mean: x / sqrt(mean(x^2) + eps), i.e. RMSNorm."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y.to(x.dtype)
'''


@needs_pdf_tools
def test_a_failing_run_reports_its_counterexample_and_the_replay_reproduces_it(tmp_path, capsys):
    """End to end: a broken kernel file, `normverify run` of ln.mean_stability (one test, which the uncentered kernel
    fails: ln.forward's two dozen tests would each shrink a counterexample here) writing the PDF report, then the
    replay."""
    kernel = tmp_path / "uncentered_ln.py"
    kernel.write_text(UNCENTERED_LAYERNORM)
    report = tmp_path / "report"
    run = subprocess.run([sys.executable, "-m", "verify", "run", "--kernel", f"{kernel}:layernorm", "--claims",
                          "ln.mean_stability", "--profile", "ci", "-n", "0", "--quiet", "--report", str(report),
                          "--pdf"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    document = json.loads((report / "results.json").read_text())
    failed = [r for r in document["results"] if r["status"] == "failed"]
    assert failed and {r["claim"] for r in failed} == {"ln.mean_stability"}
    counterexample = failed[0]["counterexamples"][0]
    assert Path(counterexample["file"]).is_file()
    text = squeeze(subprocess.run(["pdftotext", report / "report.pdf", "-"], capture_output=True, text=True,
                                  check=True).stdout)
    local = f"counterexamples/{Path(counterexample['file']).name}"  # relative to the report: the folder travels
    assert "Minimalcounterexample" in text and squeeze(f"normverify replay {local}") in text
    assert (report / local).is_file()

    replay = ["normverify", "replay", str(report / local)]
    assert main(replay[1:]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "expected" in out and "got" in out
    assert main([*replay[1:], "--kernel", "torch"]) == 0


def test_saved_counterexamples_travel_with_the_report_and_replay_by_relative_paths(tmp_path):
    saved = tmp_path / "run" / "counterexamples" / "ln.forward-broken-0123456789.pt"
    saved.parent.mkdir(parents=True)
    saved.write_bytes(b"a saved counterexample")
    document = results_document(TRICKY_SPEC, broken=True)
    [example] = document["results"][0]["counterexamples"]
    example.update(file=str(saved), replay=f"normverify replay {saved}")
    tex = write_report(document, tmp_path / "out").read_text()
    assert (tmp_path / "out" / "counterexamples" / saved.name).read_bytes() == saved.read_bytes()
    assert f"normverify replay counterexamples/{saved.name}" in tex and str(saved) not in tex
    assert (tmp_path / "out" / "report.tex").stat().st_mode & 0o777 == 0o644
