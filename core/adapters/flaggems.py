"""FlagGems' Triton LayerNorm and RMSNorm (the ``flag-gems`` package) as built-ins, their source unmodified.

    flaggems-layernorm   flag_gems.ops.layernorm.layer_norm (forward: y, mean, rstd) and layer_norm_backward,
                         paired as torch's autograd pairs aten::native_layer_norm with its backward (the two aten
                         ops FlagGems replaces on a GPU after ``flag_gems.enable()``): the backward gets dy, x,
                         the saved mean/rstd and output_mask = which of x, weight, bias need a gradient
    flaggems-rmsnorm     flag_gems.rms_norm(x, [d], weight, eps): FlagGems' own autograd.Function (RmsNorm)

Both kernels require a weight: a test's ``None`` becomes ones. FlagGems keeps the LayerNorm's saved mean and
rstd in the input dtype (its comment says single precision; its code allocates ``dtype=input.dtype``); the
built-in does not declare it: the suite reports what a user of FlagGems gets (docs/findings.md).

Without a GPU: FlagGems picks its vendor by running each vendor's command-line tool (nvidia-smi, ...) and
refuses to import when none answers ("No device were detected on your machine !"), unless ``GEMS_VENDOR``
names one: the built-in sets ``GEMS_VENDOR=nvidia`` when it is unset. Its import then reads the CUDA device's
name and count and its kernels call ``tle.program_id`` and combine masks with Python ``and``: the
interpreter support (kernels.interpret: helpers behind module aliases, and/or with Triton's semantics,
CUDA host stand-ins) covers all three.

Install (flag-gems 5.0.2 pins numpy==1.26.4 and exact versions of its other requirements, which would
replace this environment's numpy, so it is installed without them; its imports need sqlalchemy and PyYAML):

    pip install sqlalchemy pyyaml && pip install --no-deps flag-gems
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

from core.adapters._thirdparty import COMPILED_TRITON, missing, prepare, weight_or_ones
from core.kernel import Builtin, Kernel

if TYPE_CHECKING:
    import torch

RECIPE = "pip install sqlalchemy pyyaml && pip install --no-deps flag-gems"


def _import(name: str):
    os.environ.setdefault("GEMS_VENDOR", "nvidia")
    prepare()
    return importlib.import_module(name)


def _load_layernorm() -> list[Kernel]:
    import torch

    ops = _import("flag_gems.ops.layernorm")

    class NativeLayerNorm(torch.autograd.Function):
        """aten::native_layer_norm and native_layer_norm_backward as torch's autograd calls them."""

        @staticmethod
        def forward(ctx, x, weight, bias, eps):
            y, mean, rstd = ops.layer_norm(x, [x.shape[-1]], weight, bias, eps)
            ctx.save_for_backward(x, mean, rstd, weight, bias)
            return y

        @staticmethod
        def backward(ctx, dy):
            x, mean, rstd, weight, bias = ctx.saved_tensors
            output_mask = list(ctx.needs_input_grad[:3])
            dx, dweight, dbias = ops.layer_norm_backward(dy, x, [x.shape[-1]], mean, rstd, weight, bias, output_mask)
            return dx, dweight, dbias, None

    def layernorm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                  eps: float) -> torch.Tensor:
        return NativeLayerNorm.apply(x, weight_or_ones(weight, x), bias, eps)

    return [Kernel("flaggems-layernorm", "layernorm", layernorm, spec="flaggems-layernorm",
                   description="FlagGems layer_norm + layer_norm_backward (Triton), as aten's native_layer_norm",
                   on_cuda=COMPILED_TRITON, compiles_per_width=True)]


def _load_rmsnorm() -> list[Kernel]:
    flag_gems = _import("flag_gems")

    def rmsnorm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
        return flag_gems.rms_norm(x, [x.shape[-1]], weight_or_ones(weight, x), eps)

    return [Kernel("flaggems-rmsnorm", "rmsnorm", rmsnorm, spec="flaggems-rmsnorm",
                   description="FlagGems rms_norm (Triton autograd.Function RmsNorm)",
                   on_cuda=COMPILED_TRITON, compiles_per_width=True)]


BUILTINS = [
    Builtin("flaggems-layernorm", "FlagGems LayerNorm (Triton; CPU through the interpreter)", _load_layernorm,
            missing("flag_gems", RECIPE)),
    Builtin("flaggems-rmsnorm", "FlagGems RMSNorm (Triton; CPU through the interpreter)", _load_rmsnorm,
            missing("flag_gems", RECIPE)),
]
