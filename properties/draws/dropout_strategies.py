"""Hypothesis strategies of the dropout claims: inputs with no zero (a kept element is never 0, so the mask is
``y != 0``), drop probabilities, and the sizes at which the statistical tests have their derived power.

The drop probability is drawn from a range with 0, values below 0.1, values not representable in any storage
dtype (0.1, 0.3, 1/3) and values near 1, plus arbitrary floats; the statistical claims draw from
:data:`TESTED_PROBABILITIES`, the values at which properties/bounds/dropout_statistics.py states their power.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from core.boundary import HOST, host_generator
from core.capabilities import discover
from core.registry import Kernel
from properties.draws.strategies import rounded, seeds, standard_values, storage_dtypes

EDGE_PROBABILITIES = (0.0, 1e-3, 0.01, 0.05, 0.1, 1 / 3, 0.3, 0.5, 0.7, 0.9, 0.99, 0.999)
LARGEST_P = 0.999  # below 1: x / (1 - p) stays finite in float16 for |x| <= 65
TESTED_PROBABILITIES = (0.05, 0.1, 0.3, 0.5, 0.7, 0.9)
KEEP_RATE_PROBABILITIES = (1e-3, 0.01, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99)
# Drawn in each dtype: a uniform drawn in x's 16-bit dtype (torch.rand_like(x)) lies on a grid of 2^-8 in bfloat16,
# so p = 0.001 drops 1/256 of the elements and p = 0.999 keeps none; 2^-30: a keep threshold (1 - p) 2^32 computed in
# float32 and cast to uint32 wraps to 0 for 0 < p < 2^-25 and drops every element (NVIDIA/cudnn-frontend#875)
EXTREME_PROBABILITIES = (2.0**-30, 1e-3, 0.999)
VARIANCE_BIAS_WIDTH = 8
VARIANCE_BIAS_PROBABILITIES = tuple(j / VARIANCE_BIAS_WIDTH for j in range(1, 7))  # p d an integer
SCALES = (1.0, 3.0, 0.01)

# The sizes of the statistical tests (elements per example, row widths) and their share of the profile's examples
# (profiles.share): tests/test_dropout_statistics.py derives each test's power at these sizes.
KEEP_RATE_ELEMENTS, KEEP_RATE_WIDTHS, KEEP_RATE_FRACTION = 2**16, (16, 256, 1024, 4096), 0.25
EXTREME_FRACTION = 0.1  # the keep rate at EXTREME_PROBABILITIES, in each dtype
# dropout.keep_rate's false-alarm budget (dropout_statistics.BUDGET) among its tests: the drawn probabilities, at
# scale, and the extreme probabilities (split among the dtypes they are drawn in)
KEEP_RATE_SHARES = {"drawn": 0.4, "at scale": 0.4, "extreme": 0.2}
MASK_ELEMENTS, MASK_WIDTHS, MASK_FRACTION = 2**17, (1, 2, 3, 5, 8, 16, 64, 128), 0.25
INDEPENDENCE_ELEMENTS, INDEPENDENCE_WIDTHS, INDEPENDENCE_FRACTION = 2**18, (2, 3, 8, 64, 256, 1024), 0.15
WIDE_INDEPENDENCE_ELEMENTS = 2**16  # 8 rows of 8192: rows that share one mask above some width
SEED_ELEMENTS, SEED_WIDTHS = 2**14, (256, 1024)
LAYOUT_ELEMENTS, LAYOUT_WIDTHS, LAYOUT_FRACTION = 2**17, (256, 512), 0.1
LARGE_ELEMENTS = 2**20
# On a GPU the at-scale examples go beyond 2^24 elements: a kernel computing per element index in float32 (a counter,
# a uniform from index / n) cannot tell indices apart there (float32 has 24 significand bits), so neighbours share
# their draws (dropout.independence) or the rate drifts (dropout.keep_rate)
GPU_ELEMENTS = 2**24 + 2**22
LARGE_PATH_ELEMENTS = 2**17  # above 65 536: where a kernel may switch to a code path for large inputs
ONE_EXAMPLE = 1 / 20  # one example under ci, 20 under thorough


def at_scale_elements(kernel: Kernel) -> int:
    """The size of the at-scale examples: GPU_ELEMENTS where the kernel runs on a CUDA GPU, LARGE_ELEMENTS elsewhere
    (Triton's interpreter and CPU kernels would take minutes beyond 2^24; those draws are stated as GPU-only)."""
    return GPU_ELEMENTS if discover(kernel).device.startswith("cuda") else LARGE_ELEMENTS


def drop_probabilities() -> st.SearchStrategy[float]:
    """p in [0, LARGEST_P]: the edge values and arbitrary floats."""
    return st.one_of(st.sampled_from(EDGE_PROBABILITIES), st.floats(0.0, LARGEST_P))


def nonzero_values(shape: tuple[int, ...], seed: int, offset: float, scale: float) -> torch.Tensor:
    """float64 scale (offset + z), z standard normal, entries of magnitude below 0.05 replaced by 0.5."""
    x = offset + standard_values(shape, "normal", seed)
    return torch.where(x.abs() < 0.05, torch.full_like(x, 0.5), x) * scale


def exact_zeros(shape: tuple[int, ...], seed: int, device: str, share: float = 0.25) -> torch.Tensor:
    """Which elements of an x of ``shape`` a test sets to exactly 0: a bool tensor on ``device``, each element True
    with probability ``share`` (drawn on the host from ``seed``)."""
    return (torch.rand(shape, generator=host_generator(seed), dtype=torch.float64, device=HOST) < share).to(device)


@st.composite
def dropout_inputs(draw, kernel: Kernel, shape: tuple[int, ...], p: st.SearchStrategy[float] | None = None,
                   dtypes: tuple[torch.dtype, ...] | None = None) -> dict:
    """{"x", "p", "seed"}: x of ``shape`` with no zero, rounded to a storage dtype the kernel computes in (among
    ``dtypes`` when given)."""
    dtype = draw(storage_dtypes(kernel, dtypes))
    values = nonzero_values(shape, draw(seeds()), draw(st.sampled_from([0.0, 1.0, 3.0])), draw(st.sampled_from(SCALES)))
    probability = draw(p if p is not None else drop_probabilities())
    return {"x": rounded(values, dtype, discover(kernel).device), "p": probability, "seed": draw(seeds())}


def widths_and_rows(elements: int, widths: tuple[int, ...]) -> st.SearchStrategy[tuple[int, int]]:
    """(rows, d) with rows * d close to ``elements``."""
    return st.sampled_from(widths).map(lambda d: (max(1, elements // d), d))


@st.composite
def mask_inputs(draw, kernel: Kernel, elements: int, widths: tuple[int, ...],
                probabilities: tuple[float, ...] = TESTED_PROBABILITIES,
                dtypes: tuple[torch.dtype, ...] | None = None) -> dict:
    """An input of about ``elements`` elements, [rows, d] with d from ``widths``, p from ``probabilities``, in one of
    ``dtypes`` (default: any the kernel computes in)."""
    shape = draw(widths_and_rows(elements, widths))
    return draw(dropout_inputs(kernel, shape, st.sampled_from(probabilities), dtypes))


@st.composite
def variance_bias_inputs(draw, kernel: Kernel) -> dict:
    """One row of VARIANCE_BIAS_WIDTH elements offset (1 + 0.3 z): rows with a mean, where the effects of a fixed
    count per row and of shared blocks on E[Var(z)] are large against Var(z)'s spread (dropout_statistics)."""
    dtype = draw(storage_dtypes(kernel))
    offset = draw(st.sampled_from([1.0, -2.0, 3.0])) * draw(st.sampled_from(SCALES))
    x = nonzero_values((1, VARIANCE_BIAS_WIDTH), draw(seeds()), 1 / 0.3, 0.3 * offset)  # offset (1 + 0.3 z)
    return {"x": rounded(x, dtype, discover(kernel).device),
            "p": draw(st.sampled_from(VARIANCE_BIAS_PROBABILITIES)), "seed": draw(seeds())}
