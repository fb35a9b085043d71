"""Derived SymPy expressions kept on disk between processes (issue 27: a pytest worker or a `normverify run` should
not redo the derivations each start-up; the oracles' take ~1.5 s).

An expression is stored as a pickle under :func:`directory` in a file named by its name and :func:`key`: a digest
of the SymPy and Python versions and of every source file of the ``proofs`` package, so that a changed derivation,
algebra or library never reads a stale expression (it derives and stores a new file; old ones are left, a few KB
each). Writes go to a temporary file renamed into place, so parallel workers never read half a file; a file that
cannot be read or written (read-only disk, a corrupt or foreign pickle) costs only the derivation. The directory is
``$NORMVERIFY_CACHE_DIR``, else ``$XDG_CACHE_HOME/normverify``, else ``~/.cache/normverify``: the user's own, as
trusted as their home directory (a pickle runs code when loaded).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
PACKAGE = Path(__file__).resolve().parent


def directory() -> Path | None:
    """Where the expressions are stored (module docstring); None without a home directory (nothing is stored)."""
    if os.environ.get("NORMVERIFY_CACHE_DIR"):
        return Path(os.environ["NORMVERIFY_CACHE_DIR"])
    try:
        base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    except RuntimeError:  # no HOME and no password entry
        return None
    return Path(base) / "normverify"


@cache
def key() -> str:
    """A digest of what a derivation depends on: SymPy's and Python's versions and the proofs package's sources."""
    import sympy

    digest = hashlib.sha256(f"{sympy.__version__} {sys.version}".encode())
    for path in sorted(PACKAGE.rglob("*.py")):
        digest.update(str(path.relative_to(PACKAGE)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:24]


def expression(name: str, derive: Callable[[], T]) -> T:
    """The stored value of ``name`` for the current :func:`key`, or ``derive()`` (then stored)."""
    folder = directory()
    if folder is None:
        return derive()
    path = folder / f"{name}-{key()}.pickle"
    try:
        with path.open("rb") as stored:
            return pickle.load(stored)
    except Exception:  # absent, unreadable, corrupt or foreign: derive it instead
        pass
    value = derive()
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("wb", dir=path.parent, prefix=f".{name}-", delete=False) as handle:
            temporary = handle.name
            pickle.dump(value, handle)
        os.replace(temporary, path)
    except OSError:  # a read-only or full disk: the next process derives it again
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
    return value
