"""pytest plugin: the results of a conformance run, one record per claim x kernel test, as the results document.

Options: ``--json PATH`` writes the ``normverify.results/1`` document (:mod:`core.results`, the schema);
``--claims IDS`` (comma-separated ids or globs such as ``ln.*``) keeps only the conformance tests of
those claims. The jobs live in their own modules; this one connects them to pytest's hooks:

    properties.run.selection     the claim and the kernel of a test item, --claims
    properties.evidence      around the call: the examples each check recorded, the ones that failed
    properties.run.summary       the examples summed up: count, unchecked, worst ratio, dtypes, widths, points
    properties.run.status        the phase's status and message from pytest's and Hypothesis' structured data
    properties.run.failures      one counterexample per distinct failure: inputs, saved file, replay and rerun
    properties.run.environment   versions, device, profile, bound, commit, date
    properties.run.writer        the document: the phase records (of this process or of xdist workers) merged

Every failed claim's report ends with a ``normverify replay`` command per distinct failure, in a plain pytest run
too (its counterexamples go to ``counterexamples/`` next to ``--json PATH``, else to ``.normverify/`` in the
rootdir).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core.capabilities import discover
from core.errors import one_line
from core.results import FAILING, NO_KERNEL
from properties import evidence
from properties.run import selection, status
from properties.run.environment import environment  # noqa: F401  (the plugin's header asks the registered plugin)
from properties.run.failures import counterexamples_of
from properties.run.selection import claim_of, kernel_of
from properties.run.summary import summarize
from properties.run.writer import RECORD_KEY, ResultsWriter

FALLBACK_FOLDER = Path(".normverify") / "counterexamples"
_examples_key = pytest.StashKey[list]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("normverify", "normverify conformance run")
    group.addoption("--json", dest="normverify_json", default=None, metavar="PATH",
                    help="write the results (docs/ARCHITECTURE.md, 'Results JSON') to PATH, updated as the tests go")
    group.addoption("--claims", dest="normverify_claims", default=None, metavar="IDS",
                    help="run only the conformance tests of these claims: comma-separated ids or globs (ln.*)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "claim(id): the claim id (proofs.claims) this conformance test checks")
    path = config.getoption("normverify_json")
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(ResultsWriter(config, Path(path)), "normverify-results-writer")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    selection.keep_claims(config, items, selection.claim_patterns(config.getoption("normverify_claims")))


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings) -> None:
    """pytest-timeout is setting the test's time limit: remember it (a later ``pytest.fail`` past it is a timeout)."""
    status.note_time_limit(item, settings.timeout)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    evidence.start()
    try:
        return (yield)
    finally:
        item.stash[_examples_key] = evidence.take()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    claim = claim_of(item)
    if claim is not None:
        record = phase_record(item, call, report, claim)
        report.user_properties.append((RECORD_KEY, record))
        for example in record.get("counterexamples", []):
            report.sections.append(("normverify replay", f"{example['message']}\n  replay: {example['replay']}"))
    return report


def phase_record(item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport, claim: str) -> dict:
    """This phase's part of the test's record: plain data only (it may cross from an xdist worker)."""
    kernel = kernel_of(item)
    record: dict = {"claim": claim, "kernel": kernel.name if kernel else NO_KERNEL,
                    "kind": kernel.kind if kernel else None, "spec": kernel.spec if kernel else None,
                    "when": report.when, "status": status.phase_status(item, call, report),
                    "message": status.phase_message(call, report)}
    view = claim_view(claim)
    if view is not None:
        record["view"] = view
    if report.when == "setup" and kernel is not None:
        record["about_kernel"] = {**kernel.as_json(), "capabilities": capabilities_of(kernel)}
    if report.when == "call":
        record.update(summarize(item.stash.get(_examples_key, [])))
        if record["status"] == "passed" and record["examples"] == record["unchecked"]:
            record["status"] = "unchecked"
            record["message"] = (f"no example could be checked: {record['unchecked']} of {record['examples']} had no "
                                 "finite bound" if record["examples"] else "no example was drawn")
        if record["status"] in FAILING and call.excinfo is not None:
            record["counterexamples"] = counterexamples_of(item, call.excinfo.value, claim, kernel,
                                                           counterexample_folder(item.config))
    return record


def claim_view(claim: str) -> dict | None:
    """{"of", "reason"} where proofs declares the claim's evidence a view of another claim's (Claim.view_of)."""
    from proofs.claims import CLAIMS

    found = CLAIMS.get(claim)
    return {"of": found.view_of, "reason": found.view_reason} if found is not None and found.view_of else None


def counterexample_folder(config: pytest.Config) -> Path:
    """``counterexamples/`` next to the ``--json`` file; without one, ``.normverify/counterexamples`` in the rootdir."""
    path = config.getoption("normverify_json")
    return Path(path).resolve().parent / "counterexamples" if path else config.rootpath / FALLBACK_FOLDER


def capabilities_of(kernel) -> dict:
    """``core.capabilities.discover(kernel)`` as JSON (cached per process), or what went wrong."""
    try:
        return discover(kernel).as_json()
    except Exception as error:
        return {"error": one_line(error)}
