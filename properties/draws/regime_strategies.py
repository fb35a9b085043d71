"""Strategies for the regimes of the derived-property claims (issue 11, point 6): the inputs on which each claim can
fail where ``*.forward``'s draws (:func:`properties.draws.strategies.norm_examples`) cannot.

Each check of ln.shift_invariance, ln.affine / rms.affine and ln.variance_insensitivity is bounded by forward bounds
of the same inputs (properties.checks), so on an input ``*.forward`` also draws it can only fail where that does.
What each claim adds is where it looks:

    rows_shifted_one_by_one          ln.shift_invariance: every row of a call its own shift (the seed's per-step
                                     shifts), |mean|/std up to the error model's limit; forward's rows of one call
                                     share their mean and scale
    affine_examples                  ln.affine / rms.affine: a x + b against N_{eps/a^2}(x) with x at either end of
                                     the exponent range (squares at the accumulation dtype's subnormals, or sums of
                                     squares near its overflow), eps/a^2 far outside forward's four eps values
    rows_with_variance_near_eps      ln.variance_insensitivity: sigma^2 = t eps, t from 0.1 to 10, eps at any
                                     magnitude, near-constant rows (|mean|/std up to the model's limit), wide rows

Values come from :func:`properties.draws.strategies.standard_values` (seeded rows) and are rounded to the storage dtype
the kernel receives; the checks compare against the float64 oracle on those rounded values.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import assume
from hypothesis import strategies as st

from core.capabilities import discover
from core.registry import Kernel
from proofs import error_model
from properties import norms
from properties.bounds import tolerance
from properties.draws.strategies import (
    DISTRIBUTIONS,
    norm_examples,
    rounded,
    row_counts,
    seeds,
    standard_values,
    storage_dtypes,
    valid_offset_ratio,
    widths,
)

ENDS = ("smallest", "largest")
# Each end of the exponent range in each storage dtype, one test each (the ends differ by dtype: bfloat16 shares
# float32's exponent range, float16's ends are its own)
ENDS_AND_DTYPES = tuple((end, dtype) for end in ENDS for dtype in (torch.float32, torch.bfloat16, torch.float16))
# The largest |value| of a row of scale s drawn by standard_values, in units of s, with a row scale factor up to 3
# (the "spike" distribution reaches about 35): the largest end keeps 128 s inside largest_safe_magnitude.
LARGEST_VALUE_IN_SCALES = 128.0
# Binades of each end of the exponent range (magnitude_exponents)
END_BINADES = 4


def largest_safe_magnitude(d: int, dtype: torch.dtype) -> float:
    """A power of ten <= sqrt(max / d) / 4, max the largest finite value of the accumulation and storage dtypes:
    the error model's condition that the sum of squares of a row is representable."""
    largest = min(torch.finfo(tolerance.accumulation_dtype(dtype)).max, torch.finfo(dtype).max ** 2)
    return 10.0 ** math.floor(math.log10(math.sqrt(largest / d) / 4))


def magnitude_exponents(dtype: torch.dtype, d: int, end: str, flush_to_zero: bool = False) -> st.SearchStrategy[int]:
    """Exponents e (row scale 2^e) in :func:`exponent_range`."""
    return st.integers(*exponent_range(dtype, d, end, flush_to_zero))


