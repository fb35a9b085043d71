"""The results document of a run, assembled in the controlling process and rewritten as the tests go.

Each test phase's part of a record travels in ``report.user_properties`` (which pytest-xdist serializes), so
the records of every worker are merged here the same way as those of a plain run. The file is replaced
atomically (``core.files.write_atomically``) with ``"complete": false`` until the session ends normally: an
interrupted run (Ctrl-C, a kernel that ends the process) leaves valid JSON holding what was done, and
``progress.running`` names the tests that were under way (the runner names the kernel that ended the process from
it, with or without workers).

When. A process that runs the tests itself (no pytest-xdist) rewrites the file at the start of every test and
after it: a kernel that ends that process must find its test named there. The pytest-xdist controller runs no
kernel (a worker that dies is reported to it, and written at once), so it rewrites the file at most every
``XDIST_WRITE_INTERVAL_S``, and at the end: a document of thousands of results rewritten twice per test cost the
corpus run (2 348 tests, a 16 MB document) 74 s of system time.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from core.files import write_atomically
from core.results import Document, KernelEntry, Progress, Result, RunError, worst
from properties.run.environment import environment, run_kernels
from properties.run.status import MAX_MESSAGE

RECORD_KEY = "normverify.result"
XDIST_WRITE_INTERVAL_S = 1.0


class ResultsWriter:
    """Assembles the records from the phase reports (of this process or of xdist workers) and writes the JSON."""

    def __init__(self, config: pytest.Config, path: Path) -> None:
        self.config = config
        self.path = path
        self.document = Document()
        self.pending: dict[str, list[dict]] = {}
        self.durations: dict[str, float] = {}
        self.running: list[str] = []
        self.result_texts: list[str] = []  # each result serialized once, when it is added (the file is rewritten often)
        xdist_controller = getattr(config.option, "dist", "no") != "no" and not hasattr(config, "workerinput")
        self.interval = XDIST_WRITE_INTERVAL_S if xdist_controller else 0.0
        self.written_at = float("-inf")

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.document = Document(environment=environment(self.config), kernels=self._kernels())
        self.write(complete=False, now=True)

    def _kernels(self) -> list[dict]:
        return [{**k.as_json(), "spec": k.spec or spec, "capabilities": None} for spec, k in run_kernels(self.config)]

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if session.items:  # under pytest-xdist the controller collects nothing; its workers report below
            self.document.progress.total = len(session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids: list[str]) -> None:
        self.document.progress.total = len(ids)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.document.errors.append(RunError(test=report.nodeid, message=str(report.longrepr)[-MAX_MESSAGE:]))
            self.write(complete=False, now=True)

    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        self.running.append(nodeid)
        self.write(complete=False)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        nodeid = report.nodeid
        self.durations[nodeid] = self.durations.get(nodeid, 0.0) + (report.duration or 0.0)
        parts = [value for name, value in report.user_properties if name == RECORD_KEY]
        self.pending.setdefault(nodeid, []).extend(parts)
        if report.when not in ("teardown", "???"):
            return
        self.document.progress.done += 1
        if nodeid in self.running:
            self.running.remove(nodeid)
        parts = self.pending.pop(nodeid)
        duration = self.durations.pop(nodeid)
        if report.when == "???":  # pytest-xdist: the worker died while running this test
            message = f"{report.longrepr} (did the kernel crash the process?)"
            if parts:
                parts.append({"status": "error", "message": message})
            else:
                self.document.errors.append(RunError(test=nodeid, message=message))
        if parts:
            result = self._record(nodeid, parts, duration)
            self.document.results.append(result)
            self.result_texts.append(json.dumps(result.model_dump(mode="json"), allow_nan=False))
        self.write(complete=False, now=report.when == "???")

    def _record(self, nodeid: str, parts: list[dict], duration: float) -> Result:
        first = parts[0]
        for part in parts:
            if "about_kernel" in part:
                self._note_kernel(KernelEntry.model_validate(part["about_kernel"]))
        call = next((p for p in parts if p.get("when") == "call"), {})
        statuses = [p["status"] for p in parts if p.get("status")]
        fields = {key: call[key] for key in ("examples", "unchecked", "worst_ratio", "dtypes", "widths", "coverage",
                                             "worst_case", "points", "diagnosis", "counterexamples", "finding")
                  if key in call}
        return Result.model_validate({
            **{key: first[key] for key in ("claim", "kernel", "kind", "spec", "view") if first.get(key) is not None},
            **fields, "test": nodeid, "status": worst(statuses) if statuses else "error",
            "message": "\n".join(p["message"] for p in parts if p.get("message")),
            "duration_s": round(duration, 3)})

    def _note_kernel(self, about: KernelEntry) -> None:
        """Fill in the capabilities of a kernel the run was asked for, or add one it was not (a test's own)."""
        known = next((k for k in self.document.kernels if k.name == about.name), None)
        if known is None:
            self.document.kernels.append(about)
        elif known.capabilities is None:
            known.capabilities = about.capabilities

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        normal = exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.NO_TESTS_COLLECTED)
        self.write(complete=bool(normal) and not self.pending, now=True)

    def write(self, complete: bool, now: bool = False) -> None:
        """The document as ``Document.dumps`` writes it, with the results already serialized spliced in; in the
        pytest-xdist controller at most every ``interval`` seconds unless ``now`` (see the module docstring)."""
        if not now and time.monotonic() - self.written_at < self.interval:
            return
        self.written_at = time.monotonic()
        self.document.complete = complete
        self.document.progress = Progress(done=self.document.progress.done, total=self.document.progress.total,
                                          running=list(self.running))
        head = self.document.model_copy(update={"results": []}).as_json()
        fields = {key: json.dumps(value, allow_nan=False) for key, value in head.items()}
        fields["results"] = "[" + ", ".join(self.result_texts) + "]"
        write_atomically(self.path, "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in fields.items()) + "}\n")
