"""flash-attention's Triton LayerNorm and RMSNorm (``flash_attn/ops/triton/layer_norm.py``) as built-ins, unmodified.

    flash-attn-layernorm   layer_norm_fn(x, weight, bias, eps=eps)
    flash-attn-rmsnorm     rms_norm_fn(x, weight, None, eps=eps)
    flash-attn-fused       the fused kinds through the same functions, the residual stream in float32
                           (docs/validate-your-kernel.md): layer_norm_fn / rms_norm_fn with residual=residual.float(),
                           prenorm=True; dropout_add_layernorm with dropout_p=p, torch's global RNG seeded inside a
                           forked state (its per-row dropout seeds come from torch's generator; the caller's state is
                           restored). ``residual_in_fp32=True`` applies only
                           when residual is None (the first layer): residual_out has the residual's dtype, so a model
                           with residual_in_fp32 passes every later layer a float32 residual, as here.

Both require a weight: a test's ``None`` becomes ones. Without a GPU: ``flash_attn/__init__.py`` imports the
CUDA attention extension (``flash_attn_2_cuda``), which the Triton norms do not use and which is not built
here, so the package's submodules are imported without running its ``__init__``; the module itself asks
the CUDA device for its warp size at import, for its SM count in the backward (one program per SM, times
8) and enters ``torch.cuda.device(x.device.index)``: the CUDA host stand-ins of kernels.interpret answer
(4 SMs: 32 backward programs).

Install without building the CUDA extension (about 30 s; it needs the torch already installed, hence no
build isolation):

    FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE FLASH_ATTENTION_FORCE_BUILD=TRUE \\
        pip install --no-build-isolation --no-deps flash-attn
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from core.adapters._thirdparty import (
    COMPILED_TRITON,
    missing,
    prepare,
    seeded_global_rng,
    weight_or_ones,
    without_package_init,
)
from core.kernel import Builtin, Kernel

if TYPE_CHECKING:
    import torch

RECIPE = ("FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE FLASH_ATTENTION_FORCE_BUILD=TRUE "
          "pip install --no-build-isolation --no-deps flash-attn")


def _layer_norm_module():
    prepare()
    without_package_init("flash_attn")
    return importlib.import_module("flash_attn.ops.triton.layer_norm")


def _load_layernorm() -> list[Kernel]:
    layer_norm_fn = _layer_norm_module().layer_norm_fn

    def layernorm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                  eps: float) -> torch.Tensor:
        return layer_norm_fn(x, weight_or_ones(weight, x), bias, eps=eps)

    return [Kernel("flash-attn-layernorm", "layernorm", layernorm, spec="flash-attn-layernorm",
                   description="flash-attention layer_norm_fn (Triton)", on_cuda=COMPILED_TRITON,
                   compiles_per_width=True)]


def _load_rmsnorm() -> list[Kernel]:
    rms_norm_fn = _layer_norm_module().rms_norm_fn

    def rmsnorm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
        return rms_norm_fn(x, weight_or_ones(weight, x), None, eps=eps)

    return [Kernel("flash-attn-rmsnorm", "rmsnorm", rmsnorm, spec="flash-attn-rmsnorm",
                   description="flash-attention rms_norm_fn (Triton)", on_cuda=COMPILED_TRITON,
                   compiles_per_width=True)]


def _load_fused() -> list[Kernel]:
    module = _layer_norm_module()

    def add_layernorm(x, residual, weight, bias, eps):
        return module.layer_norm_fn(x, weight_or_ones(weight, x), bias, residual=residual.float(), eps=eps,
                                    prenorm=True)

    def add_rmsnorm(x, residual, weight, eps):
        return module.rms_norm_fn(x, weight_or_ones(weight, x), None, residual=residual.float(), eps=eps,
                                  prenorm=True)

    def dropout_add_layernorm(x, residual, weight, bias, eps, p, seed):
        with seeded_global_rng(seed, x):
            return module.layer_norm_fn(x, weight_or_ones(weight, x), bias, residual=residual.float(), eps=eps,
                                        dropout_p=p, prenorm=True)

    return [Kernel(f"flash-attn-fused:{kind}", kind, fn, spec="flash-attn-fused", residual_dtype="float32",
                   description=f"flash-attention {name}(..., residual=residual.float(), prenorm=True)",
                   on_cuda=COMPILED_TRITON, compiles_per_width=True)
            for kind, fn, name in (("add_layernorm", add_layernorm, "layer_norm_fn"),
                                   ("add_rmsnorm", add_rmsnorm, "rms_norm_fn"),
                                   ("dropout_add_layernorm", dropout_add_layernorm, "layer_norm_fn(dropout_p=p)"))]


BUILTINS = [
    Builtin("flash-attn-layernorm", "flash-attention LayerNorm (Triton; CPU through the interpreter)",
            _load_layernorm, missing("flash_attn", RECIPE)),
    Builtin("flash-attn-rmsnorm", "flash-attention RMSNorm (Triton; CPU through the interpreter)",
            _load_rmsnorm, missing("flash_attn", RECIPE)),
    Builtin("flash-attn-fused", "flash-attention add + LayerNorm/RMSNorm and dropout + add + LayerNorm, residual_out "
            "in float32 (Triton; CPU through the interpreter)", _load_fused, missing("flash_attn", RECIPE)),
]
