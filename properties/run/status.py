"""The status and message of a test phase, from pytest's and Hypothesis' structured data, never printed text.

Worst first (:data:`core.results.STATUSES`): a failed setup or teardown is an ``error``; so is a test that
pytest-timeout stopped (a ``pytest.fail`` raised once the time limit it set for the item has passed), a
:class:`core.guard.KernelFault` other than a wrong answer (``KernelFault.status``), and a Hypothesis error
that means no example could be run (an unsatisfiable strategy, a failed health check, an invalid
argument): the claim could not be checked. Any other exception of the call is a ``failed`` claim;
Hypothesis' several distinct failures arrive as an exception group, each member one failure.
"""

from __future__ import annotations

import time

import pytest
from hypothesis.errors import FailedHealthCheck, InvalidArgument, InvalidDefinition, Unsatisfiable

from core.errors import one_line
from core.guard import KernelFault

MAX_MESSAGE = 1000
NOT_RUN = (Unsatisfiable, FailedHealthCheck, InvalidArgument, InvalidDefinition)  # Hypothesis ran no example

_timer_key = pytest.StashKey[tuple[float, float]]()


def note_time_limit(item: pytest.Item, timeout: float) -> None:
    """pytest-timeout set a timer of ``timeout`` seconds for ``item`` now (its ``pytest_timeout_set_timer``)."""
    if timeout and timeout > 0:
        item.stash[_timer_key] = (time.monotonic(), float(timeout))


def timed_out(item: pytest.Item, call: pytest.CallInfo) -> bool:
    """pytest-timeout stopped the test: ``pytest.fail`` raised after the time limit it set for the item had passed."""
    started, limit = item.stash.get(_timer_key, (0.0, 0.0))
    return (limit > 0 and call.excinfo is not None and call.excinfo.errisinstance(pytest.fail.Exception)
            and time.monotonic() - started >= limit)


def distinct_failures(error: BaseException) -> list[BaseException]:
    """The members of Hypothesis' exception group of distinct failures, else the error itself."""
    return list(getattr(error, "exceptions", None) or [error])


def exception_parts(error: BaseException) -> list[BaseException]:
    """The exception, its causes, and the members of exception groups."""
    parts, todo = [], [error]
    while todo:
        current = todo.pop(0)
        if current is None or any(current is p for p in parts):
            continue
        parts.append(current)
        todo.extend(getattr(current, "exceptions", ()))
        todo.append(current.__cause__)
    return parts


def kernel_fault(error: BaseException) -> KernelFault | None:
    return next((part for part in exception_parts(error) if isinstance(part, KernelFault)), None)


def failure_status(error: BaseException) -> str:
    """``error`` when the claim could not be checked (a kernel fault other than a wrong answer, no example run),
    else ``failed``."""
    if isinstance(error, NOT_RUN):
        return "error"
    fault = kernel_fault(error)
    return fault.status if fault is not None else "failed"


def phase_status(item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport) -> str | None:
    """What this phase says about the test; None for a setup or teardown that went fine."""
    xfail = hasattr(report, "wasxfail")
    if report.skipped:
        return "xfailed" if xfail else "skipped"
    if report.passed:
        if report.when != "call":
            return None
        return "xpassed" if xfail else "passed"
    if report.when != "call" or timed_out(item, call) or call.excinfo is None:
        return "error"
    return failure_status(call.excinfo.value)


def described(error: BaseException) -> str:
    """``Type: message`` in full (without Hypothesis' notes, which the counterexample carries)."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def phase_message(call: pytest.CallInfo, report: pytest.TestReport) -> str:
    """A skip's or xfail's reason; the failure (each distinct failure in one line); '' for a pass."""
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
    members = distinct_failures(error)
    if len(members) > 1:
        lines = [f"{len(members)} distinct failures"] + [f"  {one_line(m)}" for m in members]
        return prefix + "\n".join(lines)[:MAX_MESSAGE]
    return prefix + described(error)[:MAX_MESSAGE]
