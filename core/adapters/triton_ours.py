"""The ``triton`` built-in: normverify's own Triton kernels (:mod:`kernels`), differentiable.

    triton:layernorm   kernels.layer_norm(x, weight, bias, eps)
    triton:rmsnorm     kernels.rms_norm(x, weight, eps)
    triton:dropout     kernels.dropout(x, p, seed)

Compiled Triton on a CUDA device (float32, float16, bfloat16); Triton's interpreter on the CPU
(float32, float16: the interpreter cannot compute in bfloat16).
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from core.kernel import Builtin, Kernel

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


def _load() -> list[Kernel]:
    import kernels

    device, dtypes = device_and_dtypes()
    where = "compiled" if device == "cuda" else "Triton interpreter"
    return [
        Kernel("triton:layernorm", "layernorm", kernels.layer_norm, spec="triton", device=device, dtypes=dtypes,
               description=f"our Triton LayerNorm, fwd+bwd ({where})"),
        Kernel("triton:rmsnorm", "rmsnorm", kernels.rms_norm, spec="triton", device=device, dtypes=dtypes,
               description=f"our Triton RMSNorm, fwd+bwd ({where})"),
        Kernel("triton:dropout", "dropout", kernels.dropout, spec="triton", device=device, dtypes=dtypes,
               description=f"our Triton inverted dropout, Philox RNG ({where})"),
    ]


BUILTINS = [Builtin("triton", "normverify's own Triton LayerNorm, RMSNorm and dropout (kernels/)", _load,
                    unavailable)]
