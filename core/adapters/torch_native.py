"""The ``torch`` built-in: torch.nn.functional's layer_norm, rms_norm and dropout."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.kernel import Builtin, Kernel

if TYPE_CHECKING:
    import torch


def layernorm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    from torch.nn import functional as F

    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def rmsnorm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    from torch.nn import functional as F

    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def dropout(x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
    """F.dropout in training mode, with the global generator seeded inside a forked RNG state."""
    import torch
    from torch.nn import functional as F

    devices = [x.device] if x.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        return F.dropout(x, p, training=True)


def layer_norm_backward_precision() -> str:
    """What torch's layer_norm backward keeps its statistics in for float16/bfloat16 data.

    On the CPU, ``aten.native_layer_norm`` returns mean and rstd in the input's dtype, and the
    backward rebuilds xhat from them: its error is that of the storage precision (up to ~8e3 times
    the float32-accumulation bound at d = 2, where dx cancels). On CUDA they are float32.
    tests/test_corpus_units.py checks the CPU fact, so the declaration cannot outlive it.
    """
    import torch

    return "float32" if torch.cuda.is_available() else "storage"


def _load() -> list[Kernel]:
    return [
        Kernel("torch:layernorm", "layernorm", layernorm, spec="torch", description="F.layer_norm",
               backward_precision=layer_norm_backward_precision()),
        Kernel("torch:rmsnorm", "rmsnorm", rmsnorm, spec="torch", description="F.rms_norm"),
        Kernel("torch:dropout", "dropout", dropout, spec="torch", description="F.dropout (training)"),
    ]


BUILTINS = [Builtin("torch", "torch.nn.functional layer_norm, rms_norm, dropout", _load)]
