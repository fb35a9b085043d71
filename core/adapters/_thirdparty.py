"""What the built-ins of third-party Triton norms share: whether their package is installed (else the recipe
that installs it), the interpreter support enabled before their modules are imported, and a weight of ones
for kernels that require one.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def missing(package: str, recipe: str) -> Callable[[], str | None]:
    """``Builtin.unavailable`` for a kernel from ``package``: None when importable, else the install recipe."""

    def unavailable() -> str | None:
        for name in (package, "triton"):
            if importlib.util.find_spec(name) is None:
                return f"the {name} package is not installed ({recipe}; docs/findings.md, 'Install')"
        return None

    return unavailable


def prepare() -> None:
    """Before importing a GPU kernel's module: Triton's interpreter on CPU tensors, with its gaps closed, and
    the CUDA host-query stand-ins (kernels.interpret, docs/kernels.md); the CUDA path stays compiled."""
    from kernels import interpret

    interpret.enable()


def without_package_init(package: str) -> None:
    """Make ``package``'s submodules importable without running ``package/__init__.py`` (flash-attention's
    imports its CUDA attention extension, which its Triton norms do not use)."""
    if package in sys.modules:
        return
    sys.modules[package] = importlib.util.module_from_spec(importlib.util.find_spec(package))  # created, not run


def weight_or_ones(weight: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
    """The kernel's weight for a test's ``None`` (no scaling): ones of x's width, dtype and device."""
    import torch

    return torch.ones(x.shape[-1], dtype=x.dtype, device=x.device) if weight is None else weight



@contextlib.contextmanager
def seeded_global_rng(seed: int, x: torch.Tensor) -> Iterator[None]:
    """torch's global generators (the CPU's and x's CUDA device's) seeded with ``seed`` inside, restored after: a
    kernel that draws from the global RNG gets its seed, and the caller's RNG state is left as it was."""
    import torch

    with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
        torch.manual_seed(seed)
        yield


# ``Kernel.on_cuda`` of a compiled Triton kernel: on a CUDA device (the one it runs on, core.kernel.Kernel.for_device)
# its tl.sqrt/rsqrt and float32 division flush subnormals to zero (PTX's approximate forms; docs/kernels.md); Triton's
# interpreter on the CPU computes them in numpy, with gradual underflow.
COMPILED_TRITON = (("flush_to_zero", True),)
