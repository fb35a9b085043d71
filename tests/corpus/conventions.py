"""Kernels that follow a convention of proofs.mechanisms on purpose: declared, they are correct (checked against the
convention's derived model); undeclared, the suite must fail them and the diagnosis must name the convention.

    RMS_LLAMA_CASTING            Hugging Face's LlamaRMSNorm as written: weight * (x_f32 * rstd).to(dtype): x_hat
                                 rounded to storage before the weight multiply (double_rounding), undeclared
    RMS_LLAMA_CASTING_DECLARED   the same function, ``conventions=("double_rounding",)``, ``output_dtype="promoted"``
    LN_TORCH_UNDECLARED          F.layer_norm as a plain function: on the CPU torch keeps mean and rstd in the
                                 storage dtype for the backward (storage_statistics_backward), undeclared
    ADD_LN_FLOAT32_SUM           fused add + LayerNorm as flash-attention computes it with a 16-bit residual: y from
                                 the float32 sum x + residual, residual_out that sum rounded to float16; undeclared
    ADD_LN_FLOAT32_SUM_DECLARED  the same, ``normalizes="float32_sum"``: correct
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from core.kernel import Kernel
from corpus.statistics import FLOAT32_ARITHMETIC

SPEC = "tests/corpus/conventions.py:"


def rmsnorm_llama_casting(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """Llama's casting as transformers writes it: h = x_f32 * rsqrt(mean(x_f32^2) + eps), then
    ``weight * h.to(x.dtype)``: x_hat rounded to the storage dtype, then the weight multiply rounded again."""
    hidden = x.to(torch.float32)
    hidden = hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + eps)
    hidden = hidden.to(x.dtype)
    return hidden if weight is None else weight * hidden


def layernorm_torch(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                    eps: float) -> torch.Tensor:
    """F.layer_norm, declaring nothing: its CPU backward rebuilds x_hat from mean and rstd kept in float16/bfloat16."""
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def add_layernorm_float32_sum(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None,
                              bias: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """flash-attention's fused add + LayerNorm with a 16-bit residual: h = x_f32 + residual_f32 kept in float32 for
    the statistics and y, residual_out = h rounded to the residual's dtype (and the backward at residual_out)."""
    h = x.float() + residual.float()
    y = F.layer_norm(h, (h.shape[-1],), None if weight is None else weight.float(),
                     None if bias is None else bias.float(), eps)
    return y.to(x.dtype), h.to(residual.dtype)


def _describe(fn, note: str) -> str:
    return " ".join(fn.__doc__.split()) + " " + note


RMS_LLAMA_CASTING = Kernel("rms_llama_casting", "rmsnorm", rmsnorm_llama_casting, spec=SPEC + "RMS_LLAMA_CASTING",
                           description=_describe(rmsnorm_llama_casting, "Undeclared: must fail rms.forward, "
                                                 "diagnosed as double_rounding."))
RMS_LLAMA_CASTING_DECLARED = Kernel(
    "rms_llama_casting_declared", "rmsnorm", rmsnorm_llama_casting, spec=SPEC + "RMS_LLAMA_CASTING_DECLARED",
    conventions=("double_rounding",), output_dtype="promoted", dtypes=FLOAT32_ARITHMETIC,
    description=_describe(rmsnorm_llama_casting, "Declared (with transformers' output dtype, promoted: float32 for "
                                                 "float32 weights with 16-bit x): correct."))
LN_TORCH_UNDECLARED = Kernel("ln_torch_undeclared", "layernorm", layernorm_torch, spec=SPEC + "LN_TORCH_UNDECLARED",
                             description=_describe(layernorm_torch, "Must fail ln.jacobian (CPU), diagnosed as "
                                                   "storage_statistics_backward."))
ADD_LN_FLOAT32_SUM = Kernel(
    "add_ln_float32_sum", "add_layernorm", add_layernorm_float32_sum, spec=SPEC + "ADD_LN_FLOAT32_SUM",
    dtypes=(torch.float16,),
    description=_describe(add_layernorm_float32_sum, "Undeclared: must fail add_ln.forward (y is not the norm of "
                                                     "the float16 residual_out)."))
ADD_LN_FLOAT32_SUM_DECLARED = Kernel(
    "add_ln_float32_sum_declared", "add_layernorm", add_layernorm_float32_sum,
    spec=SPEC + "ADD_LN_FLOAT32_SUM_DECLARED", dtypes=(torch.float16,), normalizes="float32_sum",
    description=_describe(add_layernorm_float32_sum, "Declared normalizes='float32_sum': correct."))
