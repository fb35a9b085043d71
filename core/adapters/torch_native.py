"""The ``torch`` built-in: torch.nn.functional's layer_norm, rms_norm and dropout."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.adapters import aten_statistics
from core.kernel import Builtin, Kernel
from proofs.reduction import Reduction

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


def layernorm_statistics(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, rstd) per row as F.layer_norm computes them: aten.native_layer_norm's own outputs."""
    import torch

    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [x.shape[-1]], None, None, eps)
    return mean, rstd


def rmsnorm_statistics(x: torch.Tensor, eps: float) -> tuple[None, torch.Tensor]:
    """(None, rstd) per row as F.rms_norm computes them: aten._fused_rms_norm's rstd (the composite's
    rsqrt(pow(2).mean + eps); tests/test_aten_sum.py checks F.rms_norm's output against it)."""
    import torch

    return None, torch.ops.aten._fused_rms_norm(x, [x.shape[-1]], None, eps)[1]


def cpu_reductions() -> dict[str, Reduction]:
    """The reduction shapes of torch's CPU layer_norm and rms_norm statistics, read from ATen's source, for this
    process (x86 capability, threads); {} on other CPUs. Declared for CPU tensors only (``device="cpu"``): torch's
    CUDA kernels get the order-agnostic bound. The exact trees are verified on the machine before use (core.trees).

    V = 8 float32 lanes of at::vec::Vectorized<float> for every x86 capability these kernels run: ATen's DEFAULT
    build (the generic 32-byte Vectorized, no FMA, so nothing contracted: ``contract=False``), AVX2 (GCC contracts
    the multiply-adds into FMAs), and AVX512, whose dispatch runs the AVX2 kernel: LayerNormKernel and sum_stub are
    registered with REGISTER_DISPATCH, which registers nullptr for AVX512 (aten/src/ATen/native/DispatchStub.h: only
    ALSO_REGISTER_AVX512_DISPATCH registers an AVX512 kernel; SumKernel.cpp says why not for sums), and the stub
    falls back to AVX2.

    layer_norm: aten/src/ATen/native/cpu/moments_utils.h, RowwiseMomentsImpl: per lane, Welford updates over
    chunks of kChunkSize = 16 vectors (the first update is exact), each chunk merged into a binary-counter cascade of
    Chan updates (AddMomentsVec; at most one real merge per level, then the final sweep of the stack into level 0:
    2 per level; 16-bit input merges two float vectors per chunk: 2 more), then the V lanes merged one after another
    into the remainder's moments (AddMoments; the remainder is at most 2V - 1 sequential Welford updates). Welford/
    Chan: the variance keeps the first-order mean term.
    rms_norm: the composite aten/src/ATen/native/layer_norm.cpp rms_norm_symint (pow(2).mean in float32), whose sum
    is SumKernel.cpp cascade_sum: multi_row_sum over 4 ILP rows of V lanes, 4 levels of runs of 16 (level_power 4
    while a lane holds < 2^16 terms: d < 2^18 V), then 3 level merges, 3 + 3 ILP merges, the V lanes one after
    another, and a split of one row across at most torch.get_num_threads() threads (one more addition each).
    proofs.aten_sum emulates it addition by addition (with TensorIteratorReduce.cpp's split of a one-row call of
    d > 32768 into per-thread chunks; 16-bit x: the composite upcasts to float32 first, so the same float32 tree).
    Both compute r = 1/std::sqrt(t) or Vectorized::rsqrt (a divide by a correctly rounded sqrt).
    """
    import platform

    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    if platform.machine().lower() not in ("x86_64", "amd64") or capability not in ("DEFAULT", "AVX2", "AVX512"):
        return {}
    lanes, threads = 8, torch.get_num_threads()
    return {
        "layernorm": Reduction(run=16, lanes=lanes, level_cost=2, finish=lanes + max(2, 2 * lanes - 17),
                               exact_tree="aten_moments", device="cpu", contract=capability != "DEFAULT",
                               source="ATen cpu/moments_utils.h RowwiseMomentsImpl (Welford chunks of 16 vectors, "
                                      "binary Chan cascade, lanes merged sequentially; node by node for float32 "
                                      "rows: proofs.aten_moments)"),
        "rmsnorm": Reduction(run=16, lanes=4 * lanes, fan=16, level_cost=16, finish=9 + lanes + threads,
                             max_width=2**18 * lanes, exact_tree="aten_cascade_sum", device="cpu",
                             source="ATen cpu/SumKernel.cpp cascade_sum (multi_row_sum: 4 ILP rows, levels of 16; "
                                    "lanes merged sequentially; a row split over threads; node by node: "
                                    "proofs.aten_sum)"),
    }


def _load() -> list[Kernel]:
    declared = cpu_reductions()
    return [
        Kernel("torch:layernorm", "layernorm", layernorm, spec="torch", description="F.layer_norm",
               reduction=declared.get("layernorm"), **aten_statistics.LAYER_NORM,
               statistics=layernorm_statistics),
        Kernel("torch:rmsnorm", "rmsnorm", rmsnorm, spec="torch", description="F.rms_norm",
               reduction=declared.get("rmsnorm"), statistics=rmsnorm_statistics),
        Kernel("torch:dropout", "dropout", dropout, spec="torch", description="F.dropout (training)"),
    ]


BUILTINS = [Builtin("torch", "torch.nn.functional layer_norm, rms_norm, dropout", _load)]
