"""Examples for the bitwise claims of every norm kind (``*.batch_invariance``, ``*.determinism``; issue 29).

A kernel is compared with itself bit for bit, so no bound is involved: the rows are seeded normal values (a few
distributions), rounded to a dtype the kernel computes in, with every input of its kind (core.kinds: x, residual,
weight, bias, eps, num_groups, p = 0 with a seed for the dropout + add kind; the mode, momentum and running buffers of
the kinds with running statistics; a format and a static or dynamic scale for the quantized kinds) and, for a kind
with a backward, the upstream gradients of its outputs (dy and, for the residual kinds, dh in residual_out's dtype).
The kinds over x [N, C, *] draw samples [C, S] (weight and bias per channel, or element-wise [C, S] for LayerNorm over
(C, *)). The mode of a kind with running statistics is drawn, training first (its statistics reduce in the kernel),
but for the batch-invariance examples of a kind whose statistics couple the samples (BatchNorm: eval mode only,
proofs.claims.invariance); a training call has at least two elements per row of statistics (S >= 2).

The batch sizes straddle the switch points where kernels change their blocking with the row count: powers of two and
their neighbours, and the SM counts of H100 (PCIe 114, SXM 132) and their neighbours, up to :data:`CUDA_ROWS` where
the kernel runs on a GPU. On the CPU a call stays interpreter-friendly, at most :data:`CPU_ROWS` rows and
:data:`CPU_ELEMENTS` elements (Triton's interpreter runs one program per row, about 3.5 ms for a forward and backward
of a 16-wide row: 257 rows take 1 s, 1 025 rows 3.6 s; Liger's GroupNorm 8 s at 257 samples of 32 elements). Sizes
and widths are listed largest first, so that the first example Hypothesis tries, and the one it shrinks towards,
crosses the most switch points (256 among them on the CPU) with the longest reductions. The weight and bias are
present first (dweight and dbias are what a nondeterministic reduction most often breaks).
"""

from __future__ import annotations

import math

import torch
from hypothesis import strategies as st

from core.boundary import HOST
from core.capabilities import discover
from core.registry import Kernel
from properties import norms
from properties.draws.batchnorm_strategies import MOMENTA, running_buffers
from properties.draws.quant_strategies import reference_amax, static_scale
from properties.draws.strategies import (
    PRESENT_BIAS_FORMS,
    PRESENT_WEIGHT_FORMS,
    biases,
    effective_weights,
    epsilons,
    powers_of_two_and_neighbours,
    rounded,
    seeds,
    standard_values,
    storage_dtypes,
    width_candidates,
)

SM_COUNTS = (114, 132)  # H100 PCIe and SXM: a kernel that sizes its grid by the SM count switches there
CUDA_ROWS, CPU_ROWS = 4097, 257
CUDA_ELEMENTS, CPU_ELEMENTS = 4097 * 64, 257 * 64
# the quantized kinds (a forward only) draw a GPU's batches on the CPU too: token counts past 1024, where serving
# kernels switch their block size by token count
QUANT_CPU_ROWS = CUDA_ROWS
MAX_WIDTH = 64
# the most rows of a determinism example on the CPU (on a GPU: the batch sizes above): past 32 (a kernel that sums
# its dweight partials with atomics from a batch of 32 on)
DETERMINISM_ROWS = 65
GROUP_CHANNELS, GROUP_SPATIAL = (2, 4, 6, 8), (1, 2, 4)  # a sample [C, S] of the kinds over x [N, C, *]
# Long rows: a kernel that partitions a row over a block of threads whose size it picks by the batch size (vLLM's
# fused RMSNorm, 1024 threads below 256 tokens and 256 from there) sums a row in another order only where a thread
# holds more than one element, in rows longer than 256; a sample [C, S] of 8 x 128 for the kinds over x [N, C, *]
WIDE_ROWS = ((1024,), (320,))
WIDE_SAMPLES = ((8, 128),)
WIDE_LEAST_ROWS = 255  # their batches on both sides of 256 rows
CUDA_WIDE_ELEMENTS, CPU_WIDE_ELEMENTS = 4097 * 1024, 257 * 1024  # the most elements of such a call
VALUE_DISTRIBUTIONS = ("normal", "uniform", "spike")
# Model widths (hidden sizes 2048 to 8192), where a serving kernel splits a row over several programs when the tokens
# are fewer than the SMs (Thinking Machines, "Defeating Nondeterminism in LLM Inference": split reductions for small
# batches) or adds the partials of a multi-CTA row with atomics (TransformerEngine's ctas_per_row): rows of
# WIDE_ROWS' at most 1024 never take that path. Their batches: 131 tokens (below 132 SMs) and 257 (above 256), the
# windows one token and MODEL_WIDTH_WINDOW (a decode batch: a split sum differs from the whole row's in some rows
# only, a fifth of them at d = 4096); determinism: MODEL_WIDTH_DETERMINISM_ROWS rows, repeated. float32 rows only: the
# partial sums of 16-bit rows (squares of 8 or 11 significant bits, a few thousand of them) are exact in float32, so
# any order of them gives the same bits, and a split or an atomic order cannot show. 128 rows: a quantized output
# absorbs most rows' one-ulp change of rstd (a random order of 8 atomic partials changed a row's FP8/INT8 q or scale
# in 13-17 % of rows of 2048-8192 normal values, tests/corpus/bitwise.py's *_WIDE_ATOMIC_SPLIT), so that 32 rows
# missed it in 3 % of runs; 128 miss it with odds below 1e-6, and 257 is past the SMs (a kernel that adds the
# parameter gradients' per-program partials with atomics once the rows outnumber the SMs: Liger-Kernel#945). 12288
# and 16384: rows wider than a block of 8192 split over programs or a cluster (flashinfer#4335)
MODEL_WIDTHS = (2048, 4096, 8192, 12288, 16384)  # the narrowest first: the first example's calls are the cheapest
MODEL_WIDTH_BATCHES = (257, 131)
MODEL_WIDTH_WINDOW = 32
MODEL_WIDTH_DETERMINISM_ROWS = (257,)


