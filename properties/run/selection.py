"""Which conformance tests a run holds: the claim and the kernel of a test item, and ``--claims IDS``.

A conformance test is an item with a ``claim`` marker (``properties.plugin`` leaves it one id); its kernel is
the :class:`core.registry.Kernel` among its parameters. Every plugin of the run asks these two functions.
"""

from __future__ import annotations

import fnmatch

import pytest

from core.registry import Kernel


def claim_patterns(text: str | None) -> list[str]:
    """``"ln.*, rms.forward"`` -> ``["ln.*", "rms.forward"]``."""
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def claim_of(item: pytest.Item) -> str | None:
    """The claim id the test checks (None for a test that is not a conformance test)."""
    marker = item.get_closest_marker("claim")
    return str(marker.args[0]) if marker and marker.args else None


def kernel_of(item: pytest.Item) -> Kernel | None:
    """The :class:`core.registry.Kernel` the test is parametrized with (None for a test without one)."""
    callspec = getattr(item, "callspec", None)
    candidates = [*(callspec.params.values() if callspec else ()), *getattr(item, "funcargs", {}).values()]
    return next((value for value in candidates if isinstance(value, Kernel)), None)


def keep_claims(config: pytest.Config, items: list[pytest.Item], patterns: list[str]) -> None:
    """Deselect the tests whose claim matches none of ``patterns`` (ids or globs); all stay without patterns."""
    if not patterns:
        return
    kept, dropped = [], []
    for item in items:
        claim = claim_of(item)
        matches = claim is not None and any(fnmatch.fnmatchcase(claim, p) for p in patterns)
        (kept if matches else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
