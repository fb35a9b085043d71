"""``--device cuda:N|cpu`` of ``normverify run`` and ``list``: the device the kernels are probed and run on.

Without it the choice is today's (core.capabilities: a kernel's declared device, else CUDA where it is available and
the kernel computes there, else the CPU). With it, the process (and the pytest child of a run, which inherits the
environment) sees only that device, through ``CUDA_VISIBLE_DEVICES``: ``cuda:N`` is then the only GPU, cuda:0 to
torch (N counts among the GPUs already visible), ``cpu`` hides every GPU, so that every built-in chooses the CPU as
on a machine without one. It must be chosen before anything initializes CUDA in the process.
"""

from __future__ import annotations

import os
import re

from core.errors import UsageError

VARIABLE = "CUDA_VISIBLE_DEVICES"


def visible_devices(device: str, visible: str | None) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` value that leaves only ``device`` ('cpu', 'cuda', 'cuda:N') visible, given its
    current value ``visible`` (None: unset, every GPU visible)."""
    match = re.fullmatch(r"cpu|cuda(?::(\d+))?", device)
    if match is None:
        raise UsageError(f"--device must be cpu, cuda or cuda:N, not {device!r}")
    if device == "cpu":
        return ""
    index = int(match.group(1) or 0)
    if visible is None:
        return str(index)
    listed = [entry for entry in visible.split(",") if entry.strip()]
    if index >= len(listed):
        raise UsageError(f"--device {device}: {VARIABLE}={visible!r} shows {len(listed)} GPU(s)")
    return listed[index].strip()


def select(device: str | None) -> None:
    """Make ``device`` the only one this process and its children see (None: leave today's choice)."""
    if device is None:
        return
    os.environ[VARIABLE] = visible_devices(device, os.environ.get(VARIABLE))
    if device != "cpu":
        import torch

        if not torch.cuda.is_available():
            raise UsageError(f"--device {device}: no such CUDA device here")
