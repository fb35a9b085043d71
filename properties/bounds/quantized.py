"""What the quantized-output kinds' checks compare against (claims ln_quant.*, rms_quant.*, add_rms_quant.*;
proofs/claims/quantization.py): the interval the kernel's own y lies in, and from it the intervals of q, the scale,
and the bound of the dequantized output.

The kernel's y is not returned. The float64 oracle y* = N(h) (LayerNorm or RMSNorm) on the kernel's inputs (h: x or
the returned residual_out) and the norm's error-model bound B32 for a float32 output
(proofs.error_model.forward_bound with u_out = u_32, the kernel's declared reduction and flush-to-zero) give the
float32 y in [y* - B32, y* + B32], hence, y being a float32 number, in [rn32(y* - B32), rn32(y* + B32)]; declared
``quantizes="storage"``, y rounded once more to x's dtype lies in the roundings of those ends (rounding is
monotone). Q is monotone, and v = y / s (or y s) is a float32 operation (one rounding, two through a reciprocal): q
lies in [Q(v_lo), Q(v_hi)] with v's interval widened by 2 u_32 relative; a single value unless a rounding boundary
of Q is inside.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from core.boundary import HOST, to_kernel, to_oracle
from core.kernel import Kernel
from proofs import error_model
from proofs.quantization import FORMATS, Format, quantize
from properties import norms
from properties.bounds import tolerance

U32, U64 = error_model.unit_roundoff("float32"), error_model.unit_roundoff("float64")
SCALE_ROUNDING = 2 * U32 + U32**2  # of the dynamic scale: at most two float32 roundings (dynamic_scale)


def format_of(quant_dtype: torch.dtype) -> Format:
    """The proofs.quantization format of a torch dtype (float8_e4m3fn, float8_e5m2, int8)."""
    return FORMATS[str(quant_dtype).removeprefix("torch.")]


def _rounded(values: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """float64 values rounded to nearest float32, then to ``dtype`` (the float32 y's rounding to x's dtype)."""
    return to_oracle(to_kernel(values, torch.float32, HOST).to(dtype))


@dataclass(frozen=True)
class DeclaredY:
    """The kernel's y, as the suite knows it: the exact y* (float64), the interval [low, high] of the values the
    kernel quantized (the declared ones), and ``bound``: |y_declared - y*| <= bound elementwise."""

    exact: np.ndarray
    low: np.ndarray
    high: np.ndarray
    bound: np.ndarray


def declared_y(kernel: Kernel, h: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None,
               bias: torch.Tensor | None, eps: float) -> DeclaredY:
    """The interval of the y the kernel quantizes (module docstring), from the norm's input h (x or residual_out);
    ``x`` gives the storage dtype."""
    exact = norms.reference(kernel, h, weight, bias, eps)
    u_acc = tolerance.operand_roundoffs(kernel, h, weight, bias)["acc"]
    gamma, beta = norms.gammas(kernel, weight, bias)
    b32 = error_model.forward_bound(norms.as_float64(h), gamma, beta, eps, u_acc,
                                    U32, kernel.record.norm, tolerance.bound_in_use(),
                                    declared=tolerance.declared_reduction(kernel, h),
                                    flush_to_zero=kernel.flush_to_zero)
    b32 = np.broadcast_to(np.asarray(b32, dtype=np.float64), exact.shape)
    dtype = x.dtype if kernel.quantization.quantizes == "storage" else torch.float32
    low, high = _rounded(exact - b32, dtype), _rounded(exact + b32, dtype)
    return DeclaredY(exact, low, high, np.maximum(np.abs(high - exact), np.abs(exact - low)))


def _exact_in_float32(v: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Where the float32 operation giving v is exact: s a power of two (so is its float32 reciprocal) and v a float32
    number of the normal range (or 0): y / s, y fl(1/s) and y s are then v itself, whichever form the kernel uses."""
    mantissa = np.frexp(scale)[0]
    normal = (np.abs(v) >= np.finfo(np.float32).tiny) & (np.abs(v) <= np.finfo(np.float32).max)
    with np.errstate(over="ignore", invalid="ignore"):
        representable = v.astype(np.float32).astype(np.float64) == v
    return (np.abs(mantissa) == 0.5) & ((v == 0) | (normal & representable))


