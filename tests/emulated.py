"""Tests that pin a machine-specific emulation (ATen's row moments and sum, the interpreter's numpy tree) run where
core.trees has verified it on this build, and skip with the check's own line elsewhere: no test fails because of
which CPU (capability) the machine running it happens to have. tests/test_trees.py runs them under every capability
the machine can force."""

from __future__ import annotations

import pytest
import torch

from core import trees
from core.kernel import Kernel
from core.registry import resolve


def verified_kernel(spec: str, kind: str, dtype: torch.dtype = torch.float32) -> Kernel:
    """The built-in ``spec:kind``, whose declared exact tree is verified bit for bit on this machine (else skip)."""
    (kernel,) = resolve(spec, kind)
    if kernel.reduction is None or not kernel.reduction.exact_tree:
        pytest.skip(f"{kernel.name} declares no exact tree on this machine "
                    f"(CPU capability {torch.backends.cpu.get_cpu_capability()})")
    check = trees.check(kernel, torch.device("cpu"), dtype)
    if check.status != "verified":
        pytest.skip(check.line())
    return kernel


def sequential_statistics(x: torch.Tensor, eps: float, rms: bool = False) -> tuple:
    """(mean or None, rstd) of a kernel whose float32 sums run left to right (depth d - 1): the statistics a false
    declaration of a shallower exact tree is refuted by (core.trees)."""
    import numpy as np

    from proofs import simulate

    f32, rows = np.float32, x.detach().float().cpu().numpy()
    width = f32(rows.shape[-1])
    mean = np.zeros(rows.shape[:-1], f32) if rms else (simulate.summed(rows, "sequential") / width).astype(f32)
    deviations = (rows - mean[..., None]).astype(f32)
    squares = simulate.summed((deviations * deviations).astype(f32), "sequential")
    rstd = (f32(1) / np.sqrt((squares / width).astype(f32) + f32(eps))).astype(f32)
    return (None if rms else torch.from_numpy(mean)), torch.from_numpy(rstd)


def trust_every_declared_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the bounds use each declared tree unverified (as the suite did before core.trees): to show the power of a
    tree's bound against a kernel that does not compute it."""
    monkeypatch.setattr(trees, "trusted", lambda kernel, x: kernel.reduction)
