"""The one crossing between the kernel's tensors and the float64 host side (draws and the numpy oracle).

Two sides, one rule each (docs/ARCHITECTURE.md, device discipline):

- the kernel side: every tensor a kernel receives, and everything computed from its outputs, lives on the kernel's
  device (``core.capabilities.Capabilities.device``); tensors made there derive from one (``*_like``, ``new_*``)
  or name ``device=``;
- the host side: values are drawn in float64 on the CPU (:data:`HOST`, seeded generators from
  :func:`host_generator`: the same seed draws the same values on every machine) and the float64 references are
  numpy arrays.

Values cross only here: :func:`to_kernel` rounds host values to the storage dtype on the kernel's device,
:func:`to_oracle` brings a kernel-side tensor to float64 numpy. A host tensor in arithmetic with a kernel-side one
is the device mix a CUDA run rejects ("Expected all tensors to be on the same device"); tests/test_device_discipline
scans the suite for tensor factories that name no device.
"""

from __future__ import annotations

import numpy as np
import torch

HOST = "cpu"


def host_generator(seed: int) -> torch.Generator:
    """A seeded generator for host-side float64 draws."""
    return torch.Generator(device=HOST).manual_seed(seed)


def to_kernel(values: torch.Tensor | np.ndarray, dtype: torch.dtype, device: str | torch.device) -> torch.Tensor:
    """Host values (a float64 tensor or numpy array) rounded to ``dtype`` (round to nearest) on ``device``."""
    if isinstance(values, np.ndarray):
        values = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64))
    return values.to(dtype).to(device)


def to_oracle(t: torch.Tensor | None) -> np.ndarray | None:
    """A kernel-side tensor as a float64 numpy array on the host (None stays None)."""
    return None if t is None else t.detach().to(HOST, torch.float64).numpy()
