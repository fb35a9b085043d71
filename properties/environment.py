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

PROJECT_ROOT = Path(__file__).resolve().parent.parent  # the checkout's root when normverify runs from one


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


def suite_commit(root: Path = PROJECT_ROOT) -> str | None:
    """``git describe --always --dirty`` of normverify's own checkout: None when normverify does not run from one
    (an installed copy), even where some other repository encloses it or the working directory."""
    try:
        top = _git(root, "rev-parse", "--show-toplevel")
        if top is None or Path(top).resolve() != root.resolve():
            return None
        return _git(root, "describe", "--always", "--dirty", "--abbrev=12")
    except (OSError, subprocess.SubprocessError):
        return None


def _git(root: Path, *arguments: str) -> str | None:
    proc = subprocess.run(["git", *arguments], cwd=root, capture_output=True, text=True, timeout=20)
    return (proc.stdout.strip() or None) if proc.returncode == 0 else None
