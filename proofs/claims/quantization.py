"""LayerNorm, RMSNorm (and residual add + RMSNorm) with a quantized output: FP8 (e4m3fn, e5m2) or INT8, static or
dynamic per-row scale (issue 29; vLLM's fused quant RMSNorm kernels, TransformerEngine's FP8 norms).

The kernel computes y = N(h) in float32 (h = x, or residual_out = x + residual), within the norm's error model
(claim ``numerics.error_model``), optionally rounds it once to x's dtype (declared ``quantizes``: "storage" or
"float32"), and returns q = Q(y / s) (declared ``scale_convention`` "divide"; "multiply": Q(y s)), Q the format's
rounding with saturation (proofs.quantization), s the given scale (static) or per row s = max(amax / fmax, s_min)
with amax = max_i |y_i| over the declared y (dynamic, s returned). Claims, for each prefix ln_quant, rms_quant,
add_rms_quant:

    .values       q = Q(y / s) at the kernel's own y and s: exact wherever y's error-model interval holds no
                  rounding boundary of Q; either neighbour where it does (Q is monotone)
    .scales       the dynamic scale = max(amax / fmax, s_min) of the declared y (its inverse for "multiply");
                  a static scale returned as given
    .saturation   |y / s| > fmax gives q = +-fmax (INT8: the declared lowest value for negative v)
    .dequantized  |q s - y_exact| <= B_y + s quantum(v) / 2 + the float32 rounding of v, B_y the norm's bound
    .residual_out (fused) residual_out = x + residual as add_rms.residual_out
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from proofs.claims.base import Claim, no_derivation
from proofs.derivation import AtMost, Derivation, Equal, Fact
from proofs.quantization import FORMATS, Format, quantize

NAMES = {"ln_quant": "LayerNorm", "rms_quant": "RMSNorm", "add_rms_quant": "Fused add + RMSNorm"}

k = sp.Symbol("k", integer=True)
quantum, scale, amax, fmax, s_gap = sp.symbols("q_v s a_max f_max delta", positive=True)
t, y = sp.symbols("t y", real=True)
delta_1, delta_2 = sp.symbols("delta_1 delta_2", real=True)


def _grid(fmt: Format) -> np.ndarray:
    """Every non-negative finite value of an FP8 format, from its definition (bit fields: subnormals m 2^(e_min - M),
    normals (1 + m / 2^M) 2^e), independently of :meth:`Format.quantum`; INT8: 0..127."""
    if fmt.integer:
        return np.arange(0.0, 128.0)
    steps = 2**fmt.mantissa
    values = [m * 2.0 ** (fmt.min_exponent - fmt.mantissa) for m in range(steps)]
    exponent = fmt.min_exponent
    while True:
        binade = [(1 + m / steps) * 2.0**exponent for m in range(steps)]
        values += [value for value in binade if value <= fmt.fmax]
        if binade[-1] >= fmt.fmax:
            return np.array(sorted(set(values)))
        exponent += 1


def _largest_values() -> Derivation:
    return Derivation((
        Equal(sp.Rational(7, 4) * 2**8, 448, r"e4m3fn: the largest finite value is $1.110_2 \cdot 2^8$ (the code "
              r"$1.111_2 \cdot 2^8$ is NaN, there is no infinity)"),
        Equal(sp.Rational(7, 4) * 2**15, 57344, r"e5m2: the largest finite value is $1.11_2 \cdot 2^{15}$"),
        Equal(2**7 - 1, 127, r"INT8: $2^7 - 1$; the lowest is $-128$ or, declared symmetric, $-127$"),
        Fact(r"\max\,\mathrm{grid} = f_{\max}", "the grids enumerated from the bit fields end at these values",
             lambda: all(_grid(fmt)[-1] == fmt.fmax for fmt in FORMATS.values())),
    ))


def _rounding() -> Derivation:
    """Q is the nearest grid value, ties to even, saturated; |Q(v) - v| <= quantum(v) / 2 below fmax; Q monotone."""
    probes = np.linspace(-1.2, 1.2, 40001)

    def exact_on_grid() -> bool:
        return all(np.array_equal(quantize(g, fmt), g) and np.array_equal(quantize(-g, fmt), -g)
                   for fmt in FORMATS.values() for g in [_grid(fmt)])

    def nearest_ties_to_even() -> bool:
        for fmt in FORMATS.values():
            grid = _grid(fmt)
            middles = (grid[:-1] + grid[1:]) / 2
            got = quantize(middles, fmt)
            even = np.where((grid[:-1] / fmt.quantum(grid[:-1])) % 2 == 0, grid[:-1], grid[1:])
            off = quantize(middles + 1e-9 * fmt.quantum(middles), fmt)
            if not (np.array_equal(got, even) and np.array_equal(off, grid[1:])):
                return False
        return True

    def monotone_and_saturated() -> bool:
        for fmt in FORMATS.values():
            v_ = probes * fmt.fmax * 1.5
            q = quantize(v_, fmt, int8_minimum=-127)
            if np.any(np.diff(q) < 0) or q.max() != fmt.fmax or q.min() != -fmt.fmax:
                return False
        return bool(quantize(np.array([-200.0]), FORMATS["int8"])[0] == -128)

    def error_within_half_quantum() -> bool:
        for fmt in FORMATS.values():
            v_ = probes * fmt.fmax / 1.2
            if np.any(np.abs(quantize(v_, fmt) - v_) > fmt.quantum(v_) / 2):
                return False
        return True

    return Derivation((
        Fact(r"Q(g) = g \text{ for every grid value } g", "the grids of the three formats, enumerated", exact_on_grid),
        Fact(r"Q\left(\tfrac{g_j + g_{j+1}}{2}\right) = \text{the even one of } g_j, g_{j+1}",
             "every midpoint of consecutive grid values (and just above it: the upper one)", nearest_ties_to_even),
        Equal(((k + t) * quantum) - k * quantum, t * quantum,
              r"$v = (k + t)\,q_v$ with $|t| \le 1/2$ rounds to $k\,q_v$: the error is $t\,q_v$"),
        AtMost((sp.Rational(1, 2) - s_gap) * quantum, quantum / 2,
               r"$t = 1/2 - \delta$, $\delta \ge 0$: $|Q(v) - v| = |t|\,q_v \le q_v/2$ for $|v| \le f_{\max}$",
               s_gap * quantum),
        Fact(r"|Q(v) - v| \le q_v/2", r"40 001 values in $[-f_{\max}, f_{\max}]$ of each format",
             error_within_half_quantum),
        Fact(r"v \le w \Rightarrow Q(v) \le Q(w),\; Q(\pm\infty\text{-ward}) = \pm f_{\max}",
             "monotone on 40 001 values up to 1.8 fmax, saturated at +-fmax (INT8 -128 unless -127 declared)",
             monotone_and_saturated),
    ))


def _values() -> Derivation:
    steps = _rounding().steps
    return Derivation(steps, notes=(
        r"The kernel's $y$ is not returned: the suite knows it as an interval, the float64 oracle $\pm$ the norm's "
        r"float32 error bound (then rounded once to $x$'s dtype when declared ``storage''). $v = y/s$ (or $y s$) is "
        r"a float32 operation: one rounding, or two through a reciprocal, $|\hat v - v| \le 2u_{32}|v|$. Q is "
        r"monotone, so $q \in [Q(v_{lo}), Q(v_{hi})]$: a single value unless a rounding boundary of Q lies in the "
        r"interval, where either neighbour is accepted.",))


def _scales() -> Derivation:
    return Derivation((
        Equal(amax / (amax / fmax), fmax, r"divide: $s = a_{\max}/f_{\max}$ maps the largest $|y|$ to $f_{\max}$ "
              r"exactly, so the dynamic path never saturates beyond rounding"),
        Equal(amax * (fmax / amax), fmax, r"multiply: the scale is the inverse, $f_{\max}/a_{\max}$"),
        Equal(amax * ((1 + delta_1) / fmax) * (1 + delta_2), amax / fmax * (1 + delta_1 + delta_2 + delta_1 * delta_2),
              r"computed as $a_{\max}$ times the rounded reciprocal $\mathrm{fl}(1/f_{\max})$, two float32 roundings "
              r"$|\delta_i| \le u_{32}$: relative error at most $2u_{32} + u_{32}^2$"),
        *_largest_values().steps,
    ), notes=(r"$a_{\max} = \max_i |y_i|$ over the declared $y$ (storage: the values rounded to $x$'s dtype, which "
              r"an unfused quantization reads; float32: before that rounding). TransformerEngine PR 2355 fixed an "
              r"$a_{\max}$ taken on the float32 values while the rounded ones were quantized. An all-zero row has "
              r"$a_{\max} = 0$: its scale is the declared floor $s_{\min}$ and its $q$ is 0.",
              r"The float32 division adds one rounding; a multiplication by the rounded reciprocal of $f_{\max}$ two: "
              r"torch's CUDA division of a tensor by a Python number computes it that way (aten/src/ATen/native/cuda/"
              r"BinaryDivTrueKernel.cu, 'may lose one bit of precision'; docs/findings.md [R12]), and so may any "
              r"kernel. The check allows $2u_{32} + u_{32}^2$ relative, sound for either."))


def _saturation() -> Derivation:
    return Derivation(_largest_values().steps + _rounding().steps[-1:], notes=(
        r"A static scale smaller than $a_{\max}/f_{\max}$ pushes $|v|$ beyond $f_{\max}$: Q saturates. Without the "
        r"clamp, torch's float32 to e5m2 conversion gives $\pm\infty$ and to int8 wraps around (300 becomes 44); "
        r"CPU e4m3fn conversion saturates by itself.",))


def _dequantized() -> Derivation:
    y_hat, v_hat, q_v = sp.symbols(r"\hat{y} \hat{v} Q", real=True)
    return Derivation((
        Equal((q_v - v_hat) * scale + (v_hat - y_hat / scale) * scale + (y_hat - y), q_v * scale - y,
              r"$q s - y = (Q(\hat v) - \hat v)s + (\hat v - \hat y/s)s + (\hat y - y)$: the rounding to the format, "
              r"the float32 division, the norm's error (divide convention; multiply: $s \to 1/s$)"),
        *_rounding().steps[3:5],
    ), notes=(r"Hence $|q s - y| \le s\,q_{\hat v}/2 + 2u_{32}|\hat y| + B_y$ with $B_y$ the norm's bound (storage: "
              r"plus $u_x|\hat y|$), for $|\hat v| \le f_{\max}$; a saturated element adds $|\hat y| - f_{\max}s$.",))


def _residual_out() -> Derivation:
    return Derivation((), notes=(r"As \texttt{add\_rms.residual\_out}: the IEEE sum in float32, one rounding after "
                                 r"one float32 rounding in 16-bit storage.",))


CONDITIONS = (r"$y$ within the norm's error model at $h$ (float32 accumulation)",
              r"the declared scale convention, quantized values (storage or float32 $y$), INT8 rounding and lowest "
              r"value, and floor $s_{\min}$ of the dynamic scale",
              r"static scale: one float32 value $> 0$")


def _claims(prefix: str, name: str) -> tuple[Claim, ...]:
    claims = (
        Claim(f"{prefix}.values", f"{name} quantized: the values", "", "(contract)",
              r"$q = Q(y/s)$ (declared multiply: $Q(y s)$) at the kernel's own $y$ and returned $s$, Q the format's "
              r"round-to-nearest-even (INT8: the declared rounding) with saturation: exact unless $y$'s error-model "
              r"interval contains a rounding boundary of Q, where either neighbour is accepted.", CONDITIONS,
              "contract", "", _values),
        Claim(f"{prefix}.scales", f"{name} quantized: the scales", "", "(contract)",
              r"Dynamic: per row $s = \max(a_{\max}/f_{\max}, s_{\min})$, $a_{\max}$ the largest $|y|$ of the "
              r"declared values, within two float32 roundings (the division, or a product with "
              r"$\mathrm{fl}(1/f_{\max})$; multiply: its inverse); static: the given scale.",
              CONDITIONS, "contract", "", _scales),
        Claim(f"{prefix}.saturation", f"{name} quantized: saturation", "", "(contract)",
              r"$|y/s| > f_{\max}$ gives $q = \pm f_{\max}$ (448 e4m3fn, 57344 e5m2, 127 INT8; INT8's negative end "
              r"the declared $-128$ or $-127$), never NaN, infinity or a wrapped integer.", CONDITIONS,
              "contract", "", _saturation),
        Claim(f"{prefix}.dequantized", f"{name} quantized: the dequantized error", "", "(contract)",
              r"$|q s - y| \le B_y + s\,q_v/2 + 2u_{32}|y|$ ($q_v$ the format's spacing at $v = y/s$, $B_y$ the "
              r"norm's error bound at $h$ for the declared $y$) where $|v| \le f_{\max}$.", CONDITIONS,
              "contract", "", _dequantized),
        Claim(f"{prefix}.inputs_unmodified", f"{name} quantized: leaves its inputs alone", "", "(contract)",
              r"$x$, the residual (unless declared updated in place), the weight, the bias and a static scale are "
              r"never written.", (), "contract", "", no_derivation),
    )
    if prefix.startswith("add_"):
        claims += (Claim(f"{prefix}.residual_out", f"{name} quantized: residual_out", "", "(contract)",
                         r"residual\_out $= x + z$ in the declared dtype, as \texttt{add\_rms.residual\_out}.", (),
                         "contract", "", _residual_out),)
    return claims


CLAIMS = tuple(claim for prefix, name in NAMES.items() for claim in _claims(prefix, name))
