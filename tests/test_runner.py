"""normverify run end to end on misbehaving kernels, and the runner's verdict arithmetic.

Each misbehaving kernel misbehaves on every call, the capability probes included: it must still
reach its claim (tried in float32) and be reported there, and the run must go on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from core.results import SCHEMA, parse
from verify import runner

ROOT = Path(__file__).resolve().parents[1]

MISBEHAVING = '''
import threading

import torch


def correct(x, weight, bias, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def raises(x, weight, bias, eps):
    raise RuntimeError("CUDA error: an illegal memory access was encountered")


def hangs(x, weight, bias, eps):
    threading.Event().wait()


def nan(x, weight, bias, eps):
    return correct(x, weight, bias, eps) * float("nan")


def wrong_shape(x, weight, bias, eps):
    return correct(x, weight, bias, eps).reshape(-1)


def wrong_dtype(x, weight, bias, eps):
    return correct(x, weight, bias, eps).double()
'''

# a claim whose tests all call the forward on finite float32/16-bit inputs (its 7 tests: a run in ~25 s)
CLAIM = "ln.affine"
EXPECTED = {
    "raises": ("error", "raised RuntimeError: CUDA error: an illegal memory access was encountered"),
    "hangs": ("error", "did not return within 1 s"),
    "nan": ("failed", "NaN/inf values in the output for finite inputs"),
    "wrong_shape": ("error", "returned shape"),
    "wrong_dtype": ("error", "returned torch.float64"),
    "correct": ("passed", ""),
}


@pytest.fixture(scope="module")
def misbehaving_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    folder = tmp_path_factory.mktemp("misbehaving")
    kernels = folder / "kernels.py"
    kernels.write_text(textwrap.dedent(MISBEHAVING))
    out = folder / "results.json"
    command = [sys.executable, "-m", "verify", "run", "--kind", "layernorm", "--claims", CLAIM,
               "--profile", "ci", "-n", "0", "--timeout", "1", "--json", str(out), "--quiet"]
    for name in EXPECTED:
        command += ["--kernel", f"{kernels}:{name}"]
    proc = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "200"})
    return proc, json.loads(out.read_text())


def test_each_misbehaviour_is_reported_on_its_claim_and_the_run_goes_on(misbehaving_run):
    proc, document = misbehaving_run
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert document["complete"] is True
    assert {r["kernel"].rsplit(":", 1)[1] for r in document["results"]} == set(EXPECTED)
    tests = {result["test"].split("[")[0] for result in document["results"]}
    for result in document["results"]:  # every test of the claim, on each kernel, to the kernel's verdict
        status, words = EXPECTED[result["kernel"].rsplit(":", 1)[1]]
        assert result["status"] == status and words in result["message"], result
        assert result["claim"] == CLAIM
    for name in EXPECTED:
        assert len([r for r in document["results"] if r["kernel"].endswith(f":{name}")]) == len(
            document["results"]) // len(EXPECTED) >= len(tests) >= 2, name


def test_quiet_output_is_one_line_per_failure_with_its_replay_and_the_totals(misbehaving_run):
    proc, document = misbehaving_run
    lines = proc.stdout.splitlines()
    failing = [r for r in document["results"] if r["status"] in ("failed", "error")]
    passing = sum(r["status"] == "passed" for r in document["results"])
    failures = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]
    assert len(failures) == len(failing) >= 5 and all("KernelFault: kernel " in line for line in failures)
    assert sum("replay: " in line for line in lines) == len(failing)
    assert any(line.startswith(f"{passing} passed") or f", {passing} passed" in line for line in lines)
    assert "Traceback" not in proc.stdout + proc.stderr


def test_ctrl_c_stops_the_run_with_a_partial_summary_and_incomplete_json(tmp_path):
    out = tmp_path / "results.json"
    command = [sys.executable, "-m", "verify", "run", "--kernel", "torch", "--kind", "layernorm", "--profile", "ci",
               "-n", "0", "--json", str(out)]
    # as from a terminal: SIGINT's default disposition (this test's own process may ignore it, and an ignored signal
    # stays ignored across exec) and none of this pytest's worker variables
    terminal = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))}
    run = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True, env=terminal,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300
    started = time.monotonic()
    while not getattr(runner.read_results(out), "results", None) and time.monotonic() < deadline:
        time.sleep(0.2)
    sent_after = time.monotonic() - started
    os.killpg(run.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
    stdout, _ = run.communicate(timeout=300)
    document = json.loads(out.read_text())
    assert run.returncode == 130, f"SIGINT sent {sent_after:.1f} s after the start\n{stdout}"
    assert document["complete"] is False and 0 < document["progress"]["done"] < document["progress"]["total"], (
        f"SIGINT sent {sent_after:.1f} s after the start; progress {document['progress']}\n{stdout[-3000:]}")
    assert "(interrupted)" in stdout and "Traceback" not in stdout


def outcome(*statuses: str, complete: bool = True, errors=(), interrupted: bool = False) -> runner.RunOutcome:
    results = [{"claim": "ln.forward", "kernel": f"k{i}", "status": s} for i, s in enumerate(statuses)]
    document = parse({"schema": SCHEMA, "complete": complete, "results": results, "errors": list(errors)})
    return runner.RunOutcome(document, 0, Path("log"), interrupted=interrupted)


@pytest.mark.parametrize(("case", "code"), [
    (outcome("passed", "skipped", "xfailed", "xpassed"), 0),
    (outcome("passed", "failed"), 1),
    (outcome("passed", "error"), 1),
    (outcome("passed", complete=False), 1),
    (outcome("passed", errors=[{"test": "properties/test_x.py", "message": "ImportError"}]), 1),
    (outcome("passed", complete=False, interrupted=True), 130),
    (runner.RunOutcome(None, 3, Path("log")), 1),
])
def test_exit_code(case, code):
    assert runner.exit_code(case) == code


def test_summary_rows_join_the_tests_of_a_claim_and_kernel():
    document = parse({"schema": SCHEMA, "results": [
        {"claim": "ln.special_inputs", "kernel": "k", "status": "passed", "examples": 3, "worst_ratio": 0.5},
        {"claim": "ln.special_inputs", "kernel": "k", "status": "failed", "examples": 4, "worst_ratio": 7.0},
        {"claim": "ln.special_inputs", "kernel": "j", "status": "skipped", "examples": 0, "worst_ratio": None},
    ]})
    rows = runner.summary_rows(document)
    assert [(r.kernel, r.status, r.examples, r.worst_ratio) for r in rows] == [
        ("k", "failed", 7, 7.0), ("j", "skipped", 0, None)]


def test_summary_rows_group_claims_by_family_in_proofs_order():
    claims = ["dropout.values", "ln.forward", "rms.forward", "ln.jacobian", "rms.jacobian"]
    document = parse({"schema": SCHEMA, "results": [{"claim": c, "status": "passed"} for c in claims]})
    assert [row.claim for row in runner.summary_rows(document)] == [
        "ln.jacobian", "ln.forward", "rms.jacobian", "rms.forward", "dropout.values"]


def test_a_process_ended_by_a_kernel_names_the_kernel_and_test_without_workers(tmp_path):
    """-n 0: the pytest process itself dies (os._exit, a segfault); the tests it was running name the kernel."""
    path = tmp_path / "results.json"
    running = "properties/test_forward.py::test_forward[mine.py:crashes]"
    document = parse({"schema": SCHEMA, "progress": {"done": 3, "total": 9, "running": [running]}})
    runner.name_the_crash(document, -signal.SIGSEGV, path)
    [error] = runner.read_results(path).errors
    assert error.test == running
    assert error.message == ("the test process ended (killed by SIGSEGV) while running this test: did kernel "
                             "mine.py:crashes crash the process?")


def test_known_deviations_and_skips_files_reach_the_suite(tmp_path):
    """--xfails-file turns a kernel's recorded deviation into xfailed, --skips-file a claim into skipped, both with
    their reasons, and the run then exits 0."""
    kernels = tmp_path / "kernels.py"
    kernels.write_text(textwrap.dedent(MISBEHAVING))
    (tmp_path / "xfails.txt").write_text(f"{CLAIM} *:nan  # returns NaN, recorded as a known deviation\n")
    (tmp_path / "skips.txt").write_text(f"{CLAIM} *:wrong_shape  # flattens its output, not checked here\n")
    out = tmp_path / "results.json"
    command = [sys.executable, "-m", "verify", "run", "--kind", "layernorm", "--claims", CLAIM,
               "--profile", "ci", "-n", "0", "--timeout", "1", "--json", str(out), "--quiet",
               "--kernel", f"{kernels}:nan", "--kernel", f"{kernels}:wrong_shape",
               "--xfails-file", "xfails.txt", "--skips-file", "skips.txt"]
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    statuses = {(r["kernel"].rsplit(":", 1)[1], r["status"]) for r in json.loads(out.read_text())["results"]}
    assert statuses == {("nan", "xfailed"), ("wrong_shape", "skipped")}, proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_probes_before_the_run_keep_its_timeout(tmp_path):
    """A run of only hanging kernels is refused after --timeout seconds per probe, not the guard's default 120 s (a
    hung kernel held every run that named it two minutes before its tests began)."""
    kernels = tmp_path / "kernels.py"
    kernels.write_text(textwrap.dedent(MISBEHAVING))
    request = runner.RunRequest(specs=[f"{kernels}:hangs"], json_path=tmp_path / "r.json", kind="layernorm",
                                timeout=0.5)
    with pytest.raises(runner.UsageError, match=r"did not return within 0\.5 s"):
        runner.check_request(request)
