"""Broken quantized-output kernels (kinds rmsnorm_quant, add_rmsnorm_quant; issue 29): the torch reference of
core.adapters.quantized (RMSNorm in float32, y rounded to x's dtype where declared "storage", q = Q(y / s) clamped to
the format's range) with exactly one of the reported bugs of fused quant norms; the manifest
(tests/corpus/__init__.py) lists the claim that must catch each.

    RMS_QUANT_AMAX_UNROUNDED        declared "storage" (the rounded y is quantized), but amax is taken of the float32
                                    y (TransformerEngine PR 2355)                                 -> rms_quant.scales
    RMS_QUANT_SCALE_INVERTED        a static scale multiplied, not divided by (the scale and its inverse
                                    confused)                                                     -> rms_quant.values
    RMS_QUANT_NO_SATURATION         no clamp to the format's range: e5m2 overflows to inf, int8 wraps around
                                    (CPU e4m3fn conversion happens to saturate)                -> rms_quant.saturation
    ADD_RMS_QUANT_TOKEN_SCALE_UNROUNDED  per-token scale from the unrounded (float32) norm while the rounded y is
                                    quantized, in the fused add kind                          -> add_rms_quant.scales
    RMS_QUANT_INVERSE_DECLARED      the multiply convention, declared (scale_convention="multiply": q = Q(y s),
                                    dynamic scale fmax / amax): correct
    ADD_RMS_QUANT_SYMMETRIC_INT8    INT8 clamped to [-127, 127], declared (int8_minimum=-127): correct
"""

from __future__ import annotations

import torch

from core.adapters.quantized import MINIMUM_SCALE, quantize, rms_float32
from core.kernel import Kernel, Quantization

SPEC = "tests/corpus/quantized.py:"
DECLARED = Quantization(minimum_scale=MINIMUM_SCALE)


def _fmax(quant_dtype: torch.dtype) -> float:
    return float(torch.iinfo(quant_dtype).max if not quant_dtype.is_floating_point else torch.finfo(quant_dtype).max)


def _scale_of(y: torch.Tensor, quant_dtype: torch.dtype) -> torch.Tensor:
    """The dynamic per-row scale max(amax / fmax, MINIMUM_SCALE) of y."""
    return torch.clamp(y.abs().amax(-1, keepdim=True) / _fmax(quant_dtype), min=MINIMUM_SCALE)


def _amax_unrounded(x, weight, eps, scale, quant_dtype):
    y32 = rms_float32(x, weight, eps)
    if scale is None:
        scale = _scale_of(y32, quant_dtype)  # the bug: amax of the float32 y, the rounded y quantized below
    return quantize(y32.to(x.dtype).float(), scale, quant_dtype)


def _scale_inverted(x, weight, eps, scale, quant_dtype):
    y = rms_float32(x, weight, eps).to(x.dtype).float()
    if scale is None:
        return quantize(y, None, quant_dtype)
    q, _ = quantize(y, 1.0 / scale, quant_dtype)  # the bug: y * scale
    return q, scale


def _no_saturation(x, weight, eps, scale, quant_dtype):
    y = rms_float32(x, weight, eps).to(x.dtype).float()
    s = _scale_of(y, quant_dtype) if scale is None else scale
    v = y / s
    if not quant_dtype.is_floating_point:
        v = torch.round(v)  # the bug: no clamp, int8 wraps around
    return v.to(quant_dtype), s


def _add_token_scale_unrounded(x, residual, weight, eps, scale, quant_dtype):
    h = x if residual is None else (x.float() + residual.float()).to(residual.dtype)
    y32 = rms_float32(h, weight, eps)
    s = _scale_of(y32, quant_dtype) if scale is None else scale  # the bug: from the unrounded norm
    q, _ = quantize(y32.to(x.dtype).float(), s, quant_dtype)
    return q, s, h


def _inverse_declared(x, weight, eps, scale, quant_dtype):
    y = rms_float32(x, weight, eps).to(x.dtype).float()
    if scale is None:
        _, divide = quantize(y, None, quant_dtype)
        scale = 1.0 / divide
    v = y * scale
    fmax = _fmax(quant_dtype)
    if not quant_dtype.is_floating_point:  # INT8's lowest value: -128 (the declared default)
        return torch.round(v).clamp(torch.iinfo(quant_dtype).min, fmax).to(quant_dtype), scale
    return v.clamp(-fmax, fmax).to(quant_dtype), scale


def _add_symmetric_int8(x, residual, weight, eps, scale, quant_dtype):
    h = x if residual is None else (x.float() + residual.float()).to(residual.dtype)
    q, s = quantize(rms_float32(h, weight, eps).to(x.dtype).float(), scale, quant_dtype)
    if not quant_dtype.is_floating_point:
        q = q.clamp(min=-127)
    return q, s, h


RMS_QUANT_AMAX_UNROUNDED = Kernel(
    "rms-quant-amax-unrounded", "rmsnorm_quant", _amax_unrounded, spec=SPEC + "RMS_QUANT_AMAX_UNROUNDED",
    quantization=DECLARED, description="amax of the float32 y, the rounded y quantized -> rms_quant.scales")
RMS_QUANT_SCALE_INVERTED = Kernel(
    "rms-quant-scale-inverted", "rmsnorm_quant", _scale_inverted, spec=SPEC + "RMS_QUANT_SCALE_INVERTED",
    quantization=DECLARED, description="a static scale multiplied, not divided by -> rms_quant.values")
RMS_QUANT_NO_SATURATION = Kernel(
    "rms-quant-no-saturation", "rmsnorm_quant", _no_saturation, spec=SPEC + "RMS_QUANT_NO_SATURATION",
    quantization=DECLARED, description="no clamp to the format's range -> rms_quant.saturation")
ADD_RMS_QUANT_TOKEN_SCALE_UNROUNDED = Kernel(
    "add-rms-quant-token-scale-unrounded", "add_rmsnorm_quant", _add_token_scale_unrounded,
    spec=SPEC + "ADD_RMS_QUANT_TOKEN_SCALE_UNROUNDED", quantization=DECLARED,
    description="per-token scale from the unrounded norm -> add_rms_quant.scales")
RMS_QUANT_INVERSE_DECLARED = Kernel(
    "rms-quant-inverse-declared", "rmsnorm_quant", _inverse_declared, spec=SPEC + "RMS_QUANT_INVERSE_DECLARED",
    quantization=Quantization(scale_convention="multiply", minimum_scale=MINIMUM_SCALE),
    description="q = Q(y * scale), declared (scale_convention='multiply'): correct")
ADD_RMS_QUANT_SYMMETRIC_INT8 = Kernel(
    "add-rms-quant-symmetric-int8", "add_rmsnorm_quant", _add_symmetric_int8,
    spec=SPEC + "ADD_RMS_QUANT_SYMMETRIC_INT8",
    quantization=Quantization(int8_minimum=-127, minimum_scale=MINIMUM_SCALE),
    description="INT8 in [-127, 127], declared (int8_minimum=-127): correct")