def exponent_range(dtype: torch.dtype, d: int, end: str, flush_to_zero: bool = False) -> tuple[int, int]:
    """The exponents (lowest, highest) of one end of the range where rows of width d stay inside the error model.

    smallest: the squares reach the accumulation dtype's subnormal range (2^(2e) down to 2^-2 of its smallest
    normal: rounding there is gradual underflow, which the model's eta terms cover while the values stay normal in
    storage, four binades above its smallest normal); largest: 128 2^e <= :func:`largest_safe_magnitude`.

    These smallest-end draws are the suite's subnormal-specific ones (var + eps, eps / a^2 and the squares in the
    subnormal range). A kernel that declares ``flush_to_zero`` does not get them: its smallest end starts where
    s^2 ~ 2^(2e) is at least proofs.error_model.flush_to_zero_floor (flushing costs at most u relative), so what is
    not drawn for it is exactly the gradual-underflow range, stated by its declaration (core.kernel.Kernel).
    """
    if end not in ENDS:
        raise ValueError(f"unknown end {end!r}: expected one of {ENDS}")
    accumulation = tolerance.accumulation_dtype(dtype)
    gradual = math.floor(math.log2(torch.finfo(accumulation).tiny)) // 2 - 1
    if flush_to_zero:
        u_acc = tolerance.unit_roundoffs(dtype)[0]
        gradual = math.ceil(math.log2(error_model.flush_to_zero_floor(d, u_acc)) / 2)
    lowest = max(gradual, math.floor(math.log2(torch.finfo(dtype).tiny)) + END_BINADES)
    highest = math.floor(math.log2(largest_safe_magnitude(d, dtype) / LARGEST_VALUE_IN_SCALES))
    return (lowest, lowest + END_BINADES - 1) if end == "smallest" else (highest - END_BINADES + 1, highest)


def _std_or_magnitude(rows: np.ndarray) -> np.ndarray:
    """Each row's standard deviation; its largest |value| (or 1) for a constant row."""
    spread = rows.std(-1)
    fallback = np.maximum(np.abs(rows).max(-1), 1.0)
    return np.where(spread > 0, spread, fallback)


@st.composite
def rows_shifted_one_by_one(draw, kernel: Kernel) -> dict:
    """A LayerNorm example of 2 to 4 rows and its ``shifted`` copy: row r moved by c_r times its own std, |c_r| =
    L^k, k = 1 (half the rows) or uniform in [0, 1], a random sign, L the largest |mean|/std the error model covers
    at the width (strategies.valid_offset_ratio) less the row's own; a shifted row the bound does not cover has its
    shift halved until it does."""
    example = draw(norm_examples(kernel, d=widths(max_width=4096), n=st.integers(2, 4)), label="rows")
    x = example["x"]
    rows = norms.as_float64(x).reshape(-1, x.shape[-1])
    spread = _std_or_magnitude(rows)
    own = np.abs(rows.mean(-1)) / spread
    limit = valid_offset_ratio(x.shape[-1], x.dtype)
    exponent = st.one_of(st.just(1.0), st.floats(0.0, 1.0))  # half the rows at the limit
    exponents = draw(st.lists(exponent, min_size=len(rows), max_size=len(rows)), label="shift exponents")
    signs = draw(st.lists(st.sampled_from([1.0, -1.0]), min_size=len(rows), max_size=len(rows)), label="signs")
    ratios = np.array([sign * max(limit - mine, 1.0) ** k for sign, k, mine in zip(signs, exponents, own, strict=True)])
    for _ in range(60):
        shifted = rounded((rows + (ratios * spread)[:, None]).reshape(x.shape), x.dtype, x.device)
        if tolerance.covered(kernel, shifted, example["eps"]):
            break
        ratios = ratios / 2
    else:
        assume(False)
    example["shifted"] = shifted
    return example


