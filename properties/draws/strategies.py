"""Hypothesis strategies for the conformance run: small, composable, named for what they generate.

Inputs are generated in float64, then rounded to the kernel's storage dtype
(:func:`rounded`); every reference is computed in float64 on the rounded values the kernel
actually received, so rounding the inputs is never counted as the kernel's error.

Row values come from a seeded generator (one drawn seed per tensor) rather than element by
element: a row of 8 192 values drawn by Hypothesis one at a time would be slow and shrink no
better. What Hypothesis draws, and shrinks, is the structure: width, row count, distribution,
offset and scale, weights, eps, dtype and the seed.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
from collections.abc import Callable, Iterator

import pytest
import torch
from hypothesis import assume
from hypothesis import strategies as st

from core.boundary import HOST, host_generator, to_kernel
from core.capabilities import PARAMETER_MIXES, discover, dtype_name, mix_name
from core.registry import Kernel
from proofs import probabilistic
from properties import norms
from properties.bounds import tolerance

SMALL_WIDTHS = (1, 2, 3)
SMALL_PRIMES = (5, 7, 11, 13, 17, 31, 61, 127)
EPSILONS = (1e-5, 1e-6, 1e-2, 1e-12)
CI_MAX_WIDTH = 8192
# Rows wider than CI_MAX_WIDTH, drawn by tests of their own (two rows, one example each): where kernels that hold a
# row in one block of at most 8192-65536 columns loop over blocks, and a tail mask or the merge of blocks' statistics
# can be wrong: one column past a block of 8192; 45056, eleven blocks of 4096 and a partial last block of 8192 and
# of 16384 (a merge that weighs a partial chunk as a whole one), an odd count of blocks of 4096 and of 16384 (a
# pairwise merge that drops the unpaired one); and 65536, the widest the kernels of issue 30 and Liger-Kernel take.
WIDE_ROWS = (8193, 45056, 65536)
# Past 65536 columns, the widest Liger-Kernel's and Triton tutorial 05's kernels take (a row in one block): a kernel
# that refuses wider rows says so with an error naming its limit (not tested, with that reason: norms.require_width);
# one that normalizes over its first 65536 columns only, or leaves the others unwritten, is wrong. 3 x 2^15: a third
# of the row past the limit.
WIDEST_BLOCK, BEYOND_THE_WIDEST_BLOCK = 65536, 98304
TAIL_FACTOR = 8.0


def with_a_larger_tail(x: torch.Tensor, start: int, factor: float = TAIL_FACTOR) -> torch.Tensor:
    """x with its columns from ``start`` on multiplied by ``factor`` (a power of two: exact in x's dtype)."""
    scaled = x.clone()
    scaled[..., start:] *= factor
    return scaled
# The same beyond one block for the kinds over x [N, C, *]: spatial shapes whose rows of statistics (an InstanceNorm
# row's S elements, a BatchNorm channel's N S, a GroupNorm group's (C/G) S, a sample's C S) exceed 4096 (our
# BatchNorm's tile) and 8192: 1-D, 2-D and 3-D, whole tiles and not.
WIDE_SPATIAL = ((4097,), (96, 128), (16, 16, 33))
# Rows x width of one generated input stays below this many elements (cheap under Triton's interpreter).
MAX_ELEMENTS = 16384
# Row counts past the usual 1 to 4, drawn one time in eight where rows x d allows (row_counts): a count of 5, 8 and
# 16 (multiples of 8: a vectorized or unmasked path chosen by the count), 24, 32 and 64 (multiples of a block of 32
# rows, the decode batches a serving stack captures: an EVEN_M path without masks), 48 (a second block of 32) and 65
# (past a block of 64 rows).
MORE_ROWS = (5, 8, 16, 24, 32, 48, 64, 65)
# The rows of the parameter-gradient tests (dgamma, dbeta sum over every row): a batch times a sequence, 3 past a
# power of two (a kernel's last block of rows partial), on both sides of 132 (an H100's SMs: a grid of one program
# per SM striding over the rows, whose rows per program a floor drops: Liger-Kernel's rows_per_program) and past 1024
PARAMETER_GRADIENT_ROWS = (67, 131, 259, 1031)
ROW_INPUTS = ("x", "residual", "dy", "dh")  # an example's tensors of x's rows [rows, d]


def leading_rows(example: dict, n: int) -> dict:
    """The example on its first ``n`` rows (x [rows, d], and the residual and upstream gradients with it)."""
    return {name: value[:n] if name in ROW_INPUTS and value is not None else value for name, value in example.items()}


@st.composite
def with_no_rows(draw, example: dict) -> dict:
    """The example with x and its other row inputs (ROW_INPUTS, those present) emptied to [0, d] or [2, 0, d]: a batch
    with no rows (a mixture-of-experts layer routing no token to an expert)."""
    d = example["x"].shape[-1]
    leading = draw(st.sampled_from([(0,), (2, 0)]), "leading shape")
    return {**example, **{name: value.reshape(-1, d)[:0].reshape(*leading, d) for name, value in example.items()
                          if name in ROW_INPUTS and value is not None}}


def as_a_batch_of_two(example: dict) -> dict:
    """The example with x (and the residual) [R, d] as [2, R / 2, d] (R even; else unchanged): the same logical rows,
    row r and row r + R / 2 now the same position of two batch elements (a random-number offset that leaves out the
    batch index gives them one mask)."""
    x = example["x"]
    if x.dim() != 2 or x.shape[0] % 2:
        return example
    shape = (2, x.shape[0] // 2, x.shape[1])
    return {name: value.reshape(shape) if name in ("x", "residual") and value is not None else value
            for name, value in example.items()}


# The inputs_unmodified draws of the paths a call of many rows takes: past the 64 and 256 tokens at which serving
# stacks switch to a prefill path, and [rows, d] above 65 536 elements (a large-input path, one that may work in place)
PREFILL_ROWS = (65, 257)
LARGE_INPUT_SHAPE = (32, 4096)
# |mean| / std of generated rows drawn from DISTRIBUTIONS: up to 1e4 where storage is float32, 1e3 for 16-bit storage
# (continuous 16-bit rows collapse to a few values beyond about 2^t, resolved_offset_ratio).
CHANNELS_LAST = {4: torch.channels_last, 5: torch.channels_last_3d}  # x [N, C, *]'s channels-last format by rank
MAX_OFFSET_RATIO = {torch.float32: 1e4, torch.float64: 1e4, torch.float16: 1e3, torch.bfloat16: 1e3}
# 16-bit rows beyond what they resolve are drawn one ulp apart (rows_one_ulp_apart) up to float32's cap, their sums
# being float32's, lowered to where the worst case (such rows are structured) keeps the bound finite: |mean|/std
# <= STRUCTURED_REACH / ((d + 1) u_32), the mean's error g = gamma_{d+1} kappa giving rho_t ~ 2 g + g^2 = 1/2.
ONE_ULP_MAX_OFFSET_RATIO = MAX_OFFSET_RATIO[torch.float32]
STRUCTURED_REACH = math.sqrt(1.5) - 1
DISTRIBUTIONS = ("normal", "uniform", "sparse", "integers", "spike")
# norm_examples' ndims for the claims whose checks take any batch shape: x [n, d], [B, S, d] or [B, H, S, d], the
# rows spread over the leading dimensions (a kernel taking another path for 3-D or 4-D x)
NDIMS = st.sampled_from([2, 3, 4, 1])  # 1: one row, x of shape [d] (a decode call without a batch dimension)
# The widths drawn for a kernel that declares ``compiles_per_width`` (core.kernel.Kernel: every new d costs it a JIT
# specialization, an autotuning or an Inductor recompile) in the ci and dev profiles: 20 of the candidates, the
# edges each kind of candidate stands for (d = 1 to 3, small odd, 2^k and 2^k +- 1, 2^k +- 8, 2^k + 2 and + 4,
# 3 2^k, one past a block of 4096), so that its conformance run compiles a few widths per dtype instead of every
# one; the thorough profile draws all. Explicit widths (WIDE_ROWS, model widths, many rows) are drawn as for every
# kernel.
WIDTH_PALETTE = (1, 2, 3, 7, 8, 17, 31, 34, 64, 65, 127, 256, 257, 520, 1023, 1028, 1032, 3072, 4097, 8191)
_palette_only = contextvars.ContextVar("palette_only", default=False)


def powers_of_two_and_neighbours(limit: int) -> tuple[int, ...]:
    """2^k - 1, 2^k, 2^k + 1 for 2 <= 2^k, all <= limit (block-size edges of tiled kernels)."""
    found = {2**k + step for k in range(1, limit.bit_length() + 1) for step in (-1, 0, 1)}
    return tuple(sorted(w for w in found if 1 <= w <= limit))


def even_tail_widths(limit: int) -> tuple[int, ...]:
    """2^k - 2, 2^k + 2 and 2^k + 4 for 16 <= 2^k, all <= limit: d = 2, 4 and 6 mod 8, so that a loop over pairs,
    quads or vectors of 8 has a partial last step of every size (a kernel whose tail handles only some of them)."""
    return tuple(sorted(w for k in range(4, limit.bit_length() + 1) for w in (2**k - 2, 2**k + 2, 2**k + 4)
                        if w <= limit))


def vector_tail_widths(limit: int) -> tuple[int, ...]:
    """2^k - 8 and 2^k + 8 for 32 <= 2^k, all <= limit: odd multiples of 8, so a row aligned for 8-element vector
    loads (16 bytes of 16-bit values) still leaves a partial step in every vector, warp-wide or tiled loop of 16
    elements or more (a fast path chosen by d % 8 == 0 that drops the last partial step of its loop)."""
    return tuple(sorted(w for k in range(5, limit.bit_length() + 1) for w in (2**k - 8, 2**k + 8) if w <= limit))


def three_times_powers_of_two(limit: int) -> tuple[int, ...]:
    """3 2^k for 32 <= 2^k, all <= limit: model widths (768, 1536, 3072, 6144) that leave a partial last block, a
    multiple of 16 wide, for a kernel blocking by any power of two from 2^(k+1) on."""
    return tuple(3 * 2**k for k in range(5, limit.bit_length()) if 3 * 2**k <= limit)


def all_width_candidates(max_width: int = CI_MAX_WIDTH) -> list[int]:
    """1, 2, 3, small primes, powers of two and their neighbours, :func:`vector_tail_widths`,
    :func:`even_tail_widths` and :func:`three_times_powers_of_two` up to ``max_width``, ascending."""
    return sorted(w for w in set(SMALL_WIDTHS + SMALL_PRIMES + powers_of_two_and_neighbours(max_width)
                                 + vector_tail_widths(max_width) + even_tail_widths(max_width)
                                 + three_times_powers_of_two(max_width))
                  if w <= max_width)


def width_candidates(max_width: int = CI_MAX_WIDTH) -> list[int]:
    """The widths drawn: :func:`all_width_candidates`, only those of :data:`WIDTH_PALETTE` inside
    :func:`palette_widths_only`."""
    candidates = all_width_candidates(max_width)
    return [w for w in candidates if w in WIDTH_PALETTE] if _palette_only.get() else candidates


@contextlib.contextmanager
def palette_widths_only(active: bool = True) -> Iterator[None]:
    """Inside, :func:`width_candidates` (and so :func:`widths`) keeps the widths of :data:`WIDTH_PALETTE` (``active``;
    otherwise all): set around each test of a kernel that declares ``compiles_per_width`` (properties.plugin)."""
    token = _palette_only.set(active)
    try:
        yield
    finally:
        _palette_only.reset(token)


def widths(max_width: int = CI_MAX_WIDTH, large_from: int = 1024, min_width: int = 1) -> st.SearchStrategy[int]:
    """Row widths d: :func:`width_candidates` from ``min_width`` up to ``max_width``.

    Widths of ``large_from`` and more are drawn one time in eight, so large d stays rare and cheap.
    """
    candidates = [w for w in width_candidates(max_width) if w >= min_width]
    small = [w for w in candidates if w < large_from]
    large = [w for w in candidates if large_from <= w]
    if not large:
        return st.sampled_from(small)
    return st.integers(0, 7).flatmap(lambda pick: st.sampled_from(large if pick == 7 else small))


def row_counts(d: int, most: int = 4, more_every: int = 8) -> st.SearchStrategy[int]:
    """How many rows: 1 to ``most``, and one draw in ``more_every`` one of :data:`MORE_ROWS` (rows x d <= MAX_ELEMENTS:
    fewer for wide rows), where kernels take paths by row count (decode batches, multiples of 8 rows, 64-row
    blocks)."""
    few = st.integers(1, max(1, min(most, MAX_ELEMENTS // d)))
    more = [n for n in MORE_ROWS if n > most and n * d <= MAX_ELEMENTS]
    if not more:
        return few
    return st.integers(1, more_every).flatmap(lambda pick: st.sampled_from(more) if pick == more_every else few)


def epsilons() -> st.SearchStrategy[float]:
    """eps in {1e-5, 1e-6, 1e-2, 1e-12} (shrinking towards the common 1e-5)."""
    return st.sampled_from(EPSILONS)


def storage_dtypes(kernel: Kernel, among: tuple[torch.dtype, ...] | None = None) -> st.SearchStrategy[torch.dtype]:
    """The storage dtypes the kernel computes in (core.capabilities), optionally restricted to ``among``.

    A kernel that computes in none of them skips the test (with the probe's reasons) when the test asked
    for particular dtypes; otherwise it is tried in float32, so that its fault is reported, not skipped.
    A dtype whose probe faulted (core.capabilities: wrong dtype, shape, NaN/inf...) fails the test with that
    fault at once: the claim is ``error`` (``failed`` for NaN/inf), never a pass over the other dtypes.
    """
    caps = discover(kernel)
    dtypes = [d for d in caps.dtypes if among is None or d in among]
    if not dtypes and among is not None:
        names = ", ".join(dtype_name(d) for d in among)
        reasons = "; ".join(caps.dtype_reasons.values()) or "not among its declared dtypes"
        pytest.skip(f"{kernel.name} does not compute in {names}: {reasons}")
    caps.raise_fault(dtypes)
    return st.sampled_from(dtypes or [torch.float32])


def seeds() -> st.SearchStrategy[int]:
    return st.integers(0, 2**31 - 1)


def standard_values(shape: tuple[int, ...], distribution: str, seed: int) -> torch.Tensor:
    """float64 values of ``shape`` from a seeded generator, of order 1, not normalized."""
    generator = host_generator(seed)
    if distribution == "uniform":
        return torch.rand(shape, generator=generator, dtype=torch.float64, device=HOST) * 2 - 1
    if distribution == "integers":
        return torch.randint(-8, 9, shape, generator=generator, device=HOST).to(torch.float64)
    values = torch.randn(shape, generator=generator, dtype=torch.float64, device=HOST)
    if distribution == "sparse":
        return values * (torch.rand(shape, generator=generator, dtype=torch.float64, device=HOST) < 0.2)
    if distribution == "spike":
        values[..., 0] += 30.0
    return values


@st.composite
def rows(draw, d: int, n: int | None = None, offset: float | st.SearchStrategy[float] = 0.0,
         scale: float | st.SearchStrategy[float] = 1.0, more_rows_every: int = 8) -> torch.Tensor:
    """float64 rows [n, d]: ``scale * (offset + z)`` with z of order 1 from one of DISTRIBUTIONS (seeded): ``offset``
    is in units of the scale (a shift of ``offset`` spreads of z).

    ``offset``/``scale`` are numbers or strategies; ``n`` defaults to :func:`row_counts` (``more_rows_every``).
    """
    n = draw(row_counts(d, more_every=more_rows_every)) if n is None else n
    offset = draw(offset) if isinstance(offset, st.SearchStrategy) else offset
    scale = draw(scale) if isinstance(scale, st.SearchStrategy) else scale
    z = standard_values((n, d), draw(st.sampled_from(DISTRIBUTIONS)), draw(seeds()))
    return offset * scale + scale * z


def resolved_offset_ratio(dtype: torch.dtype) -> float:
    """The |mean|/std up to which rows stored in ``dtype`` keep a spread drawn freely: 2^t = 2 / finfo.eps, t the
    significand's bits (bfloat16 256, float16 2048, float32 1.7e7). A mean c has ulp(c) > |c| 2^-t, so a row of
    |c|/std > 2^t spreads less than one ulp of its mean and rounds to one or two values."""
    return 2.0 / torch.finfo(dtype).eps


def values_one_ulp_apart(n: int, d: int, offset: float, scale: float, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """float64 rows [n, d], exact in ``dtype``, from a seeded generator: every value is the centre c (sign of
    ``offset``, |c| = |offset| scale m, m uniform in [1, 2), at most the dtype's largest value / 8, rounded to dtype;
    one c for all rows, as rows drawn by :func:`rows` share their offset and scale) but k values in each row,
    c +- ulp(c) (random signs: the neighbours of c, exact in dtype).

    Such a row has |mean|/std about (|c|/ulp(c)) sqrt(d/k): k = round(d (|c|/ulp(c) / offset)^2), 1 <= k <= d/2,
    puts it near |offset| where the dtype allows; k = 1 gives the largest |mean|/std of a non-constant row of
    dtype, about 2^t sqrt(d) (t its significand bits; bfloat16: 128-256 sqrt(d))."""
    generator = host_generator(seed)
    significand = 1 + torch.rand((), generator=generator, dtype=torch.float64, device=HOST)
    largest = torch.finfo(dtype).max / 8
    centre = (math.copysign(1.0, offset) * (abs(offset) * scale * significand).clamp(max=largest)).to(dtype).double()
    ulp = torch.exp2(torch.floor(torch.log2(centre.abs()))) * torch.finfo(dtype).eps
    k = (d * (centre.abs() / ulp / offset) ** 2).round().clamp(1, max(1, d // 2))
    chosen = torch.rand((n, d), generator=generator, device=HOST).argsort(-1).argsort(-1) < k
    steps = torch.where(torch.rand((n, d), generator=generator, device=HOST) < 0.5, -1.0, 1.0).double()
    return centre + torch.where(chosen, steps * ulp, 0.0)


@st.composite
def rows_one_ulp_apart(draw, d: int, n: int, offset: float, scale: float, dtype: torch.dtype) -> torch.Tensor:
    """16-bit rows at |mean|/std beyond :func:`resolved_offset_ratio` (the only non-constant ones there):
    :func:`values_one_ulp_apart` of a drawn seed."""
    return values_one_ulp_apart(n, d, offset, scale, dtype, draw(seeds()))


def one_ulp_widths(dtype: torch.dtype) -> tuple[int, ...]:
    """The widths of :func:`widths` where 16-bit rows one ulp apart at the largest |mean|/std the model covers
    (:func:`rows_one_ulp_apart` at :func:`valid_offset_ratio`) show a one-pass variance, t the dtype's significand
    bits, 24 float32's: 2^(25 - 2t) - 1 <= d <= 2^(26 - 2t) + 1 (bfloat16 511 to 1025, float16 7 to 17).

    A value m 2^e (m in [1, 2)) has t bits, its square 2t, so the float32 sum of d such squares is exact while
    d m^2 < 2^(26 - 2t): below d = 2^(25 - 2t) for most significands, the one-pass variance errs only in its last
    roundings, which rows one ulp apart often make exact; from 2^(26 - 2t) on it rounds for all. Beyond, the model's
    reach STRUCTURED_REACH / ((d + 1) u_32) falls like 1/d and the one-pass error u_32 kappa^2 with it below the
    bound's own statistics term. Measured on bfloat16 (docs/tightness.md): error/bound 0.03 to 17 at d <= 257,
    median 24 to 4e3 at 511 to 1025, below 1 at 2047 to 8192. Empty for float32 storage (its rows are not
    quantized)."""
    if dtype not in (torch.float16, torch.bfloat16):
        return ()
    bits, accumulated = (1 - round(math.log2(torch.finfo(t).eps)) for t in (dtype, tolerance.accumulation_dtype(dtype)))
    low, high = 2 ** (accumulated + 1 - 2 * bits) - 1, 2 ** (accumulated + 2 - 2 * bits) + 1
    # the window's candidates as measured there; its even tails (2^k - 2, + 2, + 4: a loop's tail, drawn by widths())
    # are left out: at d = 1022 a storage-dtype accumulation of rows one ulp apart fits the one-pass model as well
    tails = set(even_tail_widths(high))
    return tuple(d for d in width_candidates() if low <= d <= high and d not in tails)


def one_ulp_apart_widths(dtype: torch.dtype, max_width: int = 512) -> st.SearchStrategy[int]:
    """Widths for 16-bit rows one ulp apart: :func:`widths` up to ``max_width`` or (about half of the draws)
    :func:`one_ulp_widths`, where they show a one-pass variance."""
    window = one_ulp_widths(dtype)
    return st.one_of(widths(max_width=max_width), st.sampled_from(window)) if window else widths(max_width=max_width)


@st.composite
def stored_rows(draw, d: int, n: int, offset: float, dtype: torch.dtype, one_ulp_apart: bool,
                scale: float | None = None) -> torch.Tensor:
    """float64 rows [n, d] for storage in ``dtype`` at |mean|/std about ``offset``, of a scale of :func:`scales` (or
    ``scale``): :func:`rows_one_ulp_apart` where ``one_ulp_apart`` and ``offset`` is beyond
    :func:`resolved_offset_ratio` (16-bit storage only), :func:`rows` otherwise."""
    scale = draw(scales(dtype)) if scale is None else scale
    if one_ulp_apart and abs(offset) > resolved_offset_ratio(dtype):
        return draw(rows_one_ulp_apart(d, n, offset, scale, dtype))
    return draw(rows(d, n, offset=offset, scale=scale))


def offset_ratios(dtype: torch.dtype) -> st.SearchStrategy[float]:
    """|mean|/std targets: 0, then powers of ten up to MAX_OFFSET_RATIO[dtype], either sign."""
    top = round(math.log10(MAX_OFFSET_RATIO[dtype]))
    magnitudes = st.sampled_from([0.0] + [10.0**k for k in range(0, top + 1)])
    return st.tuples(magnitudes, st.sampled_from([1.0, -1.0])).map(lambda pair: pair[0] * pair[1])


def valid_offset_ratio(d: int, dtype: torch.dtype, model: str | None = None, one_ulp_apart: bool = False) -> float:
    """The largest |mean|/std the error model (``model``, default the run's bound) covers at width d: its bound is
    finite while 2 phi_mu kappa stays below 1 (proofs.error_model, rho_t). Worst case, phi_mu = gamma_{d+1}:
    0.05 / ((d + 1) u_acc) keeps it below 0.1; probabilistic, phi_mu <= lambda u_acc sqrt(d) (lambda of 8 sums):
    1 / (4 lambda u_acc sqrt(d)) keeps it below 0.5 (the larger of the two), and rows of spread 1 about |mean| = c
    keep their residues modulo the partial sums' ulps q <= 2 u_acc d c spread (proofs.probabilistic.aligned:
    R = exp(-(2 pi / q)^2 / 2) <= 4 / sqrt(d)) while c <= pi / (u_acc d sqrt(2 ln(sqrt(d) / 4))).

    ``one_ulp_apart``: for 16-bit rows beyond :func:`resolved_offset_ratio`, drawn one ulp apart (:func:`stored_rows`):
    structured, so their sums take the worst case (either model), whose mean's error g = gamma_{d+1} kappa enters
    rho_t as 2 g + g^2; g <= STRUCTURED_REACH keeps rho_t near 1/2 (finite, eps_r <= 0.42) up to float32's cap,
    where a one-pass variance's error u_32 kappa^2 exceeds the bound's own statistics term ~ d u_32 kappa."""
    u_acc = tolerance.unit_roundoffs(dtype)[0]
    if one_ulp_apart:
        return min(ONE_ULP_MAX_OFFSET_RATIO, STRUCTURED_REACH / ((d + 1) * u_acc))
    worst = 0.05 / ((d + 1) * u_acc)
    if (model or tolerance.bound_in_use()) == "worst-case":
        return min(MAX_OFFSET_RATIO[dtype], worst)
    chance = 1 / (4 * probabilistic.lam(8) * u_acc * math.sqrt(d))
    if d > 16 * math.e**2:
        chance = min(chance, math.pi / (u_acc * d * math.sqrt(2 * math.log(math.sqrt(d) / 4))))
    return min(MAX_OFFSET_RATIO[dtype], max(worst, chance))


def scales(dtype: torch.dtype) -> st.SearchStrategy[float]:
    """Row scales: 1, then smaller and larger ones that stay far from the dtype's overflow."""
    if dtype in (torch.float16, torch.bfloat16):
        return st.sampled_from([1.0, 0.01, 30.0])
    return st.sampled_from([1.0, 1e-3, 1e3])


# host values rounded to the storage dtype on the kernel's device: the one crossing (core.boundary)
rounded = to_kernel


def replacement_values(x: torch.Tensor, seed: int) -> torch.Tensor:
    """Values of x's shape and dtype on its device, 7 x N(0, 1) from ``seed``: what the independence and coupling
    claims put in place of part of x."""
    return rounded(standard_values(tuple(x.shape), "normal", seed) * 7, x.dtype, x.device)


WEIGHT_FORMS = ("none", "constant", "random", "zeros_and_negatives")
PRESENT_WEIGHT_FORMS = ("random", "zeros_and_negatives")
BIAS_FORMS = ("none", "zeros", "random")
PRESENT_BIAS_FORMS = ("random",)


@st.composite
def effective_weights(draw, d: int, forms: tuple[str, ...] = WEIGHT_FORMS) -> torch.Tensor | None:
    """gamma, the effective scale: None, a constant, random, or random with zeros and negative entries."""
    form = draw(st.sampled_from(forms))
    if form == "none":
        return None
    if form == "constant":
        return torch.full((d,), draw(st.sampled_from([1.0, 0.5, -2.0, 3.0])), dtype=torch.float64, device=HOST)
    values = 1.0 + 0.5 * standard_values((d,), "normal", draw(seeds()))
    if form == "zeros_and_negatives":
        values = values * torch.tensor([(0.0, -1.0, 1.0)[i % 3] for i in range(d)], dtype=torch.float64,
                                        device=HOST)
    return values


@st.composite
def biases(draw, d: int, forms: tuple[str, ...] = BIAS_FORMS) -> torch.Tensor | None:
    """beta: None, zeros, or random."""
    form = draw(st.sampled_from(forms))
    if form == "none":
        return None
    if form == "zeros":
        return torch.zeros(d, dtype=torch.float64, device=HOST)
    return standard_values((d,), "normal", draw(seeds()))


@st.composite
def norm_examples(draw, kernel: Kernel, d: int | st.SearchStrategy[int] | None = None,
                  dtypes: tuple[torch.dtype, ...] | None = None, weights: bool = True,
                  upstream: bool = False, offset_ratio: st.SearchStrategy[float] | None = None,
                  eps: st.SearchStrategy[float] | None = None, every_input: bool = False,
                  n: st.SearchStrategy[int] | None = None, ndims: st.SearchStrategy[int] | None = None,
                  parameter_dtype: torch.dtype | None = None, mixed: bool = False, one_ulp_apart: bool = False,
                  bias_only: bool = False, more_rows_every: int = 8, scale: float | None = None,
                  min_width: int = 1) -> dict:
    """One example for a LayerNorm/RMSNorm kernel: the concrete arguments, rounded to the storage dtype.

    Keys: x, weight, eps (and bias for LayerNorm; dy, an upstream gradient, when ``upstream``).
    ``every_input``: weight and bias are always present and random (for claims about every argument); ``bias_only``:
    no weight, a random bias (a kernel's weightless branch, e.g. with the bias in another dtype than x).
    ``n``: the number of rows (default :func:`row_counts`, at most 4, one draw in ``more_rows_every`` more).
    ``ndims``: the dimensions of x (default 2); the rows are then spread over the leading dimensions
    (:func:`leading_shapes`), e.g. [B, S, d], [A, B, C, d]; 1: one row, x of shape [d] (unless ``n`` asks for more).
    With ``upstream``, examples whose exact gradients overflow the storage dtype are left out
    (:func:`properties.norms.representable`), and x is drawn inside the domain of the backward bound as well
    (finite on every row: :func:`backward_width_limit`, then |mean|/std 0 if the drawn one leaves it): an
    example whose bound is not finite would be unchecked. ``parameter_dtype``: weight and bias rounded to it instead
    of x's dtype (:func:`mixed_parameter_examples`); ``mixed``: their dtype drawn among x's and those the kernel takes
    beside x's (core.capabilities: Capabilities.mixes); dy is in the output's dtype (properties.norms.output_dtype).
    ``one_ulp_apart``: a 16-bit |mean|/std beyond :func:`resolved_offset_ratio` is drawn as rows one ulp apart, up to
    their own range (:func:`valid_offset_ratio`), instead of continuous rows within theirs. ``scale``: the rows'
    scale (default drawn from :func:`scales`). ``min_width``: the narrowest d drawn (where d is not given).
    """
    caps = discover(kernel)
    dtype = draw(storage_dtypes(kernel, dtypes))
    limit = backward_width_limit(kernel, dtype, tolerance.bound_in_use()) if upstream else CI_MAX_WIDTH
    d = draw(widths(max_width=limit, min_width=min_width)) if d is None else (
        draw(d) if isinstance(d, st.SearchStrategy) else d)
    ratio = draw(offset_ratio if offset_ratio is not None else offset_ratios(dtype))
    epsilon = draw(eps if eps is not None else epsilons())
    ndim = draw(ndims) if ndims is not None else 2
    count = 1 if ndim == 1 and n is None else draw(n if n is not None else row_counts(d, more_every=more_rows_every))
    shape = draw(leading_shapes(count, ndim))
    # rows whose sums fall back to the worst case (structured, proofs.probabilistic.independent or .aligned) are
    # drawn again a tenth as far from 0 (residues modulo the partial sums' ulps spread again), then within the worst
    # case's range, then centred: an example whose bound is not finite is never checked (it would pass unseen)
    for model, target in ((None, ratio), (None, ratio / 10), ("worst-case", ratio), (None, 0.0)):
        structured = one_ulp_apart and abs(target) > resolved_offset_ratio(dtype)
        cap = valid_offset_ratio(d, dtype, model, one_ulp_apart=structured)
        x = rounded(draw(stored_rows(d, count, max(-cap, min(target, cap)), dtype, structured, scale)), dtype,
                    caps.device)
        if tolerance.covered(kernel, x, epsilon) and (not upstream or tolerance.backward_covered(kernel, x, epsilon)):
            break
    else:
        assume(False)
    example = {"x": x.reshape(*shape, d)}
    present = every_input or bias_only
    gamma = (draw(effective_weights(d, PRESENT_WEIGHT_FORMS if every_input else WEIGHT_FORMS))
             if weights and not bias_only else None)
    if gamma is None and kernel.weight_offset != 0:
        gamma = torch.ones(d, dtype=torch.float64, device=HOST)
    parameters = parameter_dtype or draw(parameter_dtypes(kernel, dtype, mixed))
    example["weight"] = None if gamma is None else rounded(gamma - kernel.weight_offset, parameters, caps.device)
    if kernel.record.has_bias:
        beta = draw(biases(d, PRESENT_BIAS_FORMS if present else BIAS_FORMS)) if weights else None
        example["bias"] = None if beta is None else rounded(beta, parameters, caps.device)
    example["eps"] = epsilon
    if upstream:
        dy = standard_values(tuple(example["x"].shape), "normal", draw(seeds()))
        example["dy"] = rounded(dy, norms.output_dtype(kernel, example["x"], example["weight"]), caps.device)
        exact = norms.reference_vjp(kernel, example["x"], example["weight"], example["eps"], example["dy"])
        assume(all(norms.representable(gradient, dtype) for gradient in exact.values()))
    return example


FLOAT64_OFFSETS = (0.0, 1.0, 1e3, -1e6)  # |mean|/std of float64 rows: centred to far beyond float32's resolution


@st.composite
def float64_examples(draw, kernel: Kernel) -> dict:
    """x [n, d] (n <= 4), weight and bias in float64 with all 53 bits drawn (seeded standard values, a |mean|/std of
    :data:`FLOAT64_OFFSETS`): float64 is not among the probed storage dtypes, so the kernel is first called once in
    it (:func:`properties.norms.require_float64`: one that refuses float64 with an error skips, saying so)."""
    device = discover(kernel).device
    d = draw(widths())
    n = draw(st.integers(1, 4), label="rows")
    offset = draw(st.sampled_from(FLOAT64_OFFSETS), label="|mean|/std")
    x = standard_values((n, d), draw(st.sampled_from(DISTRIBUTIONS)), draw(seeds())) + offset
    gamma = draw(effective_weights(d))
    if gamma is None and kernel.weight_offset != 0:
        gamma = torch.ones(d, dtype=torch.float64, device=HOST)
    example = {"x": rounded(x * draw(scales(torch.float32)), torch.float64, device),
               "weight": None if gamma is None else rounded(gamma - kernel.weight_offset, torch.float64, device),
               "eps": draw(epsilons())}
    if kernel.record.has_bias:
        beta = draw(biases(d))
        example["bias"] = None if beta is None else rounded(beta, torch.float64, device)
    return example


def parameter_dtypes(kernel: Kernel, dtype: torch.dtype, mixed: bool = False) -> st.SearchStrategy[torch.dtype]:
    """The dtype of weight and bias beside x in ``dtype``: x's; with ``mixed``, x's or another the kernel's probe
    accepted beside it (core.capabilities: Capabilities.mixes; float32 with 16-bit x, 16-bit with float32 x). No
    extra draw where the kernel takes no mix (st.just)."""
    taken = [p for x_dtype, p in discover(kernel).mixes if x_dtype == dtype] if mixed else []
    return st.sampled_from([dtype, *taken]) if taken else st.just(dtype)


# A test over every parameter dtype mix (core.capabilities.PARAMETER_MIXES), one parametrized case per mix.
over_parameter_mixes = pytest.mark.parametrize("mix", PARAMETER_MIXES, ids=lambda mix: mix_name(*mix).replace(" ", ""))


def mixed_parameter_examples(kernel: Kernel, mix: tuple[torch.dtype, torch.dtype], examples: Callable | None = None,
                             **options) -> st.SearchStrategy[dict]:
    """:func:`norm_examples` (or ``examples``, a strategy of another kind taking the same ``dtypes``, ``every_input``
    and ``parameter_dtype``: the fused kinds', GroupNorm's) with x in ``mix[0]`` and weight and bias (present, random)
    in ``mix[1]`` (core.capabilities.PARAMETER_MIXES); a LayerNorm's forward draws, one in four, have the bias alone (no
    weight: a kernel's weightless branch, whose output too has x's dtype; the gradient bounds take the bias in the
    weight's dtype, so gradient draws keep both). A mix the kernel refuses or declares it does not take
    skips the test with the reason (also listed as not tested in the results: never a pass); a probe fault in x's
    dtype fails it."""
    caps = discover(kernel)
    if mix not in caps.mixes:
        name, x_dtype = mix_name(*mix), dtype_name(mix[0])
        why = caps.not_tested.get(name) or f"not tested in {x_dtype}: {caps.not_tested.get(x_dtype, '')}"
        pytest.skip(f"{kernel.name} not checked with {name}: {why}")
    if examples is None and kernel.record.has_bias and not options.get("upstream"):  # 1 forward draw in 4: no weight
        return st.integers(1, 4).flatmap(lambda pick: norm_examples(
            kernel, dtypes=mix[:1], every_input=pick < 4, bias_only=pick == 4, parameter_dtype=mix[1], **options))
    return (examples or norm_examples)(kernel, dtypes=mix[:1], every_input=True, parameter_dtype=mix[1], **options)


@st.composite
def leading_shapes(draw, rows: int, ndims: int) -> tuple[int, ...]:
    """The leading dimensions of an ``ndims``-dimensional x holding ``rows`` rows: their product is ``rows``
    (a random factorization, so [B, S] with S > 1 is drawn whenever rows allows it); none for ``ndims`` 1 (x is one
    row [d]), [rows] where one dimension cannot hold them."""
    if ndims == 1:
        return () if rows == 1 else (rows,)
    shape = []
    left = rows
    for _ in range(ndims - 2):
        factor = draw(st.sampled_from([f for f in range(1, left + 1) if left % f == 0]))
        shape.append(factor)
        left //= factor
    return (*shape, left)


@functools.cache
def backward_width_limit(kernel: Kernel, dtype: torch.dtype, model: str) -> int:
    """The largest width of :func:`widths` at which the kernel's backward bound is finite on centred rows (N(0, 1),
    4 rows, eps 1e-5): CI_MAX_WIDTH, except where a kernel declares its backward in a 16-bit storage precision
    (``backward_precision="storage"``: every sum with u = u_storage, proofs.error_model), where the model stops
    at a few dozen (bfloat16) or about a thousand (float16) columns."""
    if kernel.backward_precision != "storage" or dtype not in (torch.float16, torch.bfloat16):
        return CI_MAX_WIDTH
    for d in reversed(all_width_candidates()):
        x = rounded(standard_values((4, d), "normal", d), dtype, HOST)
        if tolerance.backward_covered(kernel, x, 1e-5, model):
            return d
    return 1


def storage_backward_width(kernel: Kernel, dtype: torch.dtype) -> int | None:
    """For gradient examples of a kernel that declares a 16-bit storage-precision backward: the widest row of its
    norm (a fused kind's row, a GroupNorm group, a BatchNorm channel: Kernel.as_plain_norm) where the backward bound
    is finite (:func:`backward_width_limit`); None for every other kernel and dtype."""
    if kernel.backward_precision != "storage" or dtype not in (torch.float16, torch.bfloat16):
        return None
    return backward_width_limit(kernel.as_plain_norm(), dtype, tolerance.bound_in_use())


@st.composite
def dropout_examples(draw, kernel: Kernel, n: int = 1, d: int | st.SearchStrategy[int] | None = None) -> dict:
    """x = scale (offset + z) with no zero entries (a kept value is never 0), offset in {0, 1, 3} (rows with
    a mean: dropout's variance bias depends on it), p in {0.1, 0.25, 0.5, 0.75}, and a seed."""
    caps = discover(kernel)
    dtype = draw(storage_dtypes(kernel))
    d = draw(widths(max_width=4096)) if d is None else (draw(d) if isinstance(d, st.SearchStrategy) else d)
    x = draw(st.sampled_from([0.0, 1.0, 3.0])) + standard_values((n, d), "normal", draw(seeds()))
    x = torch.where(x.abs() < 0.05, torch.full_like(x, 0.5), x) * draw(st.sampled_from([1.0, 3.0, 0.01]))
    return {"x": rounded(x, dtype, caps.device), "p": draw(st.sampled_from([0.1, 0.25, 0.5, 0.75])),
            "seed": draw(seeds())}
