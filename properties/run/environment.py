"""What a run ran on: versions, device, Hypothesis profile, the tolerances' error bound, the suite's commit, date,
the CPU capability ATen dispatches on and every declared exact reduction tree of the run's kernels, verified or not."""

from __future__ import annotations

import datetime
import platform
import subprocess
from pathlib import Path

import hypothesis
import pytest
import torch

import core
from core import trees
from core.capabilities import device_of
from core.errors import UsageError
from core.names import split_specs
from core.registry import Kernel, resolve
from properties.bounds import tolerance
from properties.run import profiles

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # properties/run/ -> the checkout's root when run from one


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
            "shrink": not config.getoption("--no-shrink", False),
            "bound": tolerance.bound_in_use(), "commit": suite_commit(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "reductions": [check.as_json() for check in declared_trees(config)]}


def run_kernels(config: pytest.Config) -> list[tuple[str, Kernel]]:
    """(SPEC, kernel) for each kernel the run's --kernel SPECs name (--kind applied); a SPEC that does not resolve is
    the run's own usage error, reported there, so it adds nothing here."""
    kernels: list[tuple[str, Kernel]] = []
    for spec in split_specs(config.getoption("--kernel", None) or []):
        try:
            kernels += [(spec, kernel) for kernel in resolve(spec, config.getoption("--kind", None))]
        except UsageError:
            continue
    return kernels


def declared_trees(config: pytest.Config) -> list[trees.TreeCheck]:
    """Each declared exact tree of the run's kernels checked on the device the run uses for that kernel
    (core.capabilities.device_of) in each dtype the tree is declared for (core.trees); none for a declaration made
    for another device (torch's CPU trees on a CUDA run)."""
    found = []
    for _, kernel in run_kernels(config):
        device = torch.device(device_of(kernel))
        if not trees.applies(kernel.reduction, device) or not kernel.reduction.exact_tree:
            continue
        dtypes = kernel.dtypes or (torch.float32, torch.float16, torch.bfloat16)
        found += [trees.check(kernel, device, dtype) for dtype in trees.dtypes_for(kernel.reduction, dtypes)]
    return found


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
