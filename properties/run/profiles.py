"""Hypothesis profiles of the conformance run.

ci        the default: derandomized (the same examples every run), no deadline (Triton's JIT and its CPU
          interpreter make first calls slow), fixed example counts, no example database, prints
          the @reproduce_failure blob of every failure. A documented command gives the same verdict
          on every run and every machine.
dev       opt-in: quick and random (small), with Hypothesis' example database in .hypothesis/ (failures
          found once are replayed first).
thorough  many examples, the example database kept under .hypothesis/ so failures replay first.

Selected by ``--hypothesis-profile NAME`` (``normverify run --profile NAME``), else
``NORMVERIFY_PROFILE``, else ``ci``. Hypothesis loads its own ``ci`` profile when the ``CI``
environment variable is set; :func:`load` registers ours under the same name and loads it explicitly.

``--no-shrink`` (``normverify run --no-shrink``): the chosen profile without Hypothesis's shrink and explain phases.
The examples are generated exactly as under the profile, so every verdict and the worst ratio over the generated
examples are the same; a failing test stops soon after its first failure and reports (and saves, replayable) the
example that failed, not a minimized one: a triage run in seconds where minimizing takes minutes.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

PROFILES = ("ci", "dev", "thorough")
DEFAULT = "ci"
_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.differing_executors]
WITHOUT_SHRINKING = tuple(phase for phase in Phase if phase not in (Phase.shrink, Phase.explain))


def register() -> None:
    settings.register_profile("dev", max_examples=15, deadline=None, print_blob=True,
                              suppress_health_check=_SLOW_OK)
    settings.register_profile("ci", max_examples=20, deadline=None, derandomize=True, database=None,
                              print_blob=True, suppress_health_check=_SLOW_OK)
    settings.register_profile("thorough", max_examples=400, deadline=None, print_blob=True,
                              database=DirectoryBasedExampleDatabase(".hypothesis/examples"),
                              suppress_health_check=_SLOW_OK)


def chosen(option: str | None = None) -> str:
    """The profile to use: the explicit option, else NORMVERIFY_PROFILE, else ci (derandomized)."""
    name = option or os.environ.get("NORMVERIFY_PROFILE") or DEFAULT
    if name not in PROFILES:
        raise ValueError(f"unknown Hypothesis profile {name!r}; choose one of {', '.join(PROFILES)}")
    return name


def load(option: str | None = None, shrink: bool = True) -> str:
    """Register the profiles and load the chosen one (without shrinking unless ``shrink``); its name."""
    register()
    name = chosen(option)
    if shrink:
        settings.load_profile(name)
    else:
        settings.register_profile(f"{name}-no-shrink", parent=settings.get_profile(name), phases=WITHOUT_SHRINKING)
        settings.load_profile(f"{name}-no-shrink")
    return name


def share(fraction: float) -> settings:
    """Settings that run ``fraction`` of the loaded profile's max_examples (at least 1).

    The one knob for expensive claims: ``@profiles.share(0.25)`` runs 5 examples under ci (20),
    100 under thorough (400). Applied at import, after :func:`load` has chosen the profile.
    """
    return settings(max_examples=max(1, round(settings.default.max_examples * fraction)))
