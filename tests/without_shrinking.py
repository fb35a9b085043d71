"""pytest plugin for the suite's own child runs whose verdicts are read, not their counterexamples: the loaded
Hypothesis profile without its shrink and explain phases.

The derandomized examples are generated exactly as under the loaded profile (ci), so every verdict, and the worst
ratio over the examples generated, are the same; but a failing test stops after generating instead of spending most
of its time minimizing a counterexample nobody reads there. Loaded with ``-p without_shrinking`` and ``tests/`` on
PYTHONPATH (tests/test_corpus.py, tests/test_thirdparty_conformance.py).
"""

from __future__ import annotations

import pytest
from hypothesis import Phase, settings

WITHOUT_SHRINKING = tuple(phase for phase in Phase if phase not in (Phase.shrink, Phase.explain))


def pytest_sessionstart(session: pytest.Session) -> None:
    """After the profile is loaded (pytest_configure), before the tests are collected (their settings made)."""
    settings.register_profile("without-shrinking", settings(settings.default, phases=WITHOUT_SHRINKING))
    settings.load_profile("without-shrinking")