@st.composite
def affine_examples(draw, kernel: Kernel, end: str | None = None,
                    dtypes: tuple[torch.dtype, ...] | None = None) -> dict:
    """x, ``transformed`` = a x + b (rounded), a and eps in {1e-2, 1e-5}, no weight or bias.

    ``end`` None: x with sigma^2 near eps (0.3, 1, 3 sqrt(eps) times N(0, 1)), a in {0, +-1/2, 2, -4, 3} and b (LN)
    in {0, 1, -3.5} sqrt(eps). ``end`` "smallest"/"largest": x of scale 2^e at that end of the exponent range
    (:func:`magnitude_exponents`) and a = +-2^k with a x of order sqrt(eps) (exact: a power of two), so that
    N_eps(a x + b) is an ordinary call and N_{eps/a^2}(x) runs with eps/a^2 ~ 2^(2e). ``dtypes``: the storage dtypes
    to draw from (strategies.storage_dtypes).
    """
    dtype = draw(storage_dtypes(kernel, dtypes))
    eps = draw(st.sampled_from([1e-2, 1e-5]))
    d = draw(widths(max_width=512))
    factor = draw(st.sampled_from([0.3, 1.0, 3.0]))
    z = standard_values((draw(row_counts(d)), d), "normal" if end is None else draw(st.sampled_from(DISTRIBUTIONS)),
                        draw(seeds()))
    if end is None:
        scale, a = math.sqrt(eps), draw(st.sampled_from([0.5, -0.5, 2.0, -4.0, 3.0, 0.0]))
    else:
        exponent = draw(magnitude_exponents(dtype, d, end, kernel.flush_to_zero), label="exponent of x's scale")
        scale = 2.0**exponent
        a = draw(st.sampled_from([1.0, -1.0])) * 2.0 ** (round(math.log2(math.sqrt(eps))) - exponent)
    b = draw(st.sampled_from([0.0, 1.0, -3.5])) * math.sqrt(eps) if kernel.record.centred else 0.0
    device = discover(kernel).device
    x = rounded(factor * scale * z, dtype, device)
    transformed = rounded(a * x.double() + b, dtype, device)
    if a != 0:
        assume(tolerance.covered(kernel, x, eps / a**2))
    assume(tolerance.covered(kernel, transformed, eps))
    return {"x": x, "transformed": transformed, "a": a, "eps": eps}


@st.composite
def rows_with_variance_near_eps(draw, kernel: Kernel, end: str | None = None,
                                dtypes: tuple[torch.dtype, ...] | None = None) -> dict:
    """Rows with sigma^2 = t eps exactly (standardized, then scaled; rounded), t = 10^k with k uniform in [-1, 1],
    shifted by m s (s = sqrt(sigma^2 + eps)), |m| up to the model's |mean|/std limit (near-constant rows) and
    :func:`largest_safe_magnitude` (else not shifted).

    ``end`` None: eps in {1e-2, 1e-5, 1e-6} (float32; 1e-2 for 16-bit storage), widths of strategies.widths;
    "smallest"/"largest": eps = 2^(2e) with e at that end of the exponent range (:func:`magnitude_exponents`).
    ``dtypes``: the storage dtypes to draw from (strategies.storage_dtypes).
    """
    dtype = draw(storage_dtypes(kernel, dtypes))
    d = draw(widths(max_width=8192).filter(lambda width: width >= 2))
    if end is None:
        eps = draw(st.sampled_from([1e-2, 1e-5, 1e-6] if dtype == torch.float32 else [1e-2]))
    else:
        eps = 4.0 ** draw(magnitude_exponents(dtype, d, end, kernel.flush_to_zero), label="exponent of sqrt(eps)")
    t = 10.0 ** draw(st.floats(-1.0, 1.0), label="log10 sigma^2/eps")
    z = standard_values((draw(row_counts(d)), d), draw(st.sampled_from(DISTRIBUTIONS)), draw(seeds()))
    assume(bool((z.std(-1) > 0).all()))
    z = (z - z.mean(-1, keepdim=True)) / z.std(-1, correction=0, keepdim=True)
    sign = draw(st.sampled_from([0.0, 1.0, -1.0]), label="offset sign")
    offset = sign * valid_offset_ratio(d, dtype) ** draw(st.floats(0.0, 1.0), label="offset exponent")
    device = discover(kernel).device
    for ratio in (offset, 0.0):  # the offset must keep the row inside the model, its squares representable included
        x = rounded(math.sqrt(t * eps) * z + ratio * math.sqrt((1 + t) * eps), dtype, device)
        if tolerance.covered(kernel, x, eps) and float(x.abs().max()) <= largest_safe_magnitude(d, dtype):
            break
    else:
        assume(False)
    return {"x": x, "eps": eps}
