"""The quantization formats of the quantized-output kinds, and their rounding Q as float64 numpy (no torch).

A format is a grid of values: FP8 (float8_e4m3fn: 3 mantissa bits, smallest normal exponent -6, largest value 448,
no infinities; float8_e5m2: 2 mantissa bits, smallest normal exponent -14, largest finite 57344) or INT8 (the
integers, largest 127). Q(v) is the grid value nearest v, ties to even (FP8; INT8's declared rounding), saturated:

    Q(v) = clamp(R(v), lowest, fmax),   R(v) = rint(v / quantum(v)) * quantum(v)

with quantum(v) = 2^(max(floor(log2 |v|), e_min) - m) for FP8 (the spacing of the binade of v, the subnormal spacing
below the smallest normal) and 1 for INT8; lowest = -fmax (INT8: the declared -128 or -127). Q is monotone
(non-decreasing) in v, which the checks use: v in [a, b] gives Q(v) in [Q(a), Q(b)]. proofs/claims/quantization.py
derives these facts and the error bound |Q(v) - v| <= quantum(v) / 2 for |v| <= fmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Format:
    """One target format: ``fmax`` its largest finite value, ``mantissa`` bits and ``min_exponent`` (the smallest
    normal binade's) for a float format; ``integer`` for INT8 (quantum 1)."""

    name: str
    fmax: float
    mantissa: int = 0
    min_exponent: int = 0
    integer: bool = False

    def quantum(self, v: np.ndarray) -> np.ndarray:
        """The grid's spacing at |v| (at |v| <= fmax; beyond, the top binade's)."""
        magnitude = np.minimum(np.abs(np.asarray(v, dtype=np.float64)), self.fmax)
        if self.integer:
            return np.ones_like(magnitude)
        with np.errstate(divide="ignore"):
            exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
        exponent = np.maximum(np.where(magnitude > 0, exponent, self.min_exponent), self.min_exponent)
        return np.exp2(exponent - self.mantissa)


FORMATS = {
    "float8_e4m3fn": Format("float8_e4m3fn", 448.0, mantissa=3, min_exponent=-6),
    "float8_e5m2": Format("float8_e5m2", 57344.0, mantissa=2, min_exponent=-14),
    "int8": Format("int8", 127.0, integer=True),
}


def lowest(fmt: Format, int8_minimum: int = -128) -> float:
    """The format's lowest value Q saturates at: -fmax, or INT8's declared minimum."""
    return float(int8_minimum) if fmt.integer else -fmt.fmax


def quantize(v: np.ndarray, fmt: Format, int8_rounding: str = "half_even", int8_minimum: int = -128) -> np.ndarray:
    """Q(v), exactly, in float64: the nearest grid value (ties to even; INT8 ``"half_away"``: ties away from zero),
    clamped to [lowest, fmax]. NaN stays NaN. v / quantum(v) is exact (a power-of-two scaling of a float64)."""
    v = np.asarray(v, dtype=np.float64)
    q = fmt.quantum(v)
    steps = v / q
    if fmt.integer and int8_rounding == "half_away":
        rounded = np.sign(steps) * np.floor(np.abs(steps) + 0.5)
    else:
        rounded = np.rint(steps)  # half to even
    return np.clip(rounded * q, lowest(fmt, int8_minimum), fmt.fmax)
