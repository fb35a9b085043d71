"""Hypothesis strategies for the quantized-output kinds (layernorm_quant, rmsnorm_quant, add_rmsnorm_quant): the
norm's example (strategies.norm_examples, or fused_strategies.add_norm_examples for the residual add kind), then
the target format among the kernel's declared ones and a scale:

- dynamic (``scale=None``, where declared), with an all-zero row a third of the time (its scale is the declared
  floor): the scale the kernel computes from amax;
- static (where declared): a float32 scale of one element, amax(y*) / fmax times a factor, so that the largest |v| is
  about fmax / factor: below the range (factor 2, 8), at it (1), or beyond it (1/2; the saturation draws: 1/16, 1/4,
  1/2); the inverse for a kernel declaring the "multiply" convention.

:func:`tie_examples` puts y exactly on the ties of Q (the midpoints of the format's grid), where the rounding's own
rule decides: ties to even (FP8; INT8 as declared) against ties away from zero.

x is [n, d] or [B, S, d]; widths stay at most 512 and rows at most 4 (the ci profile's run time: the checks
are exact, not statistical) but one draw in four, which has 5 to 65 rows (strategies.MORE_ROWS: a path that packs
several tokens a warp, whose amax reduction may span them).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume
from hypothesis import strategies as st

from core.boundary import HOST, host_generator
from core.capabilities import discover
from core.registry import Kernel
from proofs.quantization import FORMATS, Format
from properties import norms
from properties.bounds import tolerance
from properties.bounds.quantized import format_of
from properties.draws.fused_strategies import add_norm_examples
from properties.draws.strategies import norm_examples, rounded, seeds, storage_dtypes, widths

MAX_WIDTH = 512
FACTORS = (8.0, 2.0, 1.0, 0.5)
SATURATING_FACTORS = (1 / 16, 1 / 4, 1 / 2)
DIMS = st.sampled_from((2, 3))  # [n, d] and [B, S, d]: per-token scales [..., 1]
MORE_ROWS_EVERY = 4


def _norm_input(kernel: Kernel, example: dict) -> torch.Tensor:
    """h, the norm's input: x, or x + residual rounded to residual_out's dtype."""
    if not kernel.record.has_residual:
        return example["x"]
    dtype = norms.residual_dtype(kernel, example["residual"], example["x"])
    return tolerance.residual_sum(example["x"], example["residual"], dtype)


def _with_zero_row(example: dict) -> dict:
    """The example with its first row (x's, and the residual's) all zeros: h's first row is 0, so is y's."""
    zeroed = {name: None if example.get(name) is None else example[name].clone() for name in ("x", "residual")}
    for t in zeroed.values():
        if t is not None:
            t.view(-1, t.shape[-1])[0] = 0
    return {**example, **{name: t for name, t in zeroed.items() if name in example}}


@st.composite
def quant_examples(draw, kernel: Kernel, scales: tuple[str, ...] = ("static", "dynamic"),
                   saturating: bool = False, formats: tuple[str, ...] | None = None,
                   d: st.SearchStrategy[int] | None = None, rows: st.SearchStrategy[int] | None = None,
                   dtypes: tuple[torch.dtype, ...] | None = None, every_input: bool = False) -> dict:
    """One example: the norm's arguments and ``scale``, ``quant_dtype`` (module docstring). ``scales``: the kinds of
    scale the test draws, among those the kernel declares; ``formats``: the formats it draws, among the declared
    ones (default: all of them); none of either declared: the test is skipped, saying so. ``saturating``: static
    scales that push the largest |v| beyond the format's range. ``d``: the widths (default up to MAX_WIDTH); ``rows``:
    the tokens of x [rows, d] (default: x of 2 or 3 dimensions, strategies.row_counts' rows); ``dtypes``: x's dtypes,
    among those the kernel computes in (default: all of them); ``every_input``: weight (and bias) present and
    random."""
    declared = kernel.quantization
    taken = [kind for kind in scales if kind in declared.scales]
    if not taken:
        pytest.skip(f"{kernel.name} declares no {' or '.join(scales)} scale (it takes {', '.join(declared.scales)})")
    chosen = [name for name in declared.formats if formats is None or name in formats]
    if not chosen:
        pytest.skip(f"{kernel.name} declares no {' or '.join(formats)} output (it writes "
                    f"{', '.join(declared.formats)})")
    d = widths(max_width=MAX_WIDTH) if d is None else d
    n = None if rows is None else draw(rows, label="tokens")
    ndims = DIMS if n is None else st.just(2)
    if kernel.record.has_residual:  # a saturating draw needs h != 0: no cancelling residual
        example = draw(add_norm_examples(kernel, d=d, residual="independent" if saturating else None, ndims=ndims,
                                         n=n, more_rows_every=MORE_ROWS_EVERY, dtypes=dtypes,
                                         every_input=every_input))
    else:
        example = draw(norm_examples(kernel, d=d, ndims=ndims, n=None if n is None else st.just(n),
                                     more_rows_every=MORE_ROWS_EVERY, dtypes=dtypes, every_input=every_input))
    quant_dtype = getattr(torch, draw(st.sampled_from(chosen)))
    if draw(st.sampled_from(taken)) == "dynamic":
        if draw(st.sampled_from((False, False, True))):
            example = _with_zero_row(example)
        return {**example, "scale": None, "quant_dtype": quant_dtype}
    amax = reference_amax(kernel, example)
    assume(amax > 0 or not saturating)
    factor = draw(st.sampled_from(SATURATING_FACTORS if saturating else FACTORS))
    return {**example, "scale": static_scale(kernel, quant_dtype, amax, factor), "quant_dtype": quant_dtype}


def reference_amax(kernel: Kernel, example: dict) -> float:
    """max |y*| over the example, y* the float64 oracle's norm output at the kernel's h (0 for an empty x)."""
    y = norms.reference(kernel, _norm_input(kernel, example), example["weight"], example.get("bias"),
                        example["eps"])
    return float(np.max(np.abs(y))) if y.size else 0.0


def static_scale(kernel: Kernel, quant_dtype: torch.dtype, amax: float, factor: float) -> torch.Tensor:
    """A static scale of one float32 element on the kernel's device: amax / fmax times ``factor`` (the largest |v|
    about fmax / factor; 1 for amax 0), its inverse for a kernel declaring the "multiply" convention."""
    fmax = (torch.iinfo(quant_dtype).max if not quant_dtype.is_floating_point else torch.finfo(quant_dtype).max)
    scale = amax / fmax * factor if amax > 0 else 1.0
    if kernel.quantization.scale_convention == "multiply":
        scale = 1.0 / scale
    return rounded(torch.tensor([scale], dtype=torch.float64, device=HOST), torch.float32, discover(kernel).device)


# floor_examples: the largest amax / fmax of the example at these multiples of the declared floor of the dynamic scale
# (below it, where max(amax / fmax, floor) is the floor, and just above it)
FLOOR_FACTORS = (0.25, 0.5, 2.0)
FLOOR_HEADROOM = 2.0**10  # amax at least this many times x's smallest normal: y and the weight stay normal numbers


def _effective(kernel: Kernel, example: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(gamma, beta) in float64: the effective weight (ones where there is none) and the bias (None)."""
    weight, bias = example["weight"], example.get("bias")
    gamma = (torch.ones(example["x"].shape[-1], dtype=torch.float64, device=HOST) if weight is None
             else kernel.weight_offset + weight.to(HOST, torch.float64))
    return gamma, None if bias is None else bias.to(HOST, torch.float64)


