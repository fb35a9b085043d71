"""The conformance run behind ``normverify run``: the property suite under pytest, in a child process.

Why a child process: pytest's own output goes to a log file and the terminal shows only our
progress and summary; a kernel that crashes the interpreter (a segfault in a native kernel)
takes down the child, not the command, which still reads the results written so far and exits
with the right code. The child writes the Results JSON (``properties.run.results``) after every
test; the command follows it to show progress.

Everything that can be wrong with the request (a SPEC that does not load, a claim glob that
matches no claim of the kernels' kinds) is found by :func:`check_request` before pytest starts.

Time limits: every kernel call has ``timeout`` seconds (``core.guard``, through
``NORMVERIFY_CALL_TIMEOUT``); each test as a whole has ``TEST_TIMEOUT_FACTOR`` times that
(pytest-timeout, signal method), a backstop for a hang outside the guarded calls.

Exit codes (:func:`exit_code`): 0 every applicable claim passed; 1 a claim failed or errored, the
suite could not be collected, or the run did not complete; 2 bad usage; 130 interrupted.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import properties
from core.errors import UsageError
from core.names import split_specs
from core.registry import Kernel, resolve

if TYPE_CHECKING:  # pydantic: imported when results are read, not to build the command's parser
    from core.results import Document, SummaryRow

SUITE = Path(properties.__file__).resolve().parent
TEST_TIMEOUT_FACTOR = 10
POLL_S = 0.5
REFRESH_S = 10.0  # on_progress is called at least this often while the run goes on (a CI log's heartbeat)
INTERRUPT_GRACE_S = 30.0
_SIGNALS = {int(s) for s in signal.Signals}


@dataclass
class RunRequest:
    """What to run: kernels (SPECs), optionally one kind and some claims (ids or globs), and how."""

    specs: list[str]
    json_path: Path
    kind: str | None = None
    claims: list[str] = field(default_factory=list)
    profile: str | None = None
    bound: str | None = None  # the tolerances' rounding-error bound (pytest --bound); None: the suite's default
    workers: str = "auto"
    timeout: float = 120.0
    skips_file: Path | None = None  # properties/run/expectations.py: claim ids (and kernels) to skip, with reasons
    xfails_file: Path | None = None  # ... and the known deviations to run as expected failures
    shrink: bool = True  # False: failures reported with the examples that failed (pytest --no-shrink)

    @property
    def log_path(self) -> Path:
        return self.json_path.with_suffix(".log")


@dataclass
class RunOutcome:
    """What the run left: the results document (None when pytest wrote none), pytest's exit code, and how it ended."""

    results: Document | None
    returncode: int
    log_path: Path
    interrupted: bool = False
    seconds: float = 0.0


def known_claims() -> list[str] | None:
    """The claim ids of proofs (None while proofs has none to offer)."""
    try:
        from proofs.claims import CLAIMS
    except ImportError:
        return None
    return list(CLAIMS)


def _refuse_when_none_runs(kernels: list[Kernel], timeout: float) -> None:
    """A UsageError (one line) when no kernel of the request runs in any dtype: nothing could be checked. A kernel
    that runs nowhere beside one that runs is not refused: its claims run and end in ``error`` with its fault, and
    the run goes on. The built-ins are known to run; the users' kernels are probed until one runs, each call within
    the run's --timeout (a hung kernel held the command 120 s here before its tests began)."""
    if any(":" not in kernel.spec for kernel in kernels):
        return
    from core.capabilities import unusable

    reasons = []
    for kernel in kernels:
        if not (reason := unusable(kernel, timeout)):
            return
        reasons.append(reason)
    raise UsageError("; ".join(reasons))


def check_request(request: RunRequest) -> list[Kernel]:
    """The kernels of the request; a UsageError (one line) for a SPEC that does not load or claims selecting nothing."""
    if not request.specs:
        raise UsageError("name at least one kernel: --kernel SPEC (normverify list shows the built-ins)")
    kernels = [kernel for spec in split_specs(request.specs) for kernel in resolve(spec, request.kind)]
    if request.timeout <= 0:
        raise UsageError(f"--timeout must be positive, not {request.timeout:g}")
    from properties.run import profiles  # Hypothesis: imported to run, not to build the command's parser

    try:
        profiles.chosen(request.profile)
    except ValueError as error:
        raise UsageError(f"{error} (--profile or NORMVERIFY_PROFILE)") from None
    check_writable(request.json_path, "--json")
    _refuse_when_none_runs(kernels, request.timeout)
    for option, path in (("--skips-file", request.skips_file), ("--xfails-file", request.xfails_file)):
        if path is not None and not path.is_file():
            raise UsageError(f"{option}: no such file {path}")
    claims = known_claims()
    if request.claims and claims is not None:
        prefixes = {family for kernel in kernels for family in kernel.families}
        for pattern in request.claims:
            matching = [c for c in claims if fnmatch.fnmatchcase(c, pattern)]
            if not matching:
                close = difflib.get_close_matches(pattern, claims, n=3)
                hint = f"did you mean {', '.join(close)}?" if close else f"claim ids: {', '.join(claims)}"
                raise UsageError(f"--claims: {pattern!r} matches no claim id; {hint}")
            if not any(c.split(".")[0] in prefixes for c in matching):
                kinds = ", ".join(sorted({k.kind for k in kernels}))
                raise UsageError(f"--claims: {pattern!r} matches no claim of the kernels' kinds ({kinds})")
    return kernels


