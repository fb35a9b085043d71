"""pytest plugin: a kernel's known deviations as data, ``--skips-file FILE`` / ``--xfails-file FILE``.

As in array-api-tests, a text file lists what to skip or to expect to fail, so a kernel's known
deviations are recorded (and reported as skipped / xfailed with their reason) without editing
any test. One entry per line::

    # comments and blank lines are ignored
    CLAIM [KERNEL]  # reason

CLAIM is a claim id or a glob of them (``ln.forward``, ``rms.*``, ``*.inputs_unmodified``);
KERNEL, optional, a glob restricting the entry to kernels whose name or SPEC matches it
(``liger-rmsnorm-*``); the reason after ``#`` is required. At collection every conformance
test (an item with a ``claim`` marker) that an entry matches gets a ``skip`` / ``xfail`` marker
with the reason and the file position. Expected failures are not strict: a test that passes
anyway shows as XPASS, the sign that the entry is stale. Entries that matched no test are
listed in the terminal summary (of a run without pytest-xdist: with workers, collection and hence
this list happen in the workers, whose terminal output pytest does not show).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

import pytest

from properties.results import claim_of, kernel_of

OPTIONS = {"skip": "--skips-file", "xfail": "--xfails-file"}


@dataclass(frozen=True)
class Expectation:
    """One line of a skips/xfails file: tests of claims matching ``claim`` (and kernels matching ``kernel``)."""

    action: str  # "skip" | "xfail"
    claim: str
    kernel: str | None
    reason: str
    where: str  # FILE:LINE

    def matches(self, claim: str, kernel_names: tuple[str, ...]) -> bool:
        if not fnmatch.fnmatchcase(claim, self.claim):
            return False
        return self.kernel is None or any(fnmatch.fnmatchcase(name, self.kernel) for name in kernel_names)

    def marker(self) -> pytest.MarkDecorator:
        reason = f"{self.reason} ({self.where})"
        return pytest.mark.skip(reason=reason) if self.action == "skip" else pytest.mark.xfail(reason=reason,
                                                                                                 strict=False)


def parse(path: str | Path, action: str) -> list[Expectation]:
    """The entries of a skips (``action="skip"``) or xfails (``"xfail"``) file; UsageError on a malformed line."""
    path = Path(path)
    option = OPTIONS[action]
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise pytest.UsageError(f"{option} {path}: {error.strerror or error}") from None
    entries = []
    for number, line in enumerate(lines, start=1):
        entry, _, reason = line.partition("#")
        fields = entry.split()
        if not fields:
            continue
        where = f"{path.name}:{number}"
        if len(fields) > 2:
            raise pytest.UsageError(f"{option} {where}: expected 'CLAIM [KERNEL]  # reason', got {line.strip()!r}")
        if not reason.strip():
            raise pytest.UsageError(f"{option} {where}: {fields[0]!r} needs a reason after '#'")
        entries.append(Expectation(action, fields[0], fields[1] if len(fields) == 2 else None, reason.strip(), where))
    return entries


def _kernel_names(item: pytest.Item) -> tuple[str, ...]:
    kernel = kernel_of(item)
    return () if kernel is None else tuple(name for name in (kernel.name, kernel.spec) if name)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("normverify")
    group.addoption(OPTIONS["skip"], default=None, metavar="FILE", dest="normverify_skips_file",
                    help="skip the conformance tests of the claims listed in FILE ('CLAIM [KERNEL]  # reason' lines)")
    group.addoption(OPTIONS["xfail"], default=None, metavar="FILE", dest="normverify_xfails_file",
                    help="expect the conformance tests of the claims listed in FILE to fail "
                         "('CLAIM [KERNEL]  # reason' lines)")


_entries_key = pytest.StashKey[list[Expectation]]()
_unmatched_key = pytest.StashKey[list[Expectation]]()


def pytest_configure(config: pytest.Config) -> None:
    entries = []
    for action, dest in (("skip", "normverify_skips_file"), ("xfail", "normverify_xfails_file")):
        path = config.getoption(dest, None)
        if path:
            entries += parse(path, action)
    config.stash[_entries_key] = entries


@pytest.hookimpl(trylast=True)  # after properties/conftest.py has narrowed each item's claim marker to one id
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    entries = config.stash.get(_entries_key, [])
    if not entries:
        return
    used: set[Expectation] = set()
    for item in items:
        claim = claim_of(item)
        if claim is None:
            continue
        names = _kernel_names(item)
        # skips before xfails, each in file order: the first matching line of each file gives the reason
        for action in OPTIONS:
            entry = next((e for e in entries if e.action == action and e.matches(claim, names)), None)
            if entry is not None:
                item.add_marker(entry.marker())
                used.add(entry)
    config.stash[_unmatched_key] = [e for e in entries if e not in used]


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    unmatched = config.stash.get(_unmatched_key, [])
    if unmatched:
        terminalreporter.write_sep("-", "normverify: expectations that matched no collected test")
        for entry in unmatched:
            kernel = f" {entry.kernel}" if entry.kernel else ""
            terminalreporter.write_line(f"{entry.where}: {entry.action} {entry.claim}{kernel}  # {entry.reason}")
