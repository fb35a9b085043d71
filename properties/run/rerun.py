"""The pytest command that reruns exactly one conformance test, with the run's kernels, kind, bound and profile.

Deterministic in the derandomized ci profile (the default), so a failure's rerun shows the same failure.
"""

from __future__ import annotations

import shlex
import sys

import pytest

from core.names import split_specs
from properties.run import profiles


def rerun_command(item: pytest.Item) -> str:
    """``python -m pytest FILE::TEST --kernel SPEC ... [--kind K] [--bound B] --hypothesis-profile P
    [--no-shrink]``."""
    config = item.config
    node = f"{item.path}::{item.nodeid.split('::', 1)[1]}" if "::" in item.nodeid else str(item.path)
    words = [sys.executable, "-m", "pytest", node, "-p", "properties.run.results"]
    for spec in split_specs(config.getoption("--kernel", None) or []):
        words += ["--kernel", spec]
    for option in ("--kind", "--bound"):
        if config.getoption(option, None):
            words += [option, str(config.getoption(option))]
    words += ["--hypothesis-profile", profiles.chosen(config.getoption("hypothesis_profile", None))]
    if config.getoption("--no-shrink", False):
        words.append("--no-shrink")
    return shlex.join(words)
