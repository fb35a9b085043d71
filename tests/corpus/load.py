"""Kernels refused at load, before any test runs (``normverify run`` exits 2 with one line; tests/test_cli_run.py).
They are not in the manifest (``CORPUS``): the suite never runs them.
"""

from __future__ import annotations

import torch


def layernorm_runs_nowhere(x: torch.Tensor, weight, bias, eps: float) -> torch.Tensor:
    """Usable in no dtype: raises on every input, as a kernel built for a GPU this machine lacks. Without the
    check at load it ran 72 s and printed ten identical ERROR blocks."""
    raise RuntimeError("no kernel image is available for execution on the device")


def rmsnorm_without_weight(x: torch.Tensor, eps: float) -> torch.Tensor:
    """A signature that does not fit the kind: (x, eps), run as an rmsnorm (x, weight, eps). Without the check at
    load it was found only when first called, as an error of every claim."""
    return x * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + eps).to(x.dtype)
