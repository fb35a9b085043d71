"""The conformance suite against the broken-kernel corpus (tests/corpus): it must catch every bug on the claim
meant to catch it, pass every correct kernel, and every claim it checks must catch at least one bug.

The suite runs ONCE, in one subprocess, over the whole corpus, exactly as a user runs it::

    NORMVERIFY_PROFILE=ci python -m pytest properties --kernel SPEC ... --json OUT -p no:cacheprovider -q -n 2

plus ``--tb=line`` (the verdicts are read from the JSON, and formatting each failure's traceback with its source
took a fifth of the run), ``-p corpus.selection``, which runs each broken kernel on the claims of
its ``expect`` set only (each correct kernel runs every claim of its kind) and skips a claim's tests once one has
caught the kernel (``NORMVERIFY_CORPUS_CAUGHT``), and ``--no-shrink``, which skips
Hypothesis' shrinking (same examples, same verdicts). The tests below read the Results JSON it writes. Under
pytest-xdist the run is shared by the workers (tests/session_once.py).

The worst ratios of this run are not margins (without shrinking, a failing test stops soon after its first
failure): tests/test_corpus_margins.py measures the margins on inputs chosen for each numerical bug.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from corpus import BROKEN, CORPUS, CORRECT, Entry
from session_once import once_per_session

from core.results import worst

ROOT = Path(__file__).resolve().parents[1]
# The suite over the corpus takes ~150 s on an unloaded 2-core machine; this only stops a hung run.
RUN_TIMEOUT_S = 1800

@dataclass
class CorpusRun:
    command: list[str]
    returncode: int
    seconds: float
    output: str
    document: dict

    def kernel_names(self, entry: Entry) -> list[str]:
        return [k["name"] for k in self.document["kernels"] if k.get("spec") == entry.spec]

    def results(self, kernel: str) -> list[dict]:
        return [r for r in self.document["results"] if r["kernel"] == kernel]

    def claims_run(self) -> set[str]:
        return {r["claim"] for r in self.document["results"]}

    def claim_status(self, kernel: str, claim: str) -> str | None:
        """The worst status of the kernel's tests of the claim (a claim with several tests fails if one does)."""
        statuses = [r["status"] for r in self.results(kernel) if r["claim"] == claim]
        return worst(statuses) if statuses else None



def corpus_command(json_path: Path) -> list[str]:
    return [sys.executable, "-m", "pytest", "properties", "-p", "corpus.selection", "--no-shrink",
            *(f"--kernel={entry.spec}" for entry in CORPUS),
            "--json", str(json_path), "-p", "no:cacheprovider", "-q", "-n", "2",
            "--tb=line"]


def _child_environment(directory: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))}
    env["NORMVERIFY_PROFILE"] = "ci"
    caught = directory / "caught"  # corpus.selection: a claim's tests after the one that caught a broken kernel skip
    caught.mkdir(exist_ok=True)
    env["NORMVERIFY_CORPUS_CAUGHT"] = str(caught)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def run_corpus(directory: Path) -> None:
    json_path = directory / "corpus-results.json"
    command = corpus_command(json_path)
    start = time.monotonic()
    proc = subprocess.run(command, cwd=ROOT, env=_child_environment(directory), capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S)
    seconds = time.monotonic() - start
    output = proc.stdout[-20000:] + proc.stderr[-5000:]
    (directory / "corpus-run.json").write_text(json.dumps(
        {"command": command, "returncode": proc.returncode, "seconds": seconds, "output": output}))


def load_corpus_run(directory: Path) -> CorpusRun:
    run = json.loads((directory / "corpus-run.json").read_text())
    json_path = directory / "corpus-results.json"
    document = json.loads(json_path.read_text()) if json_path.exists() else {}
    return CorpusRun(run["command"], run["returncode"], run["seconds"], run["output"], document)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> CorpusRun:
    """The suite's results over the whole corpus, computed once per session (shared by xdist workers)."""
    return load_corpus_run(once_per_session(tmp_path_factory, "normverify-corpus", run_corpus))


def test_the_corpus_run_completes_and_writes_its_results(corpus: CorpusRun, record_property):
    record_property("corpus_run_seconds", round(corpus.seconds, 1))
    print(f"corpus run: {corpus.seconds:.0f} s, exit {corpus.returncode}: {' '.join(corpus.command)}")
    assert corpus.returncode == 1, f"expected exit 1 (failures found), got {corpus.returncode}:\n{corpus.output}"
    assert corpus.document.get("complete") is True, corpus.output
    assert corpus.document["environment"]["profile"] == "ci"


