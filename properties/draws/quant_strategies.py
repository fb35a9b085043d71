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
from proofs.quantization import Format
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
                   d: st.SearchStrategy[int] | None = None, rows: st.SearchStrategy[int] | None = None) -> dict:
    """One example: the norm's arguments and ``scale``, ``quant_dtype`` (module docstring). ``scales``: the kinds of
    scale the test draws, among those the kernel declares; ``formats``: the formats it draws, among the declared
    ones (default: all of them); none of either declared: the test is skipped, saying so. ``saturating``: static
    scales that push the largest |v| beyond the format's range. ``d``: the widths (default up to MAX_WIDTH); ``rows``:
    the tokens of x [rows, d] (default: x of 2 or 3 dimensions, strategies.row_counts' rows)."""
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
                                         n=n, more_rows_every=MORE_ROWS_EVERY))
    else:
        example = draw(norm_examples(kernel, d=d, ndims=ndims, n=None if n is None else st.just(n),
                                     more_rows_every=MORE_ROWS_EVERY))
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