def _rescaled(kernel: Kernel, example: dict, gamma: torch.Tensor, beta: torch.Tensor | None) -> dict:
    """The example with the effective weight ``gamma`` and bias ``beta`` (float64), stored in the dtypes and on the
    device of its weight (x's where it has none) and bias."""
    like = example["weight"] if example["weight"] is not None else example["x"]
    new = {"weight": rounded(gamma - kernel.weight_offset, like.dtype, like.device)}
    if beta is not None:
        new["bias"] = rounded(beta, example["bias"].dtype, example["bias"].device)
    return {**example, **new}


def _small_weights(kernel: Kernel) -> None:
    """Skip, saying why, a kernel whose effective weight is weight_offset + w (Gemma's 1 + w): a small gamma is then
    not a number its weight's dtype holds (1 + w rounds back to 1)."""
    if kernel.weight_offset != 0:
        pytest.skip(f"{kernel.name} stores its weight as gamma - {kernel.weight_offset:g}: a gamma of 1e-6 is not "
                    f"representable that way")


@st.composite
def floor_examples(draw, kernel: Kernel) -> dict:
    """A dynamic-scale example whose largest amax / fmax is c times the declared floor s_min of the dynamic scale, c
    in :data:`FLOOR_FACTORS`: weight and bias (gamma = 1 where there is none) multiplied by c fmax s_min / amax(y*),
    so that the scale max(amax / fmax, s_min) of non-zero rows is the floor (c < 1) or just above it (c = 2). Every
    other draw keeps amax / fmax >= min |gamma| / fmax, far above a floor such as vLLM's 1 / (448 * 512): a kernel
    applying the floor to all-zero rows only (scale = amax == 0 ? s_min : amax / fmax) passes them. x's dtype is one
    whose normal range holds amax (FLOOR_HEADROOM); a kernel declaring no floor (s_min = 0) skips."""
    declared = kernel.quantization
    if declared.minimum_scale <= 0 or "dynamic" not in declared.scales:
        pytest.skip(f"{kernel.name} declares no floor of a dynamic scale (minimum_scale={declared.minimum_scale:g}, "
                    f"scales {', '.join(declared.scales)})")
    _small_weights(kernel)
    fmt = format_of(getattr(torch, draw(st.sampled_from(declared.formats))))
    c = draw(st.sampled_from(FLOOR_FACTORS), label="amax / fmax over the floor")
    target = c * fmt.fmax * declared.minimum_scale
    held = tuple(dtype for dtype in (torch.float32, torch.bfloat16, torch.float16)
                 if target >= FLOOR_HEADROOM * torch.finfo(dtype).tiny)
    if not held:
        pytest.skip(f"no dtype holds an amax of {target:g} as a normal number")
    example = draw(quant_examples(kernel, scales=("dynamic",), formats=(fmt.name,), dtypes=held))
    amax = reference_amax(kernel, example)
    assume(amax > 0)
    gamma, beta = _effective(kernel, example)
    factor = target / amax
    return _rescaled(kernel, example, gamma * factor, None if beta is None else beta * factor)


