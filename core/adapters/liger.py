"""Liger-Kernel's Triton LayerNorm and RMSNorm as built-ins, called exactly as Liger's own modules call them.

    liger-layernorm       LigerLayerNormFunction.apply(x, w, b, eps)
    liger-rmsnorm-llama   LigerRMSNormFunction.apply(x, w, eps, 0.0, "llama")   LigerRMSNorm's defaults
    liger-rmsnorm-gemma   LigerRMSNormFunction.apply(x, w, eps, 1.0, "gemma")   LigerRMSNormForGemma: (1 + w)
    liger-rmsnorm-none    LigerRMSNormFunction.apply(x, w, eps, 0.0, "none")    everything in the input dtype

Liger's defaults are kept, ``in_place=True`` included (its backward writes dX into the upstream
gradient's buffer): the suite reports what a user of these defaults gets. Casting modes: ``llama``
computes rstd in fp32 and multiplies by w in the input dtype, ``gemma`` computes all in fp32 and
casts at the end, ``none`` computes in the input dtype (eps and offset cast to it as well).

On a CUDA device the kernels compile as usual; on CPU tensors they run in Triton's interpreter
through :mod:`kernels.interpret` (fp32 and fp16; the interpreter cannot compute in bfloat16).
``LigerLayerNormFunction`` needs a weight and a bias: a test's ``None`` becomes ones / zeros.
``LigerRMSNormFunction`` takes ``W=None`` itself (then no weight and no offset: scale 1).
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from core.adapters._thirdparty import COMPILED_TRITON
from core.kernel import Builtin, Kernel

if TYPE_CHECKING:
    import torch

# builtin name -> (offset, casting mode, what it is)
RMS_MODES = {
    "liger-rmsnorm-llama": (0.0, "llama", "rstd in fp32, weight multiply in the input dtype (LigerRMSNorm)"),
    "liger-rmsnorm-gemma": (1.0, "gemma", "all in fp32, scale (1 + w) (LigerRMSNormForGemma)"),
    "liger-rmsnorm-none": (0.0, "none", "all in the input dtype"),
}
# casting mode -> the conventions (proofs.mechanisms) it follows: llama rounds x_hat to the input dtype before the
# weight multiply, in the forward and in dW (docs/findings.md [A], [B])
CONVENTIONS = {"llama": ("double_rounding",)}


def unavailable() -> str | None:
    for package in ("liger_kernel", "triton"):
        if importlib.util.find_spec(package) is None:
            return f"the {package} package is not installed (pip install 'normverify[thirdparty]')"
    return None


def prepare() -> None:
    """Let Liger's @triton.jit kernels run on CPU tensors (the CUDA path stays compiled)."""
    from kernels import interpret

    interpret.enable()


def _load_layernorm() -> list[Kernel]:
    prepare()
    import torch
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction

    def layernorm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                  eps: float) -> torch.Tensor:
        d = x.shape[-1]
        weight = torch.ones(d, dtype=x.dtype, device=x.device) if weight is None else weight
        bias = torch.zeros(d, dtype=x.dtype, device=x.device) if bias is None else bias
        return LigerLayerNormFunction.apply(x, weight, bias, eps)

    return [Kernel("liger-layernorm", "layernorm", layernorm, spec="liger-layernorm",
                   description="Liger-Kernel LigerLayerNormFunction (Triton)", on_cuda=COMPILED_TRITON)]


def _rmsnorm_loader(name: str):
    offset, casting_mode, description = RMS_MODES[name]

    def load() -> list[Kernel]:
        prepare()
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        def rmsnorm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
            return LigerRMSNormFunction.apply(x, weight, eps, offset, casting_mode)

        return [Kernel(name, "rmsnorm", rmsnorm, spec=name, weight_offset=offset,
                       description=f"Liger-Kernel LigerRMSNormFunction, casting mode {casting_mode!r}: {description}",
                       conventions=CONVENTIONS.get(casting_mode, ()), on_cuda=COMPILED_TRITON)]

    return load


BUILTINS = [
    Builtin("liger-layernorm", "Liger-Kernel LayerNorm (Triton; CPU through the interpreter)", _load_layernorm,
            unavailable),
    *(Builtin(name, f"Liger-Kernel RMSNorm, casting mode {mode!r}, offset {offset:g}", _rmsnorm_loader(name),
              unavailable) for name, (offset, mode, _) in RMS_MODES.items()),
]
