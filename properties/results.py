"""pytest plugin: the results of a conformance run, one record per claim x kernel test, as the Results JSON.

Options: ``--json PATH`` writes the ``normverify.results/1`` document of docs/ARCHITECTURE.md;
``--claims IDS`` (comma-separated ids or globs such as ``ln.*``) keeps only the conformance tests
of those claims.

Where the data comes from: a conformance test is an item with a ``claim`` marker; its kernel is
the :class:`core.registry.Kernel` among its parameters. Around the call phase the plugin calls
``properties.evidence.start()`` and ``take()``: the recorded examples give the example count, the
worst error/bound ratio, the dtypes (``dtype``) and widths (``d``) seen, the worst case and the
plot points. On a failure the Hypothesis notes give the minimal failing example and the
``@reproduce_failure`` blob, ``evidence.last_example()`` the example that
``properties.counterexamples.save`` stores for ``normverify replay``.

Each phase report carries its part of the record in ``report.user_properties`` (which
pytest-xdist serializes), so the controller process assembles the records of every worker the
same way as a plain run. The controller rewrites the JSON atomically (temporary file, then
``os.replace``) after every test, with ``"complete": false`` until the session ends normally:
an interrupted run (Ctrl-C, a worker killed by a crashing kernel) leaves valid JSON holding what
was done, and ``progress`` says how far it got.

Status of a test: the worst of its phases, worst first :data:`core.results.STATUSES`. A failed setup or
teardown is an ``error``; so is a :class:`core.guard.KernelFault` other than a wrong answer
(``KernelFault.status``), because the claim could not be checked.
"""

from __future__ import annotations

import datetime
import fnmatch
import json
import math
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from core.capabilities import discover
from core.errors import UsageError, one_line
from core.files import write_atomically
from core.guard import KernelFault
from core.registry import Kernel, resolve
from core.results import FAILING, worst
from properties import counterexamples, evidence

SCHEMA = "normverify.results/1"
RECORD_KEY = "normverify.result"
MAX_POINTS = 200
MAX_MESSAGE = 1000
NO_KERNEL = "(no kernel)"  # the kernel of a claim test that is not parametrized by one

