"""normverify run's front: every bad request is one line and exit 2, found before pytest starts; the summary,
the exit code and the report from a finished run (runner.run replaced by a stand-in: the real run is
tests/test_runner.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.results import parse
from verify import cli, runner

CORPUS = Path(__file__).resolve().parent / "corpus"


@pytest.fixture(autouse=True)
def no_pytest(monkeypatch):
    """These requests must be refused before the suite runs: starting it is a test failure."""

    def refuse(*args, **kwargs):
        raise AssertionError("the suite was started for a request that should have been refused")

    monkeypatch.setattr(runner, "run", refuse)
    monkeypatch.setattr(runner, "known_claims", lambda: ["ln.forward", "ln.jacobian", "rms.forward",
                                                         "dropout.values", "numerics.error_model", "blocks.jacobians"])


@pytest.mark.parametrize(("argv", "words"), [
    (["--kernel", "no-such-kernel"], "unknown kernel 'no-such-kernel'"),
    (["--kernel", "/nowhere/k.py:ln"], "no such file /nowhere/k.py"),
    (["--kernel", "torch", "--kernel", "json:no_such_function"], "has no attribute 'no_such_function'"),
    (["--kernel", "torch", "--claims", "ln.forwrd"], "'ln.forwrd' matches no claim id; did you mean ln.forward"),
    (["--kernel", "torch", "--claims", "x"], "'x' matches no claim id; claim ids: ln.forward, ln.jacobian, "),
    (["--kernel", "torch", "--kind", "dropout", "--claims", "ln.*"], "no claim of the kernels' kinds (dropout)"),
    (["--kernel", "torch", "--kind", "rmsnorm", "--claims", "blocks.*"], "no claim of the kernels' kinds (rmsnorm)"),
    (["--kernel", "torch", "--timeout", "0"], "--timeout must be positive"),
    (["--kernel", "torch", "--pdf"], "--pdf needs --report DIR"),
    (["--kernel", "torch", "--xfails-file", "/nowhere/x.txt"], "--xfails-file: no such file /nowhere/x.txt"),
    (["--kernel", "torch", "--skips-file", "/nowhere/s.txt"], "--skips-file: no such file /nowhere/s.txt"),
    (["--kernel", f"{CORPUS}/load.py:layernorm_runs_nowhere", "--kind", "layernorm"],
     "runs in no dtype (float32: RuntimeError: no kernel image"),
    (["--kernel", f"{CORPUS}/load.py:rmsnorm_without_weight", "--kind", "rmsnorm"],
     "does not fit the rmsnorm contract, 3 positional arguments (too many positional arguments)"),
    (["--kernel", "torch", "--json", "/proc/nowhere/results.json"], "--json: cannot write /proc/nowhere/results.json"),
    (["--kernel", "torch", "--json", "/"], "--json: / is a directory, not a file"),
])
def test_bad_requests_are_one_line_and_exit_2(capsys, argv, words):
    assert cli.main(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and err.startswith("normverify run: ")


def test_the_block_claims_are_claims_of_layernorm_kernels(tmp_path):
    """blocks.jacobians is checked on a Post-LN block built from a LayerNorm kernel (properties/test_blocks.py)."""
    request = runner.RunRequest(["torch"], tmp_path / "results.json", kind="layernorm", claims=["blocks.jacobians"])
    assert [kernel.kind for kernel in runner.check_request(request)] == ["layernorm"]


def test_an_unknown_profile_in_the_environment_is_one_line_and_exit_2(capsys, monkeypatch):
    monkeypatch.setenv("NORMVERIFY_PROFILE", "bogus")
    assert cli.main(["run", "--kernel", "torch"]) == 2
    err = capsys.readouterr().err
    assert "unknown Hypothesis profile 'bogus'" in err and err.count("\n") == 1


@pytest.mark.parametrize("argv", [["--kernel", "torch", "-n", "many"], ["--kernel", "torch", "--profile", "slow"],
                                  ["--kind", "layernorm"]])
def test_malformed_options_are_argparse_errors(capsys, argv):
    with pytest.raises(SystemExit) as stopped:
        cli.main(["run", *argv])
    assert stopped.value.code == 2 and "Traceback" not in capsys.readouterr().err


def test_pytest_command_carries_the_request(tmp_path):
    request = runner.RunRequest(specs=["torch,triton"], json_path=tmp_path / "r.json", kind="rmsnorm",
                                claims=["rms.*"], profile="ci", workers="3", timeout=5)
    command = runner.pytest_command(request)
    text = " ".join(command)
    assert f"{runner.SUITE} -p properties.run.results --json {tmp_path / 'r.json'}" in text
    for words in ("--kernel torch --kernel triton", "--kind rmsnorm", "--claims rms.*", "--hypothesis-profile ci",
                  "-n 3", "--timeout 50"):
        assert words in text
    one_process = runner.pytest_command(runner.RunRequest(specs=["torch"], json_path=tmp_path / "r.json",
                                                          workers="0"))
    assert "-n" not in one_process and "--hypothesis-profile" not in one_process and "--no-shrink" not in one_process
    unshrunk = runner.pytest_command(runner.RunRequest(specs=["torch"], json_path=tmp_path / "r.json", shrink=False))
    assert "--no-shrink" in unshrunk
    assert cli.build_parser().parse_args(["run", "--kernel", "torch", "--no-shrink"]).no_shrink


def result(claim: str, status: str, **fields) -> dict:
    return {"claim": claim, "kernel": "torch:layernorm", "kind": "layernorm", "spec": "torch", "test": f"t::{claim}",
            "status": status, "examples": 20, "worst_ratio": 0.5, "counterexamples": [], "message": "",
            "duration_s": 1.0, **fields}


FAILED = result("ln.jacobian", "failed", worst_ratio=288.0,
                message="2 distinct failures\n  AssertionError: dx: expected 1.2e-05, got 1.2e-03\n  KernelFault: NaN",
                counterexamples=[{"text": "x: float16 (1, 2) = [[1.5, -0.29]]\nweight = None\neps = 1e-05",
                                  "message": "AssertionError: dx: expected 1.2e-05, got 1.2e-03", "file": "ce.pt",
                                  "replay": "normverify replay ce.pt", "rerun": "pytest t::ln.jacobian"},
                                 {"text": "x: float16 (1, 1) = [[0.]]\nweight = None\neps = 1e-12",
                                  "message": "KernelFault: NaN", "file": "ce2.pt",
                                  "replay": "normverify replay ce2.pt", "rerun": "pytest t::ln.jacobian"}])
SKIPPED = result("ln.spectral_norm", "skipped", examples=0, worst_ratio=None, message="no backward: autograd raised")
DOCUMENT = {"schema": "normverify.results/1", "complete": True, "environment": {}, "progress": {"done": 4, "total": 4},
            "kernels": [], "results": [result("ln.forward", "passed"), FAILED, SKIPPED, SKIPPED], "errors": []}


PASSING = {**DOCUMENT, "results": [result("ln.forward", "passed")]}


@pytest.fixture
def finish_with(monkeypatch):
    """Replace runner.run by a run that ends with the given document, written where asked."""

    def finish(document: dict) -> None:
        def run(request, on_progress=None):
            request.json_path.parent.mkdir(parents=True, exist_ok=True)
            request.json_path.write_text(json.dumps(document))
            if on_progress:
                on_progress(parse(document))
            return runner.RunOutcome(parse(document), 0, request.log_path, seconds=3.0)

        monkeypatch.setattr(runner, "run", run)

    monkeypatch.setenv("COLUMNS", "200")
    return finish


@pytest.fixture
def finished_run(finish_with):
    finish_with(DOCUMENT)


def test_summary_table_failure_lines_and_exit_1(finished_run, capsys, tmp_path):
    assert cli.main(["run", "--kernel", "torch", "--json", str(tmp_path / "r.json")]) == 1
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "ln.jacobian" in line and "│" in line)
    assert "failed" in row and "288" in row and "20" in row
    assert "FAILED ln.jacobian torch:layernorm: 2 distinct failures" in out
    failures = out[out.index("FAILED ln.jacobian"):].splitlines()[1:9]
    assert failures == ["  failure 1: AssertionError: dx: expected 1.2e-05, got 1.2e-03",
                        "    x: float16 (1, 2) = [[1.5, -0.29]]", "    weight = None", "    eps = 1e-05",
                        "    replay: normverify replay ce.pt",
                        "  failure 2: KernelFault: NaN", "    x: float16 (1, 1) = [[0.]]", "    weight = None"]
    assert "replay: normverify replay ce2.pt" in out
    assert "[2/4] failed ln.jacobian torch:layernorm ln.jacobian (20 examples, worst ratio 288, 1.0s)" in out
    assert "1 failed, 1 passed, 2 skipped in 3s" in out
    assert out.count("SKIPPED (2) no backward: autograd raised [claims ln.spectral_norm; kernel torch:layernorm]") == 1
    assert "claim x kernel: 1 checked, 1 skipped for a stated reason, 1 failed" in out


def test_verbose_prints_every_skip(finished_run, capsys, tmp_path):
    cli.main(["run", "--kernel", "torch", "-v", "--json", str(tmp_path / "r.json")])
    assert capsys.readouterr().out.count("SKIPPED ln.spectral_norm torch:layernorm: no backward: autograd raised") == 1


def test_quiet_prints_no_table(finished_run, capsys, tmp_path):
    assert cli.main(["run", "--kernel", "torch", "--quiet", "--json", str(tmp_path / "r.json")]) == 1
    out = capsys.readouterr().out
    assert "│" not in out and "FAILED ln.jacobian" in out and "SKIPPED" not in out


def test_report_gets_the_results(finished_run, monkeypatch, tmp_path):
    import verify.report

    calls = []
    monkeypatch.setattr(verify.report, "write_report",
                        lambda results, out_dir, pdf: calls.append((results, out_dir, pdf)) or out_dir / "report.tex")
    assert cli.main(["run", "--kernel", "torch", "--report", str(tmp_path / "rep")]) == 1
    assert calls == [(parse(DOCUMENT), tmp_path / "rep", False)]
    assert json.loads((tmp_path / "rep" / "results.json").read_text()) == DOCUMENT


def test_a_broken_report_is_one_line_exit_1_and_the_results_stay(finish_with, monkeypatch, capsys, tmp_path):
    import verify.report

    def broken(results, out_dir, pdf):
        raise KeyError("worst_case")

    finish_with(PASSING)
    monkeypatch.setattr(verify.report, "write_report", broken)
    assert cli.main(["run", "--kernel", "torch", "--report", str(tmp_path / "rep")]) == 1
    out = capsys.readouterr().out
    assert "report not written: KeyError: 'worst_case'" in out and "Traceback" not in out
    assert json.loads((tmp_path / "rep" / "results.json").read_text()) == PASSING


def test_all_passed_is_exit_0(finish_with, capsys, tmp_path):
    finish_with(PASSING)
    assert cli.main(["run", "--kernel", "torch", "--json", str(tmp_path / "r.json")]) == 0
    assert "1 passed in 3s" in capsys.readouterr().out
