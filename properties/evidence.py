"""What a conformance test tells the results plugin about each example it ran.

Inside a test, ``record(ratio=err/bound, **point)`` once per example: ``ratio`` is the worst
error/bound ratio of the example (> 1 is a failure) or None where the check is exact; the other
keyword arguments are the example's plot data and description (see docs/ARCHITECTURE.md). The
plugin (properties/results.py) calls :func:`start` before a test and :func:`take` after it.
"""

from __future__ import annotations

_examples: list[dict] = []


def record(ratio: float | None = None, **point) -> None:
    _examples.append({"ratio": None if ratio is None else float(ratio), **point})


def start() -> None:
    _examples.clear()


def take() -> list[dict]:
    taken = list(_examples)
    _examples.clear()
    return taken
