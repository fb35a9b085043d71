"""Writing a file so that a reader sees the old file or the new one, never a part."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

MODE = 0o644  # what a plain open() gives under the usual umask; tempfile's own 0600 would hide results


def write_atomically(path: Path, data: str | bytes, mode: int = MODE) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` through a temporary file in the same folder and ``os.replace``.

    The folder is created when missing; the file gets ``mode`` (0644: readable by others, like any report).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
