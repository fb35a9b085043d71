"""pytest plugin of the corpus run (tests/test_corpus.py): which conformance tests each corpus kernel runs.

A broken kernel runs only the tests of the claims in its ``expect`` set (it must fail those) and of its
``missed_by`` set (it must pass those): what else it fails is not the corpus's business (and running every claim
on 35 broken kernels would take many minutes); of properties/test_many_rows.py (65 539 rows, a third of the run's
time) only those whose bug shows at that scale (``Entry.at_scale``), of the tests of rows wider than 8192
(WIDE_TESTS, up to 98 304 columns) only those whose bug shows there (``Entry.wide``); a correct kernel, and any
kernel not in the
manifest, runs every test but, for a correct kernel of the corpus files, the large-batch ones (LARGE_BATCH_TESTS);
a correct kernel that is another's with declarations added (``Entry.declared_for``) only the claims they change.

In the corpus run (``NORMVERIFY_CORPUS_CAUGHT``: a directory shared by the run's xdist workers), a broken kernel's
test of a claim it is expected to fail is skipped, saying so, once another test of that claim has failed it (with
the entry's status): the corpus asks that each expected claim catch the kernel, not how many of the claim's tests do
(a third of the run's time went to the tests after the first failure); not for a kernel that plants a library
mechanism, whose diagnoses tests/test_diagnosis.py reads from all its failures.

Loaded with ``-p corpus.selection`` and ``tests/`` on PYTHONPATH; the corpus run adds ``--no-shrink``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from core.registry import Kernel
from corpus import CORPUS

SELECTED_CLAIMS = {entry.spec: entry.expect | entry.missed_by for entry in CORPUS if not entry.correct}
DECLARED_FOR = {entry.spec: entry.declared_for for entry in CORPUS if entry.declared_for}
# not the kernels that plant a library mechanism: tests/test_diagnosis.py reads the diagnoses of all their failures
EXPECTED = {entry.spec: (entry.expect, entry.status) for entry in CORPUS if not entry.correct and not entry.mechanism}
CAUGHT_DIRECTORY = "NORMVERIFY_CORPUS_CAUGHT"
AT_SCALE = {entry.spec for entry in CORPUS if entry.at_scale}
SCALE_TESTS = "test_many_rows.py"
WIDE = {entry.spec for entry in CORPUS if entry.wide}
WIDE_TESTS = ("_beyond_8192_columns", "_beyond_65536_columns")
# The correct kernels of the corpus files (plain-torch compositions, 43 of them) skip the large-batch tests (4 099 rows
# in every dtype, 1-3 s each: two thirds of the corpus run), those beyond 65 535 rows and those of rows wider than
# 8192 (torch's own kernels at scale); the correct built-ins of the manifest (torch-fused-fp32, the quantized ones)
# run them, the large batches in float32 only (their 16-bit ones: every run of the built-ins outside the corpus run,
# make verify and the GPU check, which also runs the corpus files' correct kernels on all of them).
LARGE_BATCH_TESTS = "_of_a_large_batch"
SIXTEEN_BIT = ("float16", "bfloat16")
CORPUS_FILES = "tests/corpus/"


def _kernel(item: pytest.Item) -> Kernel | None:
    params = getattr(getattr(item, "callspec", None), "params", {})
    return next((value for value in params.values() if isinstance(value, Kernel)), None)


def _claims(item: pytest.Item) -> set[str]:
    marker = item.get_closest_marker("claim")
    return set(marker.args) if marker else set()


def selected(item: pytest.Item) -> bool:
    """False for a broken corpus kernel's test of a claim it is neither expected to fail nor to pass, for its
    tests beyond 65 535 rows or 8192 columns unless its bug shows there, for a correct corpus file kernel's
    large-batch, many-rows and wide-row tests and, for one with ``declared_for``, its tests of other claims, and
    for a correct built-in's 16-bit large-batch tests."""
    kernel = _kernel(item)
    if kernel is None:
        return True
    if kernel.spec not in SELECTED_CLAIMS:  # a correct kernel: a corpus file's skips the tests of scale
        if not kernel.spec.startswith(CORPUS_FILES):  # a built-in: its large batches in float32
            return not (LARGE_BATCH_TESTS in item.name and any(name in item.name for name in SIXTEEN_BIT))
        if kernel.spec in DECLARED_FOR and not _claims(item) & DECLARED_FOR[kernel.spec]:
            return False
        return not (LARGE_BATCH_TESTS in item.name or item.path.name == SCALE_TESTS
                    or any(name in item.name for name in WIDE_TESTS))
    if item.path.name == SCALE_TESTS and kernel.spec not in AT_SCALE:
        return False
    if any(name in item.name for name in WIDE_TESTS) and kernel.spec not in WIDE:
        return False
    return bool(_claims(item) & SELECTED_CLAIMS[kernel.spec])


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept = [item for item in items if selected(item)]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if not selected(item)])
        items[:] = kept


def _caught_marker(item: pytest.Item) -> Path | None:
    """The file that says the item's kernel was caught on the item's expected claim (None: not such an item, or
    not in the corpus run)."""
    directory, kernel = os.environ.get(CAUGHT_DIRECTORY), _kernel(item)
    if not directory or kernel is None or kernel.spec not in EXPECTED:
        return None
    claims = _claims(item) & EXPECTED[kernel.spec][0]
    if not claims:
        return None
    name = hashlib.sha1(f"{kernel.spec}|{min(claims)}".encode()).hexdigest()
    return Path(directory) / name


def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = _caught_marker(item)
    if marker is not None and marker.exists():
        pytest.skip("the corpus run: another test of this claim already caught this kernel (tests/corpus/selection.py)")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    marker = _caught_marker(item)
    if marker is not None and report.when == "call" and report.failed and call.excinfo is not None:
        status = getattr(call.excinfo.value, "status", "failed")
        if status == EXPECTED[_kernel(item).spec][1]:
            marker.touch()
    return report
