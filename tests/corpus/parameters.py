"""Broken kernels that are wrong only when weight and bias come in another dtype than x (issue 19): float32
parameters with 16-bit x (autocast, mixed-precision training) or 16-bit parameters with float32 x (inference
stacks that keep 16-bit weights). With parameters in x's dtype each is the textbook float32 implementation
(:func:`tests.corpus.statistics._normalize`) and correct, so only the mixed-dtype draws can catch it.

Modelled on public bugs of this class: PyTorch's CPU/MPS ``layer_norm`` with mixed input/parameter dtypes (refused,
or computed after a cast of the parameters), RMSNorm kernels of vLLM/LightLLM-style stacks that cast the weight to
the activations' dtype, or the activations to the weight's, or bind a float32 weight pointer as the activations'
16-bit type. Each docstring says the defect and the claim that must catch it.
"""

from __future__ import annotations

import torch

from core.registry import Kernel
from corpus.statistics import _layernorm_statistics, _normalize, _rmsnorm_statistics

SPEC = "tests/corpus/parameters.py:"


def _as(t: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    return None if t is None else t.to(dtype)


def layernorm_weight_rounded_to_x(x, weight, bias, eps):
    """Rounds float32 weight and bias to x's 16-bit dtype before use (``weight.to(x.dtype)``: the kernel's
    parameter pointers typed like x). Wrong by one 16-bit rounding of gamma xhat + beta's parts: invisible where
    |y| is large, far outside the bound where xhat gamma and beta cancel. Must fail ln.forward."""
    return _normalize(x, _as(weight, x.dtype), _as(bias, x.dtype), eps, _layernorm_statistics)


def rmsnorm_weight_rounded_to_x(x, weight, eps):
    """RMSNorm that rounds a float32 weight to x's 16-bit dtype before use (the weight cast to the activations'
    dtype, as RMSNorm layers of inference stacks do on load). The forward's extra error (one rounding of gamma) is
    at most about one output rounding; the backward's g' = gamma dy carries it into dx, where the terms of
    r (g' - xhat c2) cancel. Must fail rms.jacobian."""
    return _normalize(x, _as(weight, x.dtype), None, eps, _rmsnorm_statistics)


def layernorm_output_in_weight_dtype(x, weight, bias, eps):
    """Returns the weight's dtype (``y.to(weight.dtype)``: the output allocated like the weight) instead of x's,
    torch's rule. Correct values, wrong dtype: float32 activations leaking into a bfloat16 model under autocast,
    or float16 outputs of a float32 model. Must fail ln.forward (output-dtype rule)."""
    y = _normalize(x, weight, bias, eps, _layernorm_statistics)
    return y if weight is None else y.to(weight.dtype)


def rmsnorm_statistics_in_weight_dtype(x, weight, eps):
    """Casts x to the weight's dtype and computes everything there (``x.to(weight.dtype)``, statistics included):
    with a 16-bit weight and float32 x the mean of squares and the normalization run in 16 bits, and the result
    is cast back to x's float32. Must fail rms.forward (errors ~ u_16bit against a float32 bound)."""
    if weight is None or weight.dtype == x.dtype:
        return _normalize(x, weight, None, eps, _rmsnorm_statistics)
    h = x.to(weight.dtype)
    y = h * torch.rsqrt(h.square().mean(-1, keepdim=True) + eps) * weight
    return y.to(x.dtype)


def layernorm_weight_reinterpreted(x, weight, bias, eps):
    """Binds a float32 weight as x's 16-bit type (a Triton pointer declared ``tl.float16``, a C++ ``data_ptr<at::Half>``
    on a float32 tensor): reads the first d half-words of the float32 buffer, i.e. the bit halves of the weights.
    Must fail ln.forward."""
    d = x.shape[-1]
    if weight is not None and weight.dtype.itemsize > x.dtype.itemsize:
        weight = weight.detach().contiguous().view(x.dtype)[:d]
    return _normalize(x, weight, bias, eps, _layernorm_statistics)


def add_layernorm_weight_rounded_to_x(x, residual, weight, bias, eps):
    """Fused add + LayerNorm (h = x + residual in the residual's dtype, y = LN(h) in float32 rounded once) that rounds
    float32 weight and bias to x's 16-bit dtype first (the fused kernel's parameter pointers typed like x, as
    add-norm kernels written for one activation dtype do). Must fail add_ln.forward."""
    h = x + residual
    return _normalize(h, _as(weight, x.dtype), _as(bias, x.dtype), eps, _layernorm_statistics), h


LN_WEIGHT_ROUNDED_TO_X = Kernel("ln-weight-rounded-to-x", "layernorm", layernorm_weight_rounded_to_x,
                                spec=SPEC + "LN_WEIGHT_ROUNDED_TO_X",
                                description="float32 weight/bias rounded to 16-bit x first: fails ln.forward")
RMS_WEIGHT_ROUNDED_TO_X = Kernel("rms-weight-rounded-to-x", "rmsnorm", rmsnorm_weight_rounded_to_x,
                                 spec=SPEC + "RMS_WEIGHT_ROUNDED_TO_X",
                                 description="float32 weight rounded to 16-bit x first: fails rms.jacobian")
LN_OUTPUT_IN_WEIGHT_DTYPE = Kernel("ln-output-in-weight-dtype", "layernorm", layernorm_output_in_weight_dtype,
                                   spec=SPEC + "LN_OUTPUT_IN_WEIGHT_DTYPE",
                                   description="output in the weight's dtype, not x's: fails ln.forward")
RMS_STATISTICS_IN_WEIGHT_DTYPE = Kernel("rms-statistics-in-weight-dtype", "rmsnorm",
                                        rmsnorm_statistics_in_weight_dtype,
                                        spec=SPEC + "RMS_STATISTICS_IN_WEIGHT_DTYPE",
                                        description="x cast to a 16-bit weight's dtype, statistics there: fails "
                                                    "rms.forward")
LN_WEIGHT_REINTERPRETED = Kernel("ln-weight-reinterpreted", "layernorm", layernorm_weight_reinterpreted,
                                 spec=SPEC + "LN_WEIGHT_REINTERPRETED",
                                 description="a float32 weight read as 16-bit values: fails ln.forward")
ADD_LN_WEIGHT_ROUNDED_TO_X = Kernel("add-ln-weight-rounded-to-x", "add_layernorm", add_layernorm_weight_rounded_to_x,
                                    spec=SPEC + "ADD_LN_WEIGHT_ROUNDED_TO_X",
                                    description="fused add + LayerNorm, float32 weight/bias rounded to 16-bit x "
                                                "first: fails add_ln.forward")
