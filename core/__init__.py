"""The layer below the suite: kernel records, the registry of SPECs and built-in adapters, the guard around
every kernel call, capability discovery, one-line errors and atomic file writes.

Imported by :mod:`properties` and :mod:`verify`; imports neither (docs/ARCHITECTURE.md, enforced by the
import contract in pyproject.toml). Importing ``core`` itself loads nothing heavy.
"""

__version__ = "0.1.0"