def check_writable(path: Path, option: str) -> None:
    """A UsageError unless ``path`` can be written: its folder is made and a file written there and removed."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{option}: {path} is a directory, not a file")
    probe = path.with_name(f".{path.name}.{os.getpid()}.probe")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise UsageError(f"{option}: cannot write {path}: {error.strerror or error}") from None


def pytest_command(request: RunRequest) -> list[str]:
    """The pytest command line of the run (for the child process)."""
    command = [sys.executable, "-m", "pytest", str(SUITE), "-p", "properties.run.results",
               "--json", str(request.json_path), "-p", "no:cacheprovider", "--color=no", "-q", "-rfE",
               "--continue-on-collection-errors",  # a test file that does not import is an error, not the end
               "--timeout", f"{request.timeout * TEST_TIMEOUT_FACTOR:g}", "--timeout-method", "signal"]
    for spec in split_specs(request.specs):
        command += ["--kernel", spec]
    if request.kind:
        command += ["--kind", request.kind]
    if request.claims:
        command += ["--claims", ",".join(request.claims)]
    if request.profile:
        command += ["--hypothesis-profile", request.profile]
    if request.bound:
        command += ["--bound", request.bound]
    if not request.shrink:
        command.append("--no-shrink")
    if request.workers not in ("0", "1"):
        command += ["-n", request.workers]
    for option, path in (("--skips-file", request.skips_file), ("--xfails-file", request.xfails_file)):
        if path is not None:
            command += [option, str(path.resolve())]  # the child may run elsewhere
    return command


def read_results(path: Path) -> Document | None:
    """The results document at ``path``, or None while there is none (it is replaced atomically, never partial)."""
    from core.results import load

    try:
        return load(path)
    except UsageError:
        return None


def run(request: RunRequest, on_progress: Callable[[Document], None] | None = None) -> RunOutcome:
    """Run the suite in a child pytest; call ``on_progress(document)`` whenever the results file changes."""
    request.json_path.parent.mkdir(parents=True, exist_ok=True)
    request.json_path.unlink(missing_ok=True)
    env = {**os.environ, "NORMVERIFY_CALL_TIMEOUT": f"{request.timeout:g}", "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    interrupted = False
    with request.log_path.open("w", encoding="utf-8") as log:
        child = subprocess.Popen(pytest_command(request), stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env=env)
        try:
            _follow(child, request.json_path, on_progress)
        except KeyboardInterrupt:
            interrupted = True
            _stop(child)
    document = read_results(request.json_path)
    if document is not None and not interrupted and not document.complete and document.progress.running:
        name_the_crash(document, child.returncode, request.json_path)
    return RunOutcome(document, child.returncode, request.log_path, interrupted, time.monotonic() - started)


def name_the_crash(document: Document, returncode: int, path: Path) -> None:
    """The process ended inside the tests still running: record each as an error naming its kernel (the test's
    parameter id), as pytest-xdist does for a worker that died, and rewrite the results file with them."""
    from core.files import write_atomically
    from core.results import RunError

    how = f"killed by {signal.Signals(-returncode).name}" if returncode < 0 and -returncode in _SIGNALS \
        else f"exit code {returncode}"
    for nodeid in document.progress.running:
        kernel = nodeid.rpartition("[")[2].rstrip("]") if nodeid.endswith("]") else "its kernel"
        document.errors.append(RunError(test=nodeid, message=f"the test process ended ({how}) while running this "
                                                             f"test: did kernel {kernel} crash the process?"))
    write_atomically(path, document.dumps())


def _follow(child: subprocess.Popen, path: Path, on_progress: Callable[[Document], None] | None) -> None:
    """Call ``on_progress`` whenever the results file changes, and at least every REFRESH_S seconds."""
    seen, called = None, time.monotonic()
    while True:
        finished = child.poll() is not None
        if on_progress is not None:
            try:
                stamp = path.stat().st_mtime_ns
            except OSError:
                stamp = None
            if stamp is not None and (stamp != seen or time.monotonic() - called >= REFRESH_S):
                document = read_results(path)
                if document is not None:
                    seen, called = stamp, time.monotonic()
                    on_progress(document)
        if finished:
            return
        time.sleep(POLL_S)


def _stop(child: subprocess.Popen) -> None:
    """After Ctrl-C (which the child got too): let pytest finish writing, then make sure it is gone."""
    try:
        child.wait(INTERRUPT_GRACE_S)
    except subprocess.TimeoutExpired:
        child.terminate()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def exit_code(outcome: RunOutcome) -> int:
    """0 all applicable claims passed, 1 anything failed, errored, was unchecked or did not finish, 130 interrupted."""
    if outcome.interrupted:
        return 130
    return 0 if outcome.results is not None and outcome.results.passed else 1


def summary_rows(document: Document) -> list[SummaryRow]:
    """The results grouped by claim x kernel, claims by family in proofs' order (then by id), kernels in run order."""
    from core.results import SummaryRow, ordered_claims

    rows: dict[tuple[str, str], SummaryRow] = {}
    for result in document.results:
        key = (result.claim, result.kernel)
        rows.setdefault(key, SummaryRow(*key, results=[])).results.append(result)
    order = {claim: index for index, claim in enumerate(ordered_claims((c for c, _ in rows), known_claims() or []))}
    kernels = {name: index for index, name in enumerate(dict.fromkeys(kernel for _, kernel in rows))}
    return sorted(rows.values(), key=lambda row: (order[row.claim], kernels[row.kernel]))