@pytest.mark.parametrize("entry", CORPUS, ids=lambda entry: entry.spec.removeprefix("tests/corpus/"))
def test_every_corpus_kernel_was_loaded(corpus: CorpusRun, entry: Entry):
    assert corpus.kernel_names(entry), f"{entry.spec} is not among the run's kernels"


def _statuses(results: list[dict]) -> str:
    return "; ".join(f"{r['claim']}: {r['status']} ({r['message'].splitlines()[0][:160] if r['message'] else ''})"
                     for r in results) or "no results"


@pytest.mark.parametrize("entry", BROKEN, ids=lambda entry: entry.spec.removeprefix("tests/corpus/"))
def test_broken_kernel_fails_every_claim_meant_to_catch_it(corpus: CorpusRun, entry: Entry):
    """Every claim of ``expect`` ran on the kernel and FAILED (not error, not skipped); or ended in ERROR, for a
    kernel whose fault leaves the claim uncheckable (``entry.status``)."""
    (name,) = corpus.kernel_names(entry)
    statuses = {claim: corpus.claim_status(name, claim) for claim in sorted(entry.expect)}
    missed = {claim: status or "not run" for claim, status in statuses.items() if status != entry.status}
    assert not missed, f"{name}: not caught on {missed}; all results: {_statuses(corpus.results(name))}"


MISSED = tuple(entry for entry in BROKEN if entry.missed_by)


@pytest.mark.parametrize("entry", MISSED, ids=lambda entry: entry.spec.removeprefix("tests/corpus/"))
def test_broken_kernel_passes_the_claims_whose_inputs_miss_it(corpus: CorpusRun, entry: Entry):
    """A bug only a derived-property claim's regime reaches: every test of the claims of ``missed_by`` (``*.forward``)
    ran on the kernel and passed, while the claims of ``expect`` failed it (the test above)."""
    (name,) = corpus.kernel_names(entry)
    statuses = {claim: corpus.claim_status(name, claim) for claim in sorted(entry.missed_by)}
    caught = {claim: status or "not run" for claim, status in statuses.items() if status != "passed"}
    assert not caught, f"{name}: expected to pass {caught}; all results: {_statuses(corpus.results(name))}"


def acceptable_for_a_correct_kernel(result: dict) -> bool:
    if result["status"] == "skipped":
        return bool(result["message"])
    if result["status"] == "xfailed":  # a built-in's declared deviation (properties.run.expectations), with its reason
        return result["message"].startswith("declared deviation of")
    return result["status"] == "passed"


@pytest.mark.parametrize("entry", CORRECT, ids=lambda entry: entry.spec.removeprefix("tests/corpus/"))
def test_correct_kernel_passes_every_claim_of_its_kind(corpus: CorpusRun, entry: Entry):
    """Passed or skipped with a stated reason; and it went through every claim the run checked for its kind (the
    claims of its ``declared_for``, for a twin of another correct kernel with declarations added)."""
    for name in corpus.kernel_names(entry):
        results = corpus.results(name)
        bad = [r for r in results if not acceptable_for_a_correct_kernel(r)]
        assert not bad, f"{name}: {_statuses(bad)}"
        prefix = results[0]["claim"].split(".")[0] if results else None
        of_its_kind = entry.declared_for or {claim for claim in corpus.claims_run() if claim.split(".")[0] == prefix}
        assert of_its_kind <= {r["claim"] for r in results}, f"{name} skipped claims of its kind"


def test_every_claim_the_suite_checks_catches_a_corpus_kernel(corpus: CorpusRun):
    """A claim that fails no broken kernel is an untested property (or the corpus lacks its bug)."""
    broken_names = {name for entry in BROKEN for name in corpus.kernel_names(entry)}
    catching = {r["claim"] for r in corpus.document["results"]
                if r["kernel"] in broken_names and r["status"] == "failed"}
    uncaught = corpus.claims_run() - catching
    assert not uncaught, f"claims that catch no corpus kernel: {sorted(uncaught)}"


def test_the_counterexample_of_an_input_writing_kernel_replays_as_it_failed(corpus: CorpusRun):
    """The saved counterexample holds the inputs as the kernel received them (copied before the call), so the
    replay of a kernel that overwrites its input fails again instead of passing on the overwritten values."""
    from properties.run.counterexamples import replay

    (name,) = corpus.kernel_names(Entry("tests/corpus/fused.py:LN_INPUT_OVERWRITTEN"))
    result = next(r for r in corpus.results(name) if r["claim"] == "ln.inputs_unmodified" and r["counterexamples"])
    [counterexample] = result["counterexamples"]
    assert counterexample["file"], counterexample
    assert replay(Path(counterexample["file"])).outcome == "failed"
