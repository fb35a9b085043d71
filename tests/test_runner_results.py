"""properties.run.results: the records of a run, in one process and under pytest-xdist, and after an interruption.

The plugin is exercised on a small property-style suite written to a temporary folder (its own
kernels, claims and failures), run by pytest in a subprocess with ``-p properties.run.results``.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SUITE = '''
import os
import threading

import pytest
import torch
from hypothesis import given, settings, strategies as st

from properties import evidence
from core import guard
from core.registry import Kernel


def layernorm(x, weight, bias, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def wide_rows_off(x, weight, bias, eps):
    """Right for d < 10, off by 1e-3 from d = 10 on: the minimal counterexample is d = 10."""
    return layernorm(x, weight, bias, eps) + (1e-3 if x.shape[-1] >= 10 else 0.0)


def nan_rows(x, weight, bias, eps):
    return layernorm(x, weight, bias, eps) * float("nan")


def raises(x, weight, bias, eps):
    raise RuntimeError("out of shared memory")


KERNELS = [Kernel("mine:good", "layernorm", layernorm, spec="mine", description="F.layer_norm"),
           Kernel("mine:wide", "layernorm", wide_rows_off, spec="mine"),
           Kernel("mine:nan", "layernorm", nan_rows, spec="mine"),
           Kernel("mine:raises", "layernorm", raises, spec="mine")]


def check_forward(kernel, d):
    x = torch.linspace(-1.0, 1.0, 3 * d).reshape(3, d)
    y = guard.call(kernel, x, None, None, 1e-5, like=x)
    error = float((y - layernorm(x, None, None, 1e-5)).abs().max())
    ratio = error / 1e-5
    evidence.record(ratio=ratio, d=d, dtype=torch.float32, kappa=float(d))
    assert ratio <= 1, f"error {error:.3g} exceeds the bound 1e-5 at d={d}"


@pytest.mark.claim("ln.forward")
@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
@settings(max_examples=25, derandomize=True, database=None, print_blob=True, deadline=None)
@given(d=st.integers(1, 64))
def test_forward(kernel, d):
    evidence.check(check_forward, kernel, {"d": d})


@pytest.mark.claim("ln.affine")
@pytest.mark.parametrize("kernel", KERNELS[:1], ids=lambda k: k.name)
@pytest.mark.timeout(1)
def test_hangs_outside_the_guard(kernel):
    threading.Event().wait(30)


@pytest.mark.claim("ln.jacobian")
@pytest.mark.parametrize("kernel", KERNELS[:1], ids=lambda k: k.name)
def test_needs_a_backward(kernel):
    pytest.skip("kernel mine:good has no backward")


@pytest.mark.claim("ln.seed_example")
@pytest.mark.parametrize("kernel", KERNELS[:1], ids=lambda k: k.name)
@pytest.mark.xfail(reason="eps = 0 is outside the claim's conditions")
def test_expected_failure(kernel):
    assert False


@pytest.fixture
def broken_fixture():
    raise OSError("cannot open the probe input")


@pytest.mark.claim("rms.forward")
@pytest.mark.parametrize("kernel", KERNELS[:1], ids=lambda k: k.name)
def test_setup_error(kernel, broken_fixture):
    pass


def test_not_a_conformance_test():
    pass


@pytest.mark.claim("ln.variance_insensitivity")
@pytest.mark.parametrize("kernel", KERNELS[:1], ids=lambda k: k.name)
def test_without_a_finite_bound(kernel):
    from properties import outcome

    outcome.conclude(outcome.compare(5.0, 0.0, float("inf"), "value"))


def check_two_ways(kernel, d):
    evidence.record(ratio=0.0, d=d)
    if d == 1:
        raise ValueError("d = 1 has no spread")
    assert d < 5, f"d = {d} is too wide"


@pytest.mark.claim("rms.affine")
@pytest.mark.parametrize("kernel", KERNELS[:1], ids=lambda k: k.name)
@settings(max_examples=25, derandomize=True, database=None, print_blob=True, deadline=None)
@given(d=st.integers(1, 64))
def test_two_distinct_failures(kernel, d):
    evidence.check(check_two_ways, kernel, {"d": d})


@pytest.mark.claim("dropout.values")
@pytest.mark.parametrize("kernel", KERNELS[:1], ids=lambda k: k.name)
def test_zz_crash(kernel):
    """Last in the file: dies like a segfaulting kernel when the environment says so."""
    if os.environ.get("SUITE_CRASH") == "exit":
        os._exit(139)
'''


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("suite")
    (folder / "test_suite.py").write_text(textwrap.dedent(SUITE))
    return folder


def run_suite(folder: Path, out: Path, *args: str, crash: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "SUITE_CRASH": crash, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "pytest", str(folder / "test_suite.py"), "-p", "properties.run.results",
               "--json", str(out), "-q", "-p", "no:cacheprovider", "--rootdir", str(folder), *args]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def by_test(document: dict) -> dict[str, dict]:
    return {r["test"].split("::", 1)[1]: r for r in document["results"]}


@pytest.fixture(scope="module")
def plain_run(suite, tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path_factory.mktemp("plain") / "results.json"
    proc = run_suite(suite, out)
    return proc, json.loads(out.read_text())


def test_a_finished_run_is_complete_with_its_environment(plain_run):
    proc, document = plain_run
    assert proc.returncode == 1, proc.stdout[-2000:]
    assert document["schema"] == "normverify.results/1" and document["complete"] is True
    assert set(document["environment"]) >= {"normverify", "python", "torch", "triton", "hypothesis", "device",
                                             "profile", "commit", "date"}
    assert document["progress"] == {"done": 12, "total": 12, "running": []}
    kernels = {k["name"]: k for k in document["kernels"]}
    assert kernels["mine:good"]["capabilities"]["dtypes"][0] == "float32"
    assert kernels["mine:good"]["description"] == "F.layer_norm"


def test_each_outcome_gets_its_status(plain_run):
    results = by_test(plain_run[1])
    assert "test_not_a_conformance_test" not in results
    assert {name: r["status"] for name, r in results.items()} == {
        "test_forward[mine:good]": "passed",
        "test_forward[mine:wide]": "failed",
        "test_forward[mine:nan]": "failed",
        "test_forward[mine:raises]": "error",
        "test_hangs_outside_the_guard[mine:good]": "error",
        "test_needs_a_backward[mine:good]": "skipped",
        "test_expected_failure[mine:good]": "xfailed",
        "test_setup_error[mine:good]": "error",
        "test_without_a_finite_bound[mine:good]": "unchecked",
        "test_two_distinct_failures[mine:good]": "failed",
        "test_zz_crash[mine:good]": "unchecked",
    }
    unbounded = results["test_without_a_finite_bound[mine:good]"]
    assert unbounded["examples"] == unbounded["unchecked"] == 1 and unbounded["points"][0]["unchecked"] == 1
    assert unbounded["message"] == "no example could be checked: 1 of 1 had no finite bound"
    assert results["test_zz_crash[mine:good]"]["message"] == "no example was drawn"
    assert results["test_needs_a_backward[mine:good]"]["message"] == "kernel mine:good has no backward"
    assert results["test_expected_failure[mine:good]"]["message"] == "eps = 0 is outside the claim's conditions"
    assert results["test_setup_error[mine:good]"]["message"].startswith("in setup: OSError: cannot open")
    assert results["test_forward[mine:raises]"]["message"] == (
        "KernelFault: kernel mine:raises raised RuntimeError: out of shared memory")
    assert "NaN/inf values" in results["test_forward[mine:nan]"]["message"]
    assert results["test_hangs_outside_the_guard[mine:good]"]["message"] == (
        "Failed: Timeout (>1.0s) from pytest-timeout.")


def test_a_passing_property_reports_its_evidence(plain_run):
    good = by_test(plain_run[1])["test_forward[mine:good]"]
    assert good["claim"] == "ln.forward" and good["kernel"] == "mine:good" and good["kind"] == "layernorm"
    assert good["examples"] == len(good["points"]) >= 20
    assert 0 <= good["worst_ratio"] <= 1
    assert good["worst_case"]["ratio"] == good["worst_ratio"]
    assert good["dtypes"] == ["float32"] and 1 in good["widths"] and max(good["widths"]) <= 64
    assert good["counterexamples"] == [] and good["duration_s"] > 0


def test_a_failure_carries_its_minimal_counterexample_saved_and_rerunnable(plain_run, suite, tmp_path):
    wide = by_test(plain_run[1])["test_forward[mine:wide]"]
    assert wide["message"].startswith("AssertionError: error 0.001 exceeds the bound 1e-5 at d=10")
    assert wide["worst_ratio"] > 50
    [example] = wide["counterexamples"]
    assert example["text"] == "d = 10" and "d=10" in example["hypothesis"]
    assert example["reproduce"].startswith("@reproduce_failure(")
    assert Path(example["file"]).parent.name == "counterexamples" and Path(example["file"]).is_file()
    assert example["replay"] == f"normverify replay {example['file']}"
    assert shlex.split(example["rerun"])[2:4] == ["pytest", f"{suite}/test_suite.py::test_forward[mine:wide]"]
    rerun = subprocess.run(example["rerun"] + " -p no:cacheprovider", shell=True, cwd=suite, capture_output=True,
                           text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert rerun.returncode == 1 and "d=10" in rerun.stdout


def test_without_shrinking_the_verdicts_are_the_same_and_the_failing_example_replays(plain_run, suite, tmp_path):
    """--no-shrink: every test's status as with shrinking; a failure reports and saves the example that failed (d
    beyond the minimal 10 that shrinking finds: 59 in this derandomized draw), its rerun command keeps --no-shrink
    and fails on it again."""
    out = tmp_path / "results.json"
    proc = run_suite(suite, out, "--no-shrink")
    document = json.loads(out.read_text())
    assert proc.returncode == 1 and document["complete"] is True and document["environment"]["shrink"] is False
    assert plain_run[1]["environment"]["shrink"] is True
    assert {name: r["status"] for name, r in by_test(document).items()} == {
        name: r["status"] for name, r in by_test(plain_run[1]).items()}
    [example] = by_test(document)["test_forward[mine:wide]"]["counterexamples"]
    d = int(example["text"].removeprefix("d = "))
    assert d > 10 and Path(example["file"]).is_file() and example["rerun"].endswith("--no-shrink")
    rerun = subprocess.run(example["rerun"] + " -p no:cacheprovider", shell=True, cwd=suite, capture_output=True,
                           text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert rerun.returncode == 1 and f"d={d}" in rerun.stdout


def test_xdist_workers_give_the_same_records_and_a_crashed_worker_is_an_error(plain_run, suite, tmp_path):
    out = tmp_path / "results.json"
    # The crashing test runs last, so no replacement worker is needed (it would only cost a start-up).
    proc = run_suite(suite, out, "-n", "1", "--max-worker-restart", "0", "--claims", "ln.*,dropout.values",
                     crash="exit")
    document = json.loads(out.read_text())
    assert proc.returncode == 1 and document["complete"] is True
    expected = {name: r["status"] for name, r in by_test(plain_run[1]).items() if not r["claim"].startswith("rms.")}
    expected["test_zz_crash[mine:good]"] = "error"
    assert {name: r["status"] for name, r in by_test(document).items()} == expected
    assert document["progress"] == {"done": 9, "total": 9, "running": []}
    assert "crashed" in by_test(document)["test_zz_crash[mine:good]"]["message"]
    assert all(k["capabilities"]["device"] == "cpu" for k in document["kernels"])  # probed in the worker
    assert by_test(document)["test_forward[mine:wide]"]["counterexamples"][0]["text"] == "d = 10"


def test_a_run_killed_by_a_crash_leaves_valid_incomplete_json(suite, tmp_path):
    """The process dies mid-run (a segfaulting kernel, without xdist); Ctrl-C: tests/test_runner.py."""
    out = tmp_path / "results.json"
    proc = run_suite(suite, out, "--claims", "ln.seed_example,dropout.values", "--tb=no", crash="exit")
    assert proc.returncode == 139
    document = json.loads(out.read_text())
    assert document["complete"] is False
    assert [r["status"] for r in document["results"]] == ["xfailed"]
    assert document["progress"]["running"] == ["test_suite.py::test_zz_crash[mine:good]"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["results.json"]


def test_every_distinct_failure_gets_its_own_line_inputs_and_saved_counterexample(plain_run):
    both = by_test(plain_run[1])["test_two_distinct_failures[mine:good]"]
    assert both["message"].splitlines()[0] == "2 distinct failures"
    found = {example["text"]: example for example in both["counterexamples"]}
    assert set(found) == {"d = 1", "d = 5"}
    assert found["d = 1"]["message"] == "ValueError: d = 1 has no spread"
    assert found["d = 5"]["message"] == "AssertionError: d = 5 is too wide"
    files = {example["file"] for example in found.values()}
    assert len(files) == 2 and all(Path(f).is_file() for f in files)


def test_a_plain_pytest_failure_ends_with_its_replay_commands(plain_run):
    proc, document = plain_run
    for example in by_test(document)["test_two_distinct_failures[mine:good]"]["counterexamples"]:
        assert example["replay"] in proc.stdout


def test_a_real_run_validates_against_the_schema_file_and_the_models(plain_run):
    import jsonschema

    from core.results import SCHEMA_FILE, Document

    document = plain_run[1]
    jsonschema.validate(document, json.loads(SCHEMA_FILE.read_text()))
    assert Document.model_validate(document).as_json() == document


@pytest.mark.parametrize(("dist", "most"), [("no", None), ("load", 2)])
def test_the_xdist_controller_rewrites_the_file_at_most_once_a_second(tmp_path, monkeypatch, dist, most):
    """A process that runs its tests rewrites the results after every test (a kernel that ends the process must find
    its test named there); the pytest-xdist controller, which runs no kernel, at most every
    XDIST_WRITE_INTERVAL_S and at the end (rewriting a 16 MB document twice per test cost the corpus run 74 s)."""
    from types import SimpleNamespace

    from properties.run import writer

    written = []
    monkeypatch.setattr(writer, "write_atomically", lambda path, data: written.append(data))
    results = writer.ResultsWriter(SimpleNamespace(option=SimpleNamespace(dist=dist)), tmp_path / "r.json")
    for number in range(50):
        nodeid = f"t.py::test_{number}"
        results.pytest_runtest_logstart(nodeid, None)
        results.pytest_runtest_logreport(SimpleNamespace(nodeid=nodeid, duration=0.0, user_properties=[],
                                                         when="teardown", longrepr=None))
    results.pytest_sessionfinish(None, pytest.ExitCode.OK)
    assert json.loads(written[-1])["complete"] is True and json.loads(written[-1])["progress"]["done"] == 50
    assert len(written) <= most if most else len(written) == 101
