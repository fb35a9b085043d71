"""What a run ran on: versions, device, Hypothesis profile, the tolerances' error bound, the suite's commit, date."""

from __future__ import annotations

import datetime
import platform
import subprocess
from pathlib import Path

import hypothesis
import pytest
import torch

import core
from properties import profiles, tolerance


def environment(config: pytest.Config) -> dict:
    """The ``environment`` of the results document (``core.results.Environment``)."""
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    if torch.cuda.is_available():
        device = f"cuda ({torch.cuda.get_device_name(0)})"
    else:
        device = f"cpu ({platform.processor() or platform.machine()})"
    return {"normverify": core.__version__, "python": platform.python_version(), "torch": torch.__version__,
            "triton": triton_version, "hypothesis": hypothesis.__version__, "device": device,
            "profile": profiles.chosen(config.getoption("hypothesis_profile", None)),
            "bound": tolerance.bound_in_use(), "commit": suite_commit(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def suite_commit() -> str | None:
    """``git describe --always --dirty`` of the checkout normverify runs from (None when not a checkout)."""
    try:
        proc = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"],
                              cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout.strip() or None