# subnormal_examples: FP8 values of v below the format's smallest normal 2^e_min (e4m3fn 2^-6, e5m2 2^-14)
SUBNORMAL_SHIFTS = 4  # the columns' weights spread over this many binades below the top one


@st.composite
def subnormal_examples(draw, kernel: Kernel, scale: str) -> dict:
    """An FP8 example at any width whose v = y / s fall into the format's subnormal range (|v| < 2^e_min), where a
    conversion that flushes subnormal results to zero (triton-lang/triton#7382) differs: ``scale`` "static", s =
    2 amax(y*) / 2^e_min (every |v| at most half the smallest normal: subnormal, or 0 below the smallest subnormal);
    "dynamic", weight column 0 gamma_0 = 1 and column j > 0 multiplied by 2^-(K + j mod SUBNORMAL_SHIFTS),
    2^K >= fmax / 2^e_min, so that where column 0 holds the row's amax, v_j = fmax |y_j| / amax is about 2^e_min
    |x_hat_j / x_hat_0| 2^-(j mod 4): subnormal for most j, x in a dtype whose normal range holds those weights
    (bfloat16, float32). Random rows reach |v| < 2^e_min only at d = 4096 and more (|y| / amax < 2^-15 for
    e4m3fn)."""
    declared = kernel.quantization
    fp8 = tuple(name for name in declared.formats if FORMATS[name].mantissa)
    if not fp8:
        pytest.skip(f"{kernel.name} writes no FP8 format (it writes {', '.join(declared.formats)}): no subnormals")
    fmt = FORMATS[draw(st.sampled_from(fp8))]
    smallest_normal = 2.0**fmt.min_exponent
    if scale == "static":
        example = draw(quant_examples(kernel, scales=(scale,), formats=(fmt.name,)))
        amax = reference_amax(kernel, example)
        assume(amax > 0)
        return {**example, "scale": static_scale(kernel, example["quant_dtype"], amax, 2 * fmt.fmax / smallest_normal)}
    _small_weights(kernel)
    shift = int(np.ceil(np.log2(fmt.fmax / smallest_normal)))
    smallest_weight = 2.0 ** -(shift + SUBNORMAL_SHIFTS - 1)
    held = tuple(dtype for dtype in (torch.float32, torch.bfloat16, torch.float16)
                 if smallest_weight >= torch.finfo(dtype).tiny)
    example = draw(quant_examples(kernel, scales=(scale,), formats=(fmt.name,), dtypes=held))
    d = example["x"].shape[-1]
    columns = torch.arange(d, dtype=torch.float64, device=HOST)
    spread = torch.where(columns == 0, 1.0, torch.exp2(-(shift + columns % SUBNORMAL_SHIFTS)))
    gamma, beta = _effective(kernel, example)
    return _rescaled(kernel, example, torch.where(columns == 0, 1.0, gamma) * spread,
                     None if beta is None else beta * spread)