def batch_sizes(device: str, row_elements: int, cpu_rows: int = CPU_ROWS, wide: bool = False,
                cpu_elements: int = CPU_ELEMENTS) -> tuple[int, ...]:
    """The row counts drawn on ``device`` for rows of ``row_elements`` elements, largest first: the switch points
    (powers of two and their neighbours, the SM counts and theirs) up to the device's rows (``cpu_rows`` on the CPU)
    and elements (``cpu_elements`` on the CPU; the long rows' with ``wide``)."""
    on_gpu = str(device).startswith("cuda")
    most = (CUDA_WIDE_ELEMENTS if on_gpu else CPU_WIDE_ELEMENTS) if wide else (
        CUDA_ELEMENTS if on_gpu else cpu_elements)
    limit = min(CUDA_ROWS if on_gpu else cpu_rows, most // row_elements)
    limit = max(1, limit)
    sizes = set(powers_of_two_and_neighbours(limit)) | {s + k for s in SM_COUNTS for k in (-1, 0, 1)} | {1}
    return tuple(sorted((s for s in sizes if s <= limit), reverse=True))


@st.composite
def row_shapes(draw, kernel: Kernel, least: int = 1, wide: bool = False,
               row_widths: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """The shape of one row: (d,) with d <= :data:`MAX_WIDTH`, or a sample's (C, S) of a kind over x [N, C, *], with
    S >= ``least``; the widest first (the first example Hypothesis tries has the longest reductions). ``wide``: one
    of :data:`WIDE_ROWS` or :data:`WIDE_SAMPLES`; ``row_widths``: (d,) with d one of them (the row kinds)."""
    if row_widths is not None:
        assert kernel.record.scope == "row", "row widths are for the kinds normalizing rows"
        return (draw(st.sampled_from(row_widths)),)
    if wide:
        return draw(st.sampled_from(WIDE_ROWS if kernel.record.scope == "row" else WIDE_SAMPLES))
    if kernel.record.scope != "row":
        return (draw(st.sampled_from(GROUP_CHANNELS[::-1])),
                draw(st.sampled_from([s for s in GROUP_SPATIAL[::-1] if s >= least])))
    return (draw(st.sampled_from(width_candidates(MAX_WIDTH)[::-1])),)


def as_channels_last(x: torch.Tensor) -> torch.Tensor:
    """x [N, C, S] as x [N, C, S / a, a] (a the largest divisor of S up to its square root) in channels-last memory:
    the same values, each channel's elements C apart."""
    n, c, spatial = x.shape
    a = max(f for f in range(1, math.isqrt(spatial) + 1) if spatial % f == 0)
    return x.reshape(n, c, spatial // a, a).contiguous(memory_format=torch.channels_last)


@st.composite
def bitwise_examples(draw, kernel: Kernel, cpu_rows: int = CPU_ROWS, window: bool = False,
                     wide: bool = False, channels_last: bool | None = None, cpu_elements: int = CPU_ELEMENTS,
                     row_widths: tuple[int, ...] | None = None, rows: tuple[int, ...] | None = None,
                     dtypes: tuple[torch.dtype, ...] | None = None) -> dict:
    """One call's inputs for a norm kernel of any kind, keyed by role, with its upstream gradients ``dy`` (and ``dh``
    for the residual kinds); the row count among :func:`batch_sizes` on the kernel's device (at most ``cpu_rows``
    rows and ``cpu_elements`` elements on the CPU). ``wide``: long rows (:func:`row_shapes`), at least
    :data:`WIDE_LEAST_ROWS` of them. ``row_widths`` and ``rows``: the row kinds' widths and the row counts drawn
    instead, on any device (:data:`MODEL_WIDTHS`, :data:`MODEL_WIDTH_BATCHES`); ``dtypes``: x's dtypes, among those
    the kernel computes in.
    ``channels_last``: x [N, C, S] as a channels-last [N, C, S / a, a] (:func:`as_channels_last`; the kinds with
    per-channel parameters, S >= 2 drawn then); None: drawn for those kinds.
    ``window``: the example also holds ``window`` = (offset, k), rows offset to offset + k - 1 to be called again on
    their own: k among the batch sizes up to n / 4 (1 for n < 4), the largest first, and the window at the end of the
    call first (its rows at other positions there than on their own), else anywhere."""
    caps = discover(kernel)
    record = kernel.record
    dtype = draw(storage_dtypes(kernel, dtypes))
    # the mode: training first; eval only for batch invariance where the statistics couple the samples
    training = record.running_statistics and not (window and record.batch_statistics) and draw(
        st.sampled_from((True, False)), label="training")
    row_shape = draw(row_shapes(kernel, least=2 if training or channels_last else 1, wide=wide,
                                row_widths=row_widths))
    sizes = rows or batch_sizes(caps.device, math.prod(row_shape), cpu_rows, wide, cpu_elements)
    n = draw(st.sampled_from([s for s in sizes if s >= WIDE_LEAST_ROWS] if wide else sizes), label="rows")
    shape = (n, *row_shape)

    def values() -> torch.Tensor:
        return standard_values(shape, draw(st.sampled_from(VALUE_DISTRIBUTIONS)), draw(seeds()))

    x = rounded(values(), dtype, caps.device)
    if channels_last is None:
        channels_last = record.per_channel and row_shape[1] > 1 and draw(st.booleans(), label="channels-last")
    if channels_last:
        x = as_channels_last(x)  # an NHWC path of its own (its dweight reduction too)
    example: dict = {"x": x}
    if record.has_residual:
        example["residual"] = rounded(values(), dtype, caps.device)
    # a parameter per element of a row, per channel, or per element of a sample [C, S] (LayerNorm over (C, *))
    parameter_shape = row_shape if record.scope == "sample" else row_shape[:1]
    length = math.prod(parameter_shape)
    # weight and bias together or neither (torch's F.group_norm backward raises for a bias without a weight:
    # docs/findings.md, a declared deviation of gn.jacobian, not these claims' business)
    present = draw(st.sampled_from((True, False)), label="weight and bias")
    gamma = draw(effective_weights(length, PRESENT_WEIGHT_FORMS)) if present else None
    if gamma is None and kernel.weight_offset != 0:
        gamma = torch.ones(length, dtype=torch.float64, device=HOST)
    example["weight"] = None if gamma is None else rounded(
        (gamma - kernel.weight_offset).reshape(parameter_shape), dtype, caps.device)
    if record.has_bias:
        example["bias"] = rounded(draw(biases(length, PRESENT_BIAS_FORMS)).reshape(parameter_shape), dtype,
                                  caps.device) if present else None
    example["eps"] = draw(epsilons())
    if record.running_statistics:  # buffers in x's dtype, as the parameters; optional in training
        example.update(training=training, momentum=draw(st.sampled_from(MOMENTA)))
        buffered = not training or draw(st.sampled_from((True, False)), label="running buffers")
        example["running_mean"], example["running_var"] = draw(running_buffers(
            row_shape[0], 1.0, 0.0, dtype, caps.device)) if buffered else (None, None)
    if record.grouped:
        # groups of at least two elements: one-element groups are gn.degenerate's (torch refuses them in training)
        channels, spatial = row_shape
        example["num_groups"] = draw(st.sampled_from([g for g in range(1, channels + 1)
                                                      if channels % g == 0 and channels // g * spatial > 1]))
    if record.dropout:  # p = 0: the mask is drawn by position (proofs.claims.invariance), none at p = 0
        example.update(p=0.0, seed=draw(seeds()))
    if record.quantized:  # a format and a scale the kernel declares: dynamic per row first (the row's own output,
        # reduced from its y), or static at amax / fmax
        declared = kernel.quantization
        example["quant_dtype"] = getattr(torch, draw(st.sampled_from(declared.formats)))
        scale = draw(st.sampled_from([kind for kind in ("dynamic", "static") if kind in declared.scales]))
        example["scale"] = None if scale == "dynamic" else static_scale(kernel, example["quant_dtype"],
                                                             reference_amax(kernel, example), 1.0)
    if record.differentiable:  # the upstream gradients of a kind with a backward
        example["dy"] = rounded(values(), norms.output_dtype(kernel, x, example["weight"]), caps.device
                                ).reshape(x.shape)
        if record.has_residual:
            example["dh"] = rounded(values(), norms.residual_dtype(kernel, example["residual"], x), caps.device)
    if window:
        k = draw(st.sampled_from([size for size in sizes if 4 * size <= n] or [1]),
                 label="rows called again on their own")
        example["window"] = (n - k - draw(st.integers(0, n - k), label="window offset from the end"), k)
    return example