_examples_key = pytest.StashKey[list]()
_last_key = pytest.StashKey[object]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("normverify", "normverify conformance run")
    group.addoption("--json", dest="normverify_json", default=None, metavar="PATH",
                    help="write the results (docs/ARCHITECTURE.md, 'Results JSON') to PATH, updated after every test")
    group.addoption("--claims", dest="normverify_claims", default=None, metavar="IDS",
                    help="run only the conformance tests of these claims: comma-separated ids or globs (ln.*)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "claim(id): the claim id (proofs.claims) this conformance test checks")
    path = config.getoption("normverify_json")
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(ResultsWriter(config, Path(path)), "normverify-results-writer")


def claim_patterns(text: str | None) -> list[str]:
    """``"ln.*, rms.forward"`` -> ``["ln.*", "rms.forward"]``."""
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def claim_of(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("claim")
    return str(marker.args[0]) if marker and marker.args else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    patterns = claim_patterns(config.getoption("normverify_claims"))
    if not patterns:
        return
    kept, dropped = [], []
    for item in items:
        claim = claim_of(item)
        matches = claim is not None and any(fnmatch.fnmatchcase(claim, p) for p in patterns)
        (kept if matches else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    evidence.start()
    try:
        return (yield)
    finally:
        item.stash[_examples_key] = evidence.take()
        item.stash[_last_key] = evidence.last_example()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    claim = claim_of(item)
    if claim is not None:
        report.user_properties.append((RECORD_KEY, phase_record(item, call, report, claim)))
    return report


# ---------------------------------------------------------------- one phase, in the process that ran it


def kernel_of(item: pytest.Item):
    """The :class:`core.registry.Kernel` the test is parametrized with (None for a test without one)."""
    callspec = getattr(item, "callspec", None)
    candidates = [*(callspec.params.values() if callspec else ()), *getattr(item, "funcargs", {}).values()]
    return next((value for value in candidates if isinstance(value, Kernel)), None)


def phase_record(item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport, claim: str) -> dict:
    """This phase's part of the test's record: plain data only (it may cross from an xdist worker)."""
    kernel = kernel_of(item)
    record: dict = {"claim": claim, "kernel": kernel.name if kernel else NO_KERNEL,
                    "kind": kernel.kind if kernel else None, "spec": kernel.spec if kernel else None,
                    "test": item.nodeid, "when": report.when, "status": phase_status(call, report)}
    record["message"] = phase_message(call, report)
    if report.when == "setup" and kernel is not None:
        record["about_kernel"] = {**kernel.as_json(), "capabilities": capabilities_of(kernel)}
    if report.when == "call":
        record.update(summarize_examples(item.stash.get(_examples_key, [])))
        if record["status"] == "passed" and record["examples"] == record["unchecked"]:
            record["status"] = "unchecked"
            record["message"] = (f"no example could be checked: {record['unchecked']} of {record['examples']} had no "
                                 "finite bound" if record["examples"] else "no example was drawn")
        if record["status"] in FAILING and call.excinfo is not None:
            record["counterexample"] = counterexample(item, call.excinfo.value, claim, kernel)
    return record


def phase_status(call: pytest.CallInfo, report: pytest.TestReport) -> str | None:
    """What this phase says about the test; None for a setup or teardown that went fine."""
    xfail = hasattr(report, "wasxfail")
    if report.skipped:
        return "xfailed" if xfail else "skipped"
    if report.passed:
        if report.when != "call":
            return None
        return "xpassed" if xfail else "passed"
    if report.when != "call" or _test_timed_out(call):
        return "error"
    fault = _kernel_fault(call.excinfo.value) if call.excinfo else None
    return fault.status if fault is not None else "failed"


def _test_timed_out(call: pytest.CallInfo) -> bool:
    """pytest-timeout's backstop stopped the whole test (``Failed: Timeout (>Ns) from pytest-timeout.``): an error."""
    return (call.excinfo is not None and call.excinfo.typename == "Failed"
            and "from pytest-timeout" in str(call.excinfo.value))


def _kernel_fault(error: BaseException):
    for part in _exception_parts(error):
        if isinstance(part, KernelFault):
            return part
    return None


def _exception_parts(error: BaseException) -> list[BaseException]:
    """The exception, its causes, and the members of exception groups (Hypothesis' several distinct failures)."""
    parts, todo = [], [error]
    while todo:
        current = todo.pop(0)
        if current is None or any(current is p for p in parts):
            continue
        parts.append(current)
        todo.extend(getattr(current, "exceptions", ()))
        todo.append(current.__cause__)
    return parts


def phase_message(call: pytest.CallInfo, report: pytest.TestReport) -> str:
    if report.skipped:
        if hasattr(report, "wasxfail"):
            return str(report.wasxfail)
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        return reason.removeprefix("Skipped: ")
    if report.passed:
        return f"xpassed: {report.wasxfail}" if hasattr(report, "wasxfail") else ""
    if call.excinfo is None:
        return str(report.longrepr)[:MAX_MESSAGE]
    error = call.excinfo.value
    prefix = "" if report.when == "call" else f"in {report.when}: "
    members = getattr(error, "exceptions", None)
    if members:
        lines = [f"{len(members)} distinct failures"] + [f"  {one_line(m)}" for m in members]
        return prefix + "\n".join(lines)[:MAX_MESSAGE]
    return prefix + _without_notes(error)[:MAX_MESSAGE]


def _without_notes(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def capabilities_of(kernel) -> dict:
    """``core.capabilities.discover(kernel)`` as JSON (cached per process), or what went wrong."""
    try:
        return discover(kernel).as_json()
    except Exception as error:
        return {"error": f"{type(error).__name__}: {error}"}


def plain(value):
    """JSON-ready data: dtypes by name, tensors and arrays as numbers (small) or a shape, NaN/inf as None."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, (torch.dtype, np.dtype)):
        return str(value).removeprefix("torch.")
    if isinstance(value, (torch.Tensor, np.ndarray, np.generic)):
        size = value.numel() if isinstance(value, torch.Tensor) else value.size
        if size == 1 and value.ndim == 0:
            return plain(value.item())
        return plain(value.tolist()) if size <= 16 else f"{type(value).__name__} of shape {tuple(value.shape)}"
    return str(value)


def summarize_examples(examples: list[dict]) -> dict:
    """Examples run, how many of them were unchecked (a value without a finite bound), worst ratio (None when no
    example has a finite ratio), dtypes, widths, worst case, points."""
    points = [plain(e) for e in examples]
    ratios = [(e["ratio"], i) for i, e in enumerate(examples) if e.get("ratio") is not None]
    worst_index = max(ratios)[1] if ratios else None
    worst_ratio = max(ratios)[0] if ratios else None
    return {
        "examples": len(examples),
        "unchecked": sum(1 for e in examples if e.get("unchecked")),
        "worst_ratio": worst_ratio if worst_ratio is not None and math.isfinite(worst_ratio) else None,
        "dtypes": sorted({str(p["dtype"]) for p in points if p.get("dtype") is not None}),
        "widths": sorted({int(p["d"]) for p in points if isinstance(p.get("d"), (int, float))}),
        "worst_case": points[worst_index] if worst_index is not None else None,
        "points": bounded(points, worst_index),
    }


def bounded(points: list[dict], keep: int | None) -> list[dict]:
    """At most MAX_POINTS of ``points``, evenly spread, always including index ``keep``."""
    if len(points) <= MAX_POINTS:
        return points
    step = len(points) / MAX_POINTS
    chosen = {int(i * step) for i in range(MAX_POINTS - 1)} | ({keep} if keep is not None else set())
    return [points[i] for i in sorted(chosen)]


_REPRODUCE = re.compile(r"@reproduce_failure\([^)]*\)")
_SEED = re.compile(r"@seed\((\d+)\)")


def counterexample(item: pytest.Item, error: BaseException, claim: str, kernel) -> dict:
    """The minimal failing example: its inputs, Hypothesis' report of it (with the reproduce blob and seed), the
    saved file with its ``normverify replay`` command, and the pytest command that reruns the test."""
    notes = [note.strip() for part in _exception_parts(error) for note in getattr(part, "__notes__", ())]
    blob = next((m.group(0) for n in notes if (m := _REPRODUCE.search(n))), None)
    seed = next((int(m.group(1)) for n in notes if (m := _SEED.search(n))), None)
    hypothesis_text = "\n".join(n for n in notes if not _REPRODUCE.search(n) and not _SEED.search(n))
    last = item.stash.get(_last_key, None)
    saved, save_problem = save_counterexample(item, claim, kernel, last)
    rerun = rerun_command(item)
    return {"text": describe_example(last) or hypothesis_text or _without_notes(error)[:MAX_MESSAGE],
            "file": saved, "replay": counterexamples.replay_command(Path(saved)) if saved else rerun, "rerun": rerun,
            "hypothesis": hypothesis_text, "reproduce": blob, "seed": seed,
            **({"save_problem": save_problem} if save_problem else {})}


def describe_example(last) -> str:
    """The inputs of the last example run (the minimal failing one, after a failure), compactly."""
    if last is None:
        return ""
    return counterexamples.describe(last[2])


def save_counterexample(item: pytest.Item, claim: str, kernel, last) -> tuple[str | None, str | None]:
    """(file, None) when ``properties.counterexamples.save`` stored the last example, else (None, why not).

    Files go to ``counterexamples/`` next to the ``--json`` file; without ``--json`` nothing is saved.
    """
    path = item.config.getoption("normverify_json")
    if last is None or kernel is None or not path:
        return None, None
    check, _, example = last
    try:
        saved = counterexamples.save(claim=claim, check=check, kernel=kernel, example=example,
                                     directory=Path(path).resolve().parent / "counterexamples")
    except Exception as error:
        return None, f"not saved: {type(error).__name__}: {error}"
    return str(saved), None


def rerun_command(item: pytest.Item) -> str:
    """A pytest command that reruns exactly this test (deterministic in the derandomized ci profile)."""
    config = item.config
    node = f"{item.path}::{item.nodeid.split('::', 1)[1]}" if "::" in item.nodeid else str(item.path)
    words = [sys.executable, "-m", "pytest", node, "-p", "properties.results"]
    for spec in config.getoption("--kernel", None) or []:
        words += ["--kernel", spec]
    if config.getoption("--kind", None):
        words += ["--kind", config.getoption("--kind")]
    profile = getattr(config, "_normverify_profile", None)
    if profile:
        words += ["--hypothesis-profile", profile]
    return shlex.join(words)


# ---------------------------------------------------------------- the document, in the controller


def environment(config: pytest.Config) -> dict:
    """Versions, device, Hypothesis profile, the tolerances' error bound, the suite's git commit and the date (UTC)."""
    import hypothesis
    import torch

    import core
    from properties import tolerance  # the run's bound model (pytest --bound), set at configure

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    if torch.cuda.is_available():
        device = f"cuda ({torch.cuda.get_device_name(0)})"
    else:
        device = f"cpu ({platform.processor() or platform.machine()})"
    profile = getattr(config, "_normverify_profile", None) or config.getoption("hypothesis_profile", None)
    return {"normverify": core.__version__, "python": platform.python_version(), "torch": torch.__version__,
            "triton": triton_version, "hypothesis": hypothesis.__version__, "device": device,
            "profile": profile, "bound": tolerance.bound_in_use(), "commit": suite_commit(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def suite_commit() -> str | None:
    """``git describe --always --dirty`` of the checkout normverify runs from (None when not a checkout)."""
    try:
        proc = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"],
                              cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout.strip() or None


class ResultsWriter:
    """Assembles the records from the phase reports (of this process or of xdist workers) and writes the JSON."""

    def __init__(self, config: pytest.Config, path: Path) -> None:
        self.config = config
        self.path = path
        self.environment: dict = {}
        self.kernels: list[dict] = []
        self.results: list[dict] = []
        self.errors: list[dict] = []
        self.pending: dict[str, list[dict]] = {}
        self.durations: dict[str, float] = {}
        self.done = 0
        self.total: int | None = None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.environment = environment(self.config)
        self.kernels = self._kernels()
        self.write(complete=False)

    def _kernels(self) -> list[dict]:
        specs = [s for given in self.config.getoption("--kernel", None) or [] for s in given.split(",") if s]
        kernels = []
        for spec in specs:
            try:
                found = resolve(spec, self.config.getoption("--kind", None))
            except UsageError:
                continue
            kernels += [{**k.as_json(), "spec": k.spec or spec, "capabilities": None} for k in found]
        return kernels

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if session.items:  # under pytest-xdist the controller collects nothing; its workers report below
            self.total = len(session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids: list[str]) -> None:
        self.total = len(ids)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.errors.append({"test": report.nodeid, "message": str(report.longrepr)[-MAX_MESSAGE:]})
            self.write(complete=False)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        nodeid = report.nodeid
        self.durations[nodeid] = self.durations.get(nodeid, 0.0) + (report.duration or 0.0)
        parts = [value for name, value in report.user_properties if name == RECORD_KEY]
        self.pending.setdefault(nodeid, []).extend(parts)
        if report.when not in ("teardown", "???"):
            return
        self.done += 1
        parts = self.pending.pop(nodeid)
        duration = self.durations.pop(nodeid)
        if report.when == "???":  # pytest-xdist: the worker died while running this test
            message = f"{report.longrepr} (did the kernel crash the process?)"
            if parts:
                parts.append({"status": "error", "message": message})
            else:
                self.errors.append({"test": nodeid, "message": message})
        if parts:
            self.results.append(self._record(nodeid, parts, duration))
        self.write(complete=False)

    def _record(self, nodeid: str, parts: list[dict], duration: float) -> dict:
        first = parts[0]
        for part in parts:
            if "about_kernel" in part:
                self._note_kernel(part["about_kernel"])
        call = next((p for p in parts if p.get("when") == "call"), {})
        statuses = [p["status"] for p in parts if p.get("status")]
        return {
            "claim": first.get("claim"), "kernel": first.get("kernel"), "kind": first.get("kind"),
            "spec": first.get("spec"), "test": nodeid, "status": worst(statuses) if statuses else "error",
            "examples": call.get("examples", 0), "unchecked": call.get("unchecked", 0),
            "worst_ratio": call.get("worst_ratio"),
            "dtypes": call.get("dtypes", []), "widths": call.get("widths", []),
            "worst_case": call.get("worst_case"), "points": call.get("points", []),
            "counterexample": call.get("counterexample"),
            "message": "\n".join(p["message"] for p in parts if p.get("message")),
            "duration_s": round(duration, 3),
        }

    def _note_kernel(self, about: dict) -> None:
        """Fill in the capabilities of a kernel the run was asked for, or add one it was not (a test's own)."""
        known = next((k for k in self.kernels if k["name"] == about["name"]), None)
        if known is None:
            self.kernels.append(about)
        elif known["capabilities"] is None:
            known["capabilities"] = about["capabilities"]

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        normal = exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED)
        self.write(complete=bool(normal) and not self.pending)

    def document(self, complete: bool) -> dict:
        return {"schema": SCHEMA, "complete": complete, "environment": self.environment,
                "progress": {"done": self.done, "total": self.total},
                "kernels": self.kernels, "results": self.results, "errors": self.errors}

    def write(self, complete: bool) -> None:
        write_atomically(self.path, json.dumps(self.document(complete), allow_nan=False) + "\n")