# tie_examples: rows of +-a (a = 2^TIE_ROW_EXPONENTS), a static scale s = 2^TIE_SCALE_EXPONENTS, FP8 ties in the
# binades 2^TIE_BINADES (every y then a 16-bit normal number with at most 8 significant bits)
TIE_ROW_EXPONENTS = (-2, 2)
TIE_SCALE_EXPONENTS = (-2, 2)
TIE_BINADES = (-4, 6)
TIE_EPS = 1e-10  # rstd = 1/sqrt(a^2 + eps) is 1/a within eps/(2 a^2) <= 8e-10 relative: far below a 16-bit half ulp


def tie_points(fmt: Format, count: int, seed: int) -> np.ndarray:
    """``count`` midpoints of the format's grid, of either sign, as float64: k + 1/2 for INT8 (|k + 1/2| <= 126.5,
    below saturation), 2^e (1 + (2j + 1) / 2^(m + 1)) for FP8 (m mantissa bits, e in TIE_BINADES: normal, far
    below fmax): exactly halfway between two neighbouring values of the format."""
    generator = host_generator(seed)
    signs = torch.randint(0, 2, (count,), generator=generator, device=HOST).double() * 2 - 1
    if fmt.integer:
        return (signs * (torch.randint(0, 127, (count,), generator=generator, device=HOST).double() + 0.5)).numpy()
    exponents = torch.randint(TIE_BINADES[0], TIE_BINADES[1] + 1, (count,), generator=generator, device=HOST)
    steps = torch.randint(0, 2**fmt.mantissa, (count,), generator=generator, device=HOST)
    fractions = 1 + (2 * steps.double() + 1) / 2 ** (fmt.mantissa + 1)
    return (signs * torch.exp2(exponents.double()) * fractions).numpy()


@st.composite
def tie_examples(draw, kernel: Kernel) -> dict:
    """An example whose every y is exactly a tie of Q at a static power-of-two scale s: x's rows hold +-a, as many of
    each (LayerNorm's mean 0 and both norms' x_hat = +-1 exactly in any order of the sums, rstd = 1/a up to eps),
    weight column j is t_j s (t_j = :func:`tie_points`), bias and residual zero, so y_ij = +-t_j s, within far less
    than half a 16-bit ulp: the y a kernel declaring ``quantizes="storage"`` quantizes (y rounded to x's 16-bit
    dtype) is that tie, and v = y / s (a power of two: exact) the tie itself. A kernel quantizing the float32 y, or
    without a 16-bit dtype or a static scale, skips (its y is not known to the bit)."""
    declared = kernel.quantization
    if "static" not in declared.scales:
        pytest.skip(f"{kernel.name} declares no static scale: ties need a known power-of-two scale")
    if declared.quantizes != "storage":
        pytest.skip(f"{kernel.name} quantizes the float32 y (quantizes={declared.quantizes!r}): its y is known within "
                    f"the norm's bound only, never exactly on a tie")
    dtype = draw(storage_dtypes(kernel, (torch.float16, torch.bfloat16)))
    device = discover(kernel).device
    quant_dtype = getattr(torch, draw(st.sampled_from(declared.formats)))
    n, pairs = draw(st.integers(1, 4), label="rows"), draw(st.integers(1, 64), label="pairs")
    a = 2.0 ** draw(st.integers(*TIE_ROW_EXPONENTS), label="row exponent")
    s = 2.0 ** draw(st.integers(*TIE_SCALE_EXPONENTS), label="scale exponent")
    generator = host_generator(draw(seeds(), label="seed"))
    signs = torch.tensor([1.0, -1.0], dtype=torch.float64, device=HOST).repeat(n, pairs)
    rows = torch.stack([row[torch.randperm(2 * pairs, generator=generator, device=HOST)] for row in signs])
    gamma = tie_points(format_of(quant_dtype), 2 * pairs, draw(seeds(), label="ties")) * s
    example = {"x": rounded(rows * a, dtype, device), "weight": rounded(gamma - kernel.weight_offset, dtype, device),
               "eps": TIE_EPS, "quant_dtype": quant_dtype,
               "scale": rounded(torch.tensor([1.0 / s if declared.scale_convention == "multiply" else s],
                                             dtype=torch.float64, device=HOST), torch.float32, device)}
    if kernel.record.has_bias:
        example["bias"] = torch.zeros_like(example["weight"])
    if kernel.record.has_residual:
        example["residual"] = torch.zeros_like(example["x"])
    return example
