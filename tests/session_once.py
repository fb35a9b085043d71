"""A computation done once per test session and shared by pytest-xdist's workers (the suite's own child runs).

Each worker of ``pytest -n N`` builds its own session-scoped and module-scoped fixtures, so a fixture that runs the
conformance suite in a child process would run it once per worker that reaches it, side by side on the same cores.
:func:`once_per_session` runs it once: in a directory of the session's shared base temp directory, under a file lock,
the first caller writes the files and the others wait for them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock


def once_per_session(tmp_path_factory: pytest.TempPathFactory, name: str, write: Callable[[Path], None]) -> Path:
    """The directory ``name`` of this session's shared temp directory after ``write(directory)`` has run in it once
    (by whichever worker came first; a ``write`` that raised is run again by the next caller)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    directory = shared / name
    directory.mkdir(exist_ok=True)
    written = directory / ".written"
    with FileLock(str(directory / ".lock")):
        if not written.exists():
            write(directory)
            written.touch()
    return directory
