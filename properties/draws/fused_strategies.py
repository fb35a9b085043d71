"""Hypothesis strategies for the fused residual add + norm kinds: the branch x, the residual, weight, bias, eps
(and dy, dh), rounded to the kernel's storage dtype (weight and bias to ``parameter_dtype`` when given: the mixes of
core.capabilities.PARAMETER_MIXES, drawn through strategies.mixed_parameter_examples), built from
properties.draws.strategies' pieces.

The residual is drawn like x (its own distribution, offset and scale, up to 4x larger: the residual stream
usually dominates the branch), as -x ("cancelling": h = 0, a zero row for the norm, its special input) or, for a
kernel that takes it (core.capabilities: Capabilities.residual_none), as None: a first layer's call, residual_out = x.
Each of x and the residual keeps |mean|/std within half the error model's range, so h = x + residual stays
within it; an example whose derived forward bound is not finite is left out (``assume``), never passed.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume
from hypothesis import strategies as st

from core.boundary import HOST, host_generator
from core.capabilities import RESIDUAL_MIXES, discover, dtype_name, residual_mix_name
from core.registry import Kernel
from properties import norms
from properties.bounds import tolerance
from properties.draws.dropout_strategies import SCALES, TESTED_PROBABILITIES, nonzero_values
from properties.draws.strategies import (
    BIAS_FORMS,
    CI_MAX_WIDTH,
    MAX_ELEMENTS,
    PRESENT_BIAS_FORMS,
    PRESENT_WEIGHT_FORMS,
    WEIGHT_FORMS,
    biases,
    effective_weights,
    epsilons,
    leading_shapes,
    offset_ratios,
    parameter_dtypes,
    rounded,
    row_counts,
    rows,
    scales,
    seeds,
    standard_values,
    storage_backward_width,
    storage_dtypes,
    valid_offset_ratio,
    widths,
)
from properties.norms import output_dtype, representable

RESIDUAL_FORMS = ("independent", "independent", "independent", "cancelling")
MASK_RESIDUALS = ("zeros", "within x")
# The sizes of the dropout + add kind's statistical tests (tests/test_dropout_add_statistics.py derives their power
# there) and their share of the profile's examples: few, wide rows (an interpreted Triton kernel runs a program per
# row: 64 x 1024 takes 0.8 s, 1024 x 64 13 s on an idle core).
# The mask tests' shapes: rows wider than 4096 (a kernel's wide path), and 128 rows (a mask repeating every 64 rows
# or fewer: the independence test compares rows r and r + 64)
MASK_SHAPES, KEEP_RATE_FRACTION, INDEPENDENCE_FRACTION = ((8, 8192), (128, 512)), 0.25, 0.15
# drop_add_ln.keep_rate's false-alarm budget between its tests: the drawn probabilities and the extreme ones in each
# dtype (dropout_strategies.EXTREME_PROBABILITIES, EXTREME_FRACTION; split among the dtypes)
KEEP_RATE_SHARES = {"drawn": 0.8, "extreme": 0.2}
SEED_SHAPES, SEED_FRACTION = ((4, 4096), (16, 1024)), 0.15
LARGE_PATH_SHAPE = (32, 4096)  # 131 072 elements: above 65 536, where a kernel may switch to another code path
# add_norm_examples' ndims for the claims whose checks take any batch shape: x [rows, d], [B, S, d], [A, B, C, d]
# and, for one row, [d] (one token: a kernel that unsqueezes the wrong end of a 1-D x normalizes each element alone)
BATCHES = st.sampled_from((2, 3, 4, 1))
FOUR_D_ROWS = (4, 8, 12)  # the rows of a 4-D x (when rows x d allow): its third dimension more than one often


def _parameters(draw, kernel: Kernel, d: int, dtype: torch.dtype, device: str, every_input: bool = False) -> dict:
    """weight (and bias for LayerNorm) in any of their forms (present ones with ``every_input``), in ``dtype`` (x's,
    or the parameters' own dtype of a mix)."""
    gamma = draw(effective_weights(d, PRESENT_WEIGHT_FORMS if every_input else WEIGHT_FORMS))
    if gamma is None and kernel.weight_offset != 0:
        gamma = torch.ones(d, dtype=torch.float64, device=HOST)
    parameters = {"weight": None if gamma is None else rounded(gamma - kernel.weight_offset, dtype, device)}
    if kernel.record.has_bias:
        beta = draw(biases(d, PRESENT_BIAS_FORMS if every_input else BIAS_FORMS))
        parameters["bias"] = None if beta is None else rounded(beta, dtype, device)
    return parameters


@st.composite
def add_norm_examples(draw, kernel: Kernel, d: int | st.SearchStrategy[int] | None = None, upstream: bool = False,
                      every_input: bool = False, residual: str | None = None,
                      dtypes: tuple[torch.dtype, ...] | None = None,
                      parameter_dtype: torch.dtype | None = None, mixed: bool = False,
                      ndims: st.SearchStrategy[int] | None = None, n: int | None = None,
                      residual_dtype: torch.dtype | None = None, more_rows_every: int = 8, min_width: int = 1) -> dict:
    """Keys x, residual, weight, eps (bias for LayerNorm; dy and dh with ``upstream``); weight and bias in
    ``parameter_dtype``, else x's dtype or with ``mixed`` another the kernel takes (strategies.parameter_dtypes);
    the residual in ``residual_dtype`` (never None then), else x's dtype.
    ``ndims``: the dimensions of x and the residual (default 2; :data:`BATCHES` draws [B, S, d] as well), the rows
    spread over the leading dimensions as strategies.norm_examples spreads them; ``n`` rows (default
    strategies.row_counts, one draw in ``more_rows_every`` more than 4); ``min_width``: the narrowest d drawn.

    With ``upstream``, inside the backward bound's domain as strategies.norm_examples draws: for a kernel that
    declares its backward in a 16-bit storage precision, centred rows no wider than strategies.backward_width_limit;
    an example whose gradients' bound is still not finite is left out (never an unchecked example)."""
    caps = discover(kernel)
    dtype = draw(storage_dtypes(kernel, dtypes))
    widest = storage_backward_width(kernel, dtype) if upstream else None
    if d is None:
        d = draw(widths(CI_MAX_WIDTH if widest is None else widest, min_width=min_width))
    elif isinstance(d, st.SearchStrategy):
        d = draw(d)
    limit = valid_offset_ratio(d, dtype) / 2 if widest is None else 0.0
    parameters = parameter_dtype or draw(parameter_dtypes(kernel, dtype, mixed))

    def ratio() -> float:
        return max(-limit, min(draw(offset_ratios(dtype)), limit))

    ndim = draw(ndims) if ndims is not None else 2
    if n is None and ndim == 1:
        n = 1  # x [d]: one token
    elif n is None and ndim == 4 and max(FOUR_D_ROWS) * d <= MAX_ELEMENTS:
        n = draw(st.sampled_from(FOUR_D_ROWS))  # rows enough for [A, B, C, d] with C > 1
    x = draw(rows(d, n=n, offset=ratio(), scale=scales(dtype), more_rows_every=more_rows_every))
    none = ("none",) if caps.residual_none and residual_dtype is None else ()
    form = residual or draw(st.sampled_from(RESIDUAL_FORMS + none))
    if form == "cancelling":
        r = -x
    elif form == "none":
        r = None
    else:
        r = draw(rows(d, n=x.shape[0], offset=ratio(), scale=scales(dtype))) * draw(st.sampled_from([1.0, 4.0]))
    shape = (*draw(leading_shapes(x.shape[0], ndim)), d)
    example = {"x": rounded(x.reshape(shape), dtype, caps.device),
               "residual": None if r is None else rounded(r.reshape(shape), residual_dtype or dtype, caps.device),
               **_parameters(draw, kernel, d, parameters, caps.device, every_input),
               "eps": draw(epsilons())}
    h_dtype = norms.residual_dtype(kernel, example["residual"], example["x"])
    h = tolerance.residual_sum(example["x"], example["residual"], h_dtype)
    bound = tolerance.forward(kernel, example["x"], example["weight"], example.get("bias"), example["eps"], h=h)
    assume(bool(np.isfinite(bound).all()))
    if upstream:
        shape = tuple(example["x"].shape)
        y_dtype = output_dtype(kernel, example["x"], example["weight"])
        example["dy"] = rounded(standard_values(shape, "normal", draw(seeds())), y_dtype, caps.device)
        example["dh"] = rounded(standard_values(shape, "normal", draw(seeds())), h_dtype, caps.device)
        exact = norms.reference_vjp(kernel, h, example["weight"], example["eps"], example["dy"], dh=example["dh"])
        assume(all(representable(g, dtype) for g in exact.values()))
        bounds = tolerance.backward(kernel, example["x"], example["weight"], example["eps"], example["dy"],
                                    bias=example.get("bias"), h=h, dh=example["dh"], residual=example["residual"])
        assume(all(bool(np.isfinite(b).all()) for b in bounds.values()))
    return example


# A test over every residual dtype mix (core.capabilities.RESIDUAL_MIXES), one parametrized case per mix.
over_residual_mixes = pytest.mark.parametrize("mix", RESIDUAL_MIXES,
                                              ids=lambda mix: residual_mix_name(*mix).replace(" ", ""))


def residual_mix_examples(kernel: Kernel, mix: tuple[torch.dtype, torch.dtype], **options) -> st.SearchStrategy[dict]:
    """:func:`add_norm_examples` with x in ``mix[0]`` and the residual (never None) in ``mix[1]``
    (core.capabilities.RESIDUAL_MIXES: a float32 residual stream beside 16-bit x). A mix the kernel refuses skips
    the test with the reason (also listed as not tested in the results: never a pass); a probe fault in x's dtype
    fails it."""
    require_residual_mix(kernel, mix)
    return add_norm_examples(kernel, dtypes=mix[:1], residual_dtype=mix[1], **options)


def require_residual_mix(kernel: Kernel, mix: tuple[torch.dtype, torch.dtype]) -> None:
    """Skip the calling test, with the reason, where the kernel does not take the residual dtype mix (probed: refused,
    or x's dtype not computed)."""
    if mix not in discover(kernel).residual_mixes:
        caps, name, x_dtype = discover(kernel), residual_mix_name(*mix), dtype_name(mix[0])
        why = caps.not_tested.get(name) or f"not tested in {x_dtype}: {caps.not_tested.get(x_dtype, '')}"
        pytest.skip(f"{kernel.name} not checked with {name}: {why}")


# masked_examples' default shapes: one draw in MASKED_WIDE_EVERY of rows wider than a backward's one block of 1024
# columns (its per-block row sums), one in MASKED_BATCH_EVERY x of 3 dimensions [B, S, d] (dweight summed over the
# first dimension only), and strategies.row_counts' rows (one draw in 8 of 5 to 65: a persistent grid's rows per
# program, a block of rows)
MASKED_WIDE_WIDTHS = (1025, 2048, 4096)
MASKED_WIDE_EVERY = 8
MASKED_BATCH_EVERY = 4


@st.composite
def _masked_shape(draw, widest: int | None) -> tuple[int, ...]:
    """x's shape of :func:`masked_examples` by default (the module constants above)."""
    wide = widest is None and draw(st.integers(1, MASKED_WIDE_EVERY), label="wide") == MASKED_WIDE_EVERY
    d = draw(st.sampled_from(MASKED_WIDE_WIDTHS) if wide else
             widths(max_width=1024 if widest is None else min(1024, widest)))
    n = draw(row_counts(d))
    ndims = 3 if draw(st.integers(1, MASKED_BATCH_EVERY), label="batch") == MASKED_BATCH_EVERY else 2
    return (*draw(leading_shapes(n, ndims)), d)


@st.composite
def masked_examples(draw, kernel: Kernel, shapes: tuple[tuple[int, int], ...] | None = None,
                    probabilities: tuple[float, ...] = TESTED_PROBABILITIES, upstream: bool = False,
                    dtypes: tuple[torch.dtype, ...] | None = None, parameter_dtype: torch.dtype | None = None,
                    every_input: bool = False, mixed: bool = False, residual_dtype: torch.dtype | None = None
                    ) -> dict:
    """An example of kind dropout_add_layernorm whose mask residual_out shows exactly (claim drop_add_ln.keep_rate):
    x with no zero (dropout_strategies.nonzero_values), the residual zeros or x times u, u uniform in [-1, 1]
    element by element (so |residual_i| <= |x_i| after rounding), p from ``probabilities``, a seed; the shape from
    ``shapes`` (default :func:`_masked_shape`: up to 4 rows of a width up to 1024, sometimes more rows, wider rows
    or x [B, S, d]). With ``upstream``, dy and dh (the residual is then never zero: a row dropped entirely is the
    residual row, not a zero row of the norm), and for a kernel that declares a 16-bit storage-precision backward
    centred rows no wider than strategies.backward_width_limit. Weight and bias in ``parameter_dtype``, else x's
    dtype or with ``mixed`` another the kernel takes; the residual in ``residual_dtype`` (a float32 residual stream
    beside 16-bit x: core.capabilities.RESIDUAL_MIXES), else x's."""
    caps = discover(kernel)
    dtype = draw(storage_dtypes(kernel, dtypes))
    widest = storage_backward_width(kernel, dtype) if upstream else None
    shape = draw(_masked_shape(widest) if shapes is None else st.sampled_from(shapes))
    offset = draw(st.sampled_from([0.0, 1.0])) if widest is None else 0.0  # centred: the bound's domain
    x64 = nonzero_values(shape, draw(seeds()), offset, draw(st.sampled_from(SCALES)))
    x = rounded(x64, dtype, caps.device)
    parameters = parameter_dtype or draw(parameter_dtypes(kernel, dtype, mixed))
    form = "within x" if upstream else draw(st.sampled_from(MASK_RESIDUALS))
    fraction = torch.zeros(shape, dtype=torch.float64, device=HOST)
    if form == "within x":
        generator = host_generator(draw(seeds()))
        fraction = torch.rand(shape, generator=generator, dtype=torch.float64, device=HOST) * 2 - 1
    example = {"x": x, "residual": rounded(x.to(HOST, torch.float64) * fraction, residual_dtype or dtype, caps.device),
               **_parameters(draw, kernel, shape[-1], parameters, caps.device, every_input),
               "eps": draw(epsilons()),
               "p": draw(st.sampled_from(probabilities)), "seed": draw(seeds())}
    if upstream:
        h_dtype = norms.residual_dtype(kernel, example["residual"], x)
        y_dtype = output_dtype(kernel, x, example["weight"])
        example["dy"] = rounded(standard_values(shape, "normal", draw(seeds())), y_dtype, caps.device)
        example["dh"] = rounded(standard_values(shape, "normal", draw(seeds())), h_dtype, caps.device)
    return example


@st.composite
def row_zero_changed(draw, example: dict) -> dict:
    """The example with at least two rows (x's and the residual's rows repeated) and ``changed``: x with row 0
    replaced by 7 z (z normal), for the row-independence claims."""
    x, residual = example["x"], example["residual"]
    if x.shape[0] < 2:
        x = torch.cat([x, x.flip(0) * 0.5])
        residual = None if residual is None else torch.cat([residual, residual])
    changed = x.clone()
    changed[0] = rounded(standard_values(x.shape[-1:], "normal", draw(seeds())) * 7, x.dtype, x.device)
    return {**example, "x": x, "residual": residual, "changed": changed}
