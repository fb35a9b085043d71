"""The ``triton`` built-in: normverify's own Triton kernels (:mod:`kernels`), differentiable.

    triton:layernorm   kernels.layer_norm(x, weight, bias, eps)
    triton:rmsnorm     kernels.rms_norm(x, weight, eps)
    triton:dropout     kernels.dropout(x, p, seed)

Compiled Triton on a CUDA device (float32, float16, bfloat16); Triton's interpreter on the CPU
(float32, float16: the interpreter cannot compute in bfloat16).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import TYPE_CHECKING

from core.kernel import Builtin, Kernel
from proofs.reduction import NUMPY_PAIRWISE, Reduction

if TYPE_CHECKING:
    import torch


def unavailable() -> str | None:
    if importlib.util.find_spec("triton") is None:
        return "the triton package is not installed (pip install 'normverify[triton]')"
    return None


def device_and_dtypes() -> tuple[str, tuple[torch.dtype, ...]]:
    import torch

    if torch.cuda.is_available():
        return "cuda", (torch.float32, torch.float16, torch.bfloat16)
    return "cpu", (torch.float32, torch.float16)


def interpreted_reduction() -> Reduction:
    """The statistics' reduction of kernels/norm.py under TRITON_INTERPRET=1 (declared there only; compiled on a GPU,
    tl.sum is a per-thread run then a shuffle tree, not declared).

    _norm_forward is two-pass over the whole row (tutorial 05): the mean, then the squared deviations from it, each
    sum adding the row's blocks of kernels.rows.FORWARD_MAX_BLOCK into a float32 vector of BLOCK lanes one block
    after another (masked-off zeros add exactly), then one tl.sum over the lanes, which the interpreter computes
    with numpy's sum (triton/runtime/interpreter.py ReduceOps.sum), i.e. numpy's pairwise summation
    (numpy/_core/src/umath/loops_utils.h.src pairwise_sum: 8 accumulators over runs of at most 16 terms, a 3-level
    tree of them, halves above 128 terms). A row of one block: numpy's tree over the row zero-padded to BLOCK =
    next_pow2(d); a wider row: the lane additions, then numpy's tree over BLOCK = FORWARD_MAX_BLOCK lanes
    (``exact_tree="numpy_pow2"``, checked bit for bit against the kernel in tests/test_reduction.py). The variance
    is two-pass at every width."""
    from kernels.rows import FORWARD_MAX_BLOCK

    return dataclasses.replace(NUMPY_PAIRWISE, block=FORWARD_MAX_BLOCK, two_pass=True, exact_tree="numpy_pow2",
                               device="cpu",
                               source="kernels/norm.py _norm_forward: two-pass over the row, blocks added into "
                                      "BLOCK lanes, one numpy pairwise tl.sum of the lanes (interpreter)")


def layernorm_statistics(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, rstd) per row as kernels/norm.py's forward computes and stores them."""
    from kernels import norm

    return norm.forward(x, None, None, eps, rms=False)[1:]


def rmsnorm_statistics(x: torch.Tensor, eps: float) -> tuple[None, torch.Tensor]:
    """(None, rstd) per row as kernels/norm.py's forward computes and stores them."""
    from kernels import norm

    return norm.forward(x, None, None, eps, rms=True)[1:]


def _load() -> list[Kernel]:
    import kernels

    device, dtypes = device_and_dtypes()
    where = "compiled" if device == "cuda" else "Triton interpreter"
    declared = interpreted_reduction()  # for CPU tensors (the interpreter) only: Reduction.device
    flush = device == "cuda"  # compiled: tl.sqrt and fp32 division flush subnormals (docs/kernels.md)
    return [
        Kernel("triton:layernorm", "layernorm", kernels.layer_norm, spec="triton", device=device, dtypes=dtypes,
               description=f"our Triton LayerNorm, fwd+bwd ({where})", reduction=declared,
               statistics=layernorm_statistics, flush_to_zero=flush, second_derivatives=True),
        Kernel("triton:rmsnorm", "rmsnorm", kernels.rms_norm, spec="triton", device=device, dtypes=dtypes,
               description=f"our Triton RMSNorm, fwd+bwd ({where})", reduction=declared,
               statistics=rmsnorm_statistics, flush_to_zero=flush, second_derivatives=True),
        Kernel("triton:dropout", "dropout", kernels.dropout, spec="triton", device=device, dtypes=dtypes,
               description=f"our Triton inverted dropout, Philox RNG ({where})"),
    ]


BUILTINS = [Builtin("triton", "normverify's own Triton LayerNorm, RMSNorm and dropout (kernels/)", _load,
                    unavailable)]