def scaled(kernel: Kernel, low: np.ndarray, high: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The interval of v = y / s (declared "divide") or y s ("multiply") for y in [low, high], s > 0, widened by
    2 u_32 relative for the float32 operation, except where that operation is exact (:func:`_exact_in_float32`: a
    power-of-two s, so that a y exactly on a tie of Q gives the tie itself); where s = 0 (an all-zero row with no
    floor declared) y is 0: v = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if kernel.quantization.scale_convention == "multiply":
            ends = (low * scale, high * scale)
        else:
            ends = (np.where(scale > 0, low / scale, 0.0), np.where(scale > 0, high / scale, 0.0))
    v_low, v_high = np.minimum(*ends), np.maximum(*ends)
    return (np.where(_exact_in_float32(v_low, scale), v_low, v_low - 2 * U32 * np.abs(v_low)),
            np.where(_exact_in_float32(v_high, scale), v_high, v_high + 2 * U32 * np.abs(v_high)))


def quantized(kernel: Kernel, fmt: Format, v_low: np.ndarray, v_high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[Q(v_low), Q(v_high)] with the kernel's declared INT8 rounding and lowest value."""
    declared = kernel.quantization
    return tuple(quantize(v, fmt, declared.int8_rounding, declared.int8_minimum) for v in (v_low, v_high))


def dynamic_scale(kernel: Kernel, fmt: Format, y: DeclaredY) -> tuple[np.ndarray, np.ndarray]:
    """The interval of the per-row dynamic scale [..., 1]: max(amax / fmax, minimum_scale) with amax the largest |y|
    of the declared values' interval, within two float32 roundings (2 u_32 + u_32^2 relative: amax / fmax, or amax
    times fl(1/fmax) as torch's CUDA division by a Python number computes it, proofs.claims.quantization: .scales);
    its inverse for "multiply"."""
    smallest = np.where(y.low > 0, y.low, np.where(y.high < 0, -y.high, 0.0))
    largest = np.maximum(np.abs(y.low), np.abs(y.high))
    floor = kernel.quantization.minimum_scale
    low = np.maximum(smallest.max(-1, keepdims=True) / fmt.fmax, floor) * (1 - SCALE_ROUNDING)
    high = np.maximum(largest.max(-1, keepdims=True) / fmt.fmax, floor) * (1 + SCALE_ROUNDING)
    if kernel.quantization.scale_convention == "multiply":
        with np.errstate(divide="ignore"):
            return (1 - 2 * U32) / high, (1 + 2 * U32) / low
    return low, high


def dequantized_bound(kernel: Kernel, fmt: Format, y: DeclaredY, scale: np.ndarray, v_low: np.ndarray,
                      v_high: np.ndarray) -> np.ndarray:
    """Bound on |q s - y*| (q / s for "multiply"): the declared y's bound, half the format's spacing at the larger
    end of |v| times the dequantizing factor, the float32 operation's 2 u_32 |y|, and for a saturated element the
    excess of |y| over fmax times that factor (proofs.claims.quantization: rms_quant.dequantized); and the float64
    rounding of the dequantized value itself (q s is exact in float64, q / s is not)."""
    factor = 1.0 / scale if kernel.quantization.scale_convention == "multiply" else scale
    reach = np.maximum(np.abs(v_low), np.abs(v_high))
    magnitude = np.abs(y.exact) + y.bound
    excess = np.maximum(magnitude - fmt.fmax * factor, 0.0)
    return y.bound + factor * fmt.quantum(reach) / 2 + (2 * U32 + U64) * magnitude + excess
