"""More rows than a CUDA grid dimension holds (65 535): a kernel launching one program per row along grid axis
1 or 2, or indexing rows with a 16-bit counter, is wrong beyond it. Checked once per run, forward (ln.forward /
rms.forward) and backward (ln.jacobian / rms.jacobian: dgamma and dbeta sum over every row), at a small width; the
same for the fused kinds (add_ln / add_rms: x and the residual) and GroupNorm (gn: 65 539 samples of one group).

Where the kernel runs on a CUDA GPU, one call also has rows x d beyond 2^31 elements (HUGE_ROWS x HUGE_WIDTH): a
kernel computing element offsets row * stride in 32-bit integers overflows there (torch's own CUDA LayerNorm had
that bug at M*C >= 2^32). Its rows repeat a seeded block of PERIOD rows, PERIOD odd, so a row read from an offset
wrapped by any power of two is another row's values; the rows around the 2^31 boundary and the last ones are
compared with the oracle. Elsewhere (the CPU, Triton's interpreter: minutes) it is skipped with that reason, and
on a GPU without the free memory (3 copies) with the amount.

A kernel too slow for that many rows here (Triton's CPU interpreter runs its programs one by one) is skipped
with the measured reason: its time per row (from calls on growing numbers of rows, ``too_slow_reason``), scaled to
``ROWS``, above ``BUDGET_S``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import torch

from core import guard
from core.boundary import HOST, host_generator
from core.capabilities import PROBED_DTYPES, discover, dtype_name, judged_dtype, mix_name
from core.errors import one_line
from properties import evidence, norms, outcome
from properties.bounds import dropout_statistics, models
from properties.checks import batchnorm, dropout_add, fused, groupnorm, quantized
from properties.checks.forward import check_forward
from properties.checks.gradients import check_vjp
from properties.draws.dropout_strategies import nonzero_values
from properties.draws.strategies import rounded, standard_values, storage_backward_width

ROWS = 65_539  # beyond 65 535, and 3 rows past every power of two from 4 on: a last block of rows that is partial
WIDTH = 8
PROBE_ROWS = 8
BUDGET_S = 20.0  # a kernel slower than this here (interpreted, one program per row) is checked where it runs natively
GROWTH = 8  # the probes' rows grow this much at a time
PAUSE_S = 0.05  # the longest a scheduler delays a call on a loaded machine (two tests and a corpus run on 2 cores)
HUGE_WIDTH = 4096
HUGE_ROWS = 2**31 // HUGE_WIDTH + 8  # rows x d > 2^31
PERIOD = 7
COPIES = 3  # x, the output and the kernel's own buffers, at most as large again


def checked_dtype(kernel) -> torch.dtype:
    """The dtype of the examples of scale: float32 where the kernel computes in it (or says nothing), else its first."""
    dtypes = discover(kernel).dtypes
    return torch.float32 if torch.float32 in dtypes or not dtypes else dtypes[0]


def seeded(shape: tuple[int, ...], seed: int, dtype: torch.dtype, device: str, offset: float = 0.0) -> torch.Tensor:
    """offset + standard normal values of ``shape`` from ``seed``, rounded to ``dtype`` on ``device``."""
    return rounded(offset + standard_values(shape, "normal", seed), dtype, device)


def many_rows_example(kernel, upstream: bool, rows: int = ROWS, width: int = WIDTH, dtype: torch.dtype | None = None,
                      groups: int = 1) -> dict:
    """``rows`` rows of ``width`` (seeded) in ``dtype`` (default float32, else the kernel's first dtype) for the
    kernel's kind (core.kinds: a residual for the fused kinds; for GroupNorm ``rows`` samples [2 groups, width /
    (2 groups)] in ``groups`` groups), a random weight (and bias), eps 1e-5; the upstream gradients with
    ``upstream``."""
    caps = discover(kernel)
    record = kernel.record
    dtype = dtype or checked_dtype(kernel)
    channels = 2 * groups
    shape, parameters = ((rows, channels, width // channels), channels) if record.grouped else ((rows, width), width)

    def values(shape: tuple[int, ...], seed: int, offset: float = 0.0) -> torch.Tensor:
        return seeded(shape, seed, dtype, caps.device, offset)

    example = {"x": values(shape, 65535), "weight": values((parameters,), 1, offset=1.0), "eps": 1e-5}
    if record.grouped:
        example["num_groups"] = groups
    if record.has_residual:
        example["residual"] = values(shape, 4)
    if record.has_bias:
        example["bias"] = values((parameters,), 2)
    if upstream:
        example["dy"] = _beyond_the_grid_weighted(values(shape, 3), dtype, caps.device)
        if record.has_residual:
            example["dh"] = _beyond_the_grid_weighted(values(shape, 5), dtype, caps.device)
    return example


GRID_ROWS = 65_535  # rows a CUDA grid's y or z dimension holds
BEYOND_THE_GRID_WEIGHT = 1000.0


def _beyond_the_grid_weighted(dy: torch.Tensor, dtype: torch.dtype, device: str) -> torch.Tensor:
    """``dy`` with its rows (samples) from GRID_ROWS on scaled by BEYOND_THE_GRID_WEIGHT: their terms of dweight and
    dbias then outweigh the bound of the sum over all the rows (which grows with their count), so a kernel that
    leaves those rows out of the parameter gradients (a grid that stops at 65 535) fails by a wide margin."""
    if dy.shape[0] <= GRID_ROWS:
        return dy
    scaled = dy.double()
    scaled[GRID_ROWS:] *= BEYOND_THE_GRID_WEIGHT
    return rounded(scaled, dtype, device)


def too_slow_reason(name: str, took: Callable[[int], float], rows_wanted: int = ROWS,
                    budget: float = BUDGET_S) -> str | None:
    """None when ``rows_wanted`` rows (ROWS) fit in ``budget`` seconds (BUDGET_S), else the measured reason;
    ``took(rows)`` times one call on that many rows. Each decision holds though any call be delayed by up to PAUSE_S
    (a scheduler's pause on a loaded machine).

    A call on PROBE_ROWS rows whose time, scaled to the rows wanted, fits is enough (its fixed cost counted per row
    overestimates). Otherwise the rows grow GROWTH-fold: a larger call whose time scaled fits is enough; else the
    two calls' difference over the rows between is the time per row (a call's fixed cost cancels), the estimate is
    the smaller call's time plus the other rows', and a pause of PAUSE_S in either call moves it by
    PAUSE_S (wanted - rows) / (more - rows). The rows grow until the estimate is that far from the budget, or they
    reach the rows wanted (the call itself is then the measure)."""
    rows, seconds = PROBE_ROWS, took(PROBE_ROWS)
    while seconds * rows_wanted / rows > budget:
        more = min(rows * GROWTH, rows_wanted)
        seconds_more = took(more)
        if seconds_more * rows_wanted / more <= budget:
            return None
        estimate = seconds + (seconds_more - seconds) / (more - rows) * (rows_wanted - rows)
        uncertainty = PAUSE_S * (rows_wanted - rows) / (more - rows)
        if estimate - uncertainty > budget or more == rows_wanted:
            return (f"{name}: {rows} rows took {seconds:.2f} s, {more} rows {seconds_more:.2f} s, so {rows_wanted} "
                    f"rows would take ~{estimate:.0f} s (> {budget:.0f} s; an interpreted kernel?): checked where it "
                    "runs natively")
        if estimate + uncertainty <= budget:
            return None
        rows, seconds = more, seconds_more
    return None


_too_slow: dict[tuple, str | None] = {}  # (kernel, upstream, x's shape, budget) -> too_slow_reason, in any dtype


def skip_when_too_slow(kernel, example: dict, upstream: bool, budget: float = BUDGET_S) -> None:
    """Skip, with the measured times (too_slow_reason), when the example's rows would take more than ``budget``
    seconds; one call on one row first (compilation, caches). Measured once per kernel, direction and shape: the
    same rows in another dtype take about as long."""
    key = (kernel.name, upstream, tuple(example["x"].shape), budget)
    if key not in _too_slow:
        _too_slow[key] = _measured_too_slow_reason(kernel, example, upstream, budget)
    if _too_slow[key]:
        pytest.skip(_too_slow[key])


def _measured_too_slow_reason(kernel, example: dict, upstream: bool, budget: float) -> str | None:
    least = 2 if kernel.record.batch_statistics and example.get("training") else 1  # BatchNorm trains on 2 samples

    def took(rows: int) -> float:
        rows = max(rows, least)
        probe = {name: (t[:rows] if name in ("x", "residual", "dy", "dh") else t) for name, t in example.items()}
        start = time.perf_counter()
        if upstream:
            norms.gradients(kernel, probe, {"y": probe["dy"], "residual_out": probe.get("dh")}, allow_nonfinite=True)
        else:
            norms.call(kernel, probe, allow_nonfinite=True)
        return time.perf_counter() - start

    took(1)
    return too_slow_reason(kernel.name, took, example["x"].shape[0], budget)


@pytest.mark.claim("ln.forward", "rms.forward")
def test_forward_beyond_65535_rows(norm_kernel):
    example = many_rows_example(norm_kernel, upstream=False)
    skip_when_too_slow(norm_kernel, example, upstream=False)
    evidence.check(check_forward, norm_kernel, example)


@pytest.mark.claim("ln.forward", "rms.forward")
@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=dtype_name)
def test_forward_beyond_65535_rows_in_16_bits(norm_kernel, dtype):
    """16-bit x, weight and bias (inference in half precision): a kernel's all-16-bit path of its own (apex#411: rows
    past grid y in the half path only)."""
    if dtype not in discover(norm_kernel).dtypes:
        pytest.skip(f"{norm_kernel.name} does not compute in {dtype_name(dtype)}")
    example = many_rows_example(norm_kernel, upstream=False, dtype=dtype)
    skip_when_too_slow(norm_kernel, example, upstream=False)
    evidence.check(check_forward, norm_kernel, example)


@pytest.mark.claim("add_ln.forward", "add_rms.forward")
@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=dtype_name)
def test_fused_forward_beyond_65535_rows_in_16_bits(add_norm_kernel, dtype):
    """16-bit x, residual, weight and bias (a serving stack's prefill): as above, for the fused kinds."""
    if dtype not in discover(add_norm_kernel).dtypes:
        pytest.skip(f"{add_norm_kernel.name} does not compute in {dtype_name(dtype)}")
    example = many_rows_example(add_norm_kernel, upstream=False, dtype=dtype)
    skip_when_too_slow(add_norm_kernel, example, upstream=False)
    evidence.check(fused.check_forward, add_norm_kernel, example)


@pytest.mark.claim("ln.jacobian", "rms.jacobian")
def test_gradients_beyond_65535_rows(norm_kernel):
    norms.require_backward(norm_kernel)
    example = many_rows_example(norm_kernel, upstream=True)
    skip_when_too_slow(norm_kernel, example, upstream=True)
    evidence.check(check_vjp, norm_kernel, example)


SIXTEEN_BIT = (torch.float16, torch.bfloat16)


@pytest.mark.claim("ln.jacobian", "rms.jacobian")
@pytest.mark.parametrize("dtype", SIXTEEN_BIT, ids=dtype_name)
def test_gradients_beyond_65535_rows_with_float32_parameters(norm_kernel, dtype):
    """16-bit x, float32 weight and bias (mixed-precision training): a kernel that, from some batch size on (Liger's
    block kernel for many rows of small d, linkedin/Liger-Kernel#950), sums dweight over blocks of rows in x's dtype
    rounds once per block, which only float32 parameters beside 16-bit x expose (their bound is float32's)."""
    norms.require_backward(norm_kernel)
    if storage_backward_width(norm_kernel, dtype) is not None:
        pytest.skip(f"{norm_kernel.name} declares a {dtype_name(dtype)} storage-precision backward: its parameter "
                    f"gradients, sums over {ROWS} rows in {dtype_name(dtype)}, have no finite bound")
    if (dtype, torch.float32) not in discover(norm_kernel).mixes:
        reason = discover(norm_kernel).not_tested.get(mix_name(dtype, torch.float32), "not among its mixes")
        pytest.skip(f"{norm_kernel.name} not checked with {mix_name(dtype, torch.float32)}: {reason}")
    example = many_rows_example(norm_kernel, upstream=True, dtype=dtype)
    example.update({name: example[name].float() for name in ("weight", "bias") if example.get(name) is not None})
    skip_when_too_slow(norm_kernel, example, upstream=True)
    evidence.check(check_vjp, norm_kernel, example)


@pytest.mark.claim("add_ln.forward", "add_rms.forward")
def test_fused_forward_beyond_65535_rows(add_norm_kernel):
    example = many_rows_example(add_norm_kernel, upstream=False)
    skip_when_too_slow(add_norm_kernel, example, upstream=False)
    evidence.check(fused.check_forward, add_norm_kernel, example)


@pytest.mark.claim("add_ln.jacobian", "add_rms.jacobian")
def test_fused_gradients_beyond_65535_rows(add_norm_kernel):
    norms.require_backward(add_norm_kernel)
    example = many_rows_example(add_norm_kernel, upstream=True)
    skip_when_too_slow(add_norm_kernel, example, upstream=True)
    evidence.check(fused.check_vjp, add_norm_kernel, example)


# LayerNorm over (C, *) of 65 539 samples [2, 3], and InstanceNorm of 32 770 samples of 2 channels (65 540 instances n C
# + c, the index of torch's instance_norm as a batch_norm over N C channels): samples or instances on a grid's y axis
# stop at 65 535
SAMPLE_SHAPE, INSTANCE_SAMPLES = (2, 3), 32_770


def channel_layernorm_example(kernel, upstream: bool) -> dict:
    """ROWS samples of SAMPLE_SHAPE (seeded, in float32 or the kernel's first dtype), weight and bias of that shape;
    dy with ``upstream`` (its samples from 65 535 on weighted as _beyond_the_grid_weighted's)."""
    dtype, device, shape = checked_dtype(kernel), discover(kernel).device, (ROWS, *SAMPLE_SHAPE)
    example = {"x": seeded(shape, 65535, dtype, device), "num_groups": 1, "eps": 1e-5,
               "weight": seeded(SAMPLE_SHAPE, 1, dtype, device, offset=1.0),
               "bias": seeded(SAMPLE_SHAPE, 2, dtype, device)}
    if upstream:
        example["dy"] = _beyond_the_grid_weighted(seeded(shape, 3, dtype, device), dtype, device)
    return example


@pytest.mark.claim("cln.forward")
def test_channel_layernorm_forward_beyond_65535_samples(channel_layernorm_kernel):
    example = channel_layernorm_example(channel_layernorm_kernel, upstream=False)
    skip_when_too_slow(channel_layernorm_kernel, example, upstream=False)
    evidence.check(groupnorm.check_forward, channel_layernorm_kernel, example)


@pytest.mark.claim("cln.jacobian")
def test_channel_layernorm_gradients_beyond_65535_samples(channel_layernorm_kernel):
    norms.require_backward(channel_layernorm_kernel)
    example = channel_layernorm_example(channel_layernorm_kernel, upstream=True)
    skip_when_too_slow(channel_layernorm_kernel, example, upstream=True)
    evidence.check(groupnorm.check_vjp, channel_layernorm_kernel, example)


def running_norm_example(kernel, shape: tuple[int, ...], training: bool) -> dict:
    """x of ``shape`` (seeded, in float32 or the kernel's first dtype), running buffers, weight and bias per channel,
    in ``training`` mode or eval."""
    dtype, device = checked_dtype(kernel), discover(kernel).device
    channels = shape[1:2]
    example = {"x": seeded(shape, 65535, dtype, device), "running_mean": seeded(channels, 5, dtype, device),
               "running_var": rounded(1.0 + torch.rand(channels, generator=host_generator(6), dtype=torch.float64,
                                                       device=HOST), dtype, device),
               "weight": seeded(channels, 1, dtype, device, offset=1.0), "bias": seeded(channels, 2, dtype, device),
               "training": training, "momentum": 0.1, "eps": 1e-5}
    skip_when_too_slow(kernel, example, upstream=False)
    return example


@pytest.mark.claim("in.forward")
def test_instancenorm_beyond_65535_instances(instancenorm_kernel):
    """Training mode: each instance's own statistics."""
    example = running_norm_example(instancenorm_kernel, (INSTANCE_SAMPLES, *SAMPLE_SHAPE), True)
    evidence.check(batchnorm.check_forward, instancenorm_kernel, example)


@pytest.mark.claim("in.eval")
def test_instancenorm_eval_beyond_65535_instances(instancenorm_kernel):
    """Eval mode: the running statistics per channel, in every instance."""
    example = running_norm_example(instancenorm_kernel, (INSTANCE_SAMPLES, *SAMPLE_SHAPE), False)
    evidence.check(batchnorm.check_eval, instancenorm_kernel, example)


# BatchNorm of 65 539 channels of two samples: channels on a grid's y axis stop at 65 535 (LBANN/lbann#1610: the
# channels past it left unnormalized), training (y and the running statistics) and eval
BATCHNORM_CHANNELS_SHAPE = (2, ROWS)


@pytest.mark.claim("bn.forward")
def test_batchnorm_beyond_65535_channels(batchnorm_kernel):
    example = running_norm_example(batchnorm_kernel, BATCHNORM_CHANNELS_SHAPE, True)
    evidence.check(batchnorm.check_forward, batchnorm_kernel, example)


@pytest.mark.claim("bn.running_statistics")
def test_batchnorm_running_statistics_beyond_65535_channels(batchnorm_kernel):
    example = running_norm_example(batchnorm_kernel, BATCHNORM_CHANNELS_SHAPE, True)
    evidence.check(batchnorm.check_running_statistics, batchnorm_kernel, example)


@pytest.mark.claim("bn.eval")
def test_batchnorm_eval_beyond_65535_channels(batchnorm_kernel):
    example = running_norm_example(batchnorm_kernel, BATCHNORM_CHANNELS_SHAPE, False)
    evidence.check(batchnorm.check_eval, batchnorm_kernel, example)


# BatchNorm of 131 075 samples of 2 channels: a path that splits a batch past 65 535 samples into chunks and merges
# their statistics (pytorch/pytorch#2917, Paddle#43072) or updates the running buffers once per chunk
BATCHNORM_SAMPLES_SHAPE = (2 * ROWS - 3, 2)


@pytest.mark.claim("bn.forward")
def test_batchnorm_beyond_65535_samples(batchnorm_kernel):
    example = running_norm_example(batchnorm_kernel, BATCHNORM_SAMPLES_SHAPE, True)
    evidence.check(batchnorm.check_forward, batchnorm_kernel, example)


@pytest.mark.claim("bn.running_statistics")
def test_batchnorm_running_statistics_beyond_65535_samples(batchnorm_kernel):
    example = running_norm_example(batchnorm_kernel, BATCHNORM_SAMPLES_SHAPE, True)
    evidence.check(batchnorm.check_running_statistics, batchnorm_kernel, example)


# The quantized kinds' 65 539 tokens of 16 (a per-token kernel whose grid's y axis holds the tokens stops at 65 535:
# vllm-project/vllm#52381, TensorRT-LLM#16847), each declared scale kind, q and (dynamic) the scales
QUANT_WIDTH = 16


@pytest.mark.claim("ln_quant.values", "rms_quant.values", "add_rms_quant.values")
@pytest.mark.parametrize("scale_kind", ("static", "dynamic"))
def test_quantized_beyond_65535_tokens(quant_norm_kernel, scale_kind):
    if scale_kind not in quant_norm_kernel.quantization.scales:
        pytest.skip(f"{quant_norm_kernel.name} declares no {scale_kind} scale")
    example = many_rows_example(quant_norm_kernel, upstream=False, width=QUANT_WIDTH)
    device = discover(quant_norm_kernel).device
    scale = torch.full((1,), 0.05, dtype=torch.float32, device=device) if scale_kind == "static" else None
    example.update(scale=scale, quant_dtype=judged_dtype(quant_norm_kernel))
    skip_when_too_slow(quant_norm_kernel, example, upstream=False)
    evidence.check(quantized.check_values, quant_norm_kernel, example)


# Dropout + add + LayerNorm's masks of 131 072 rows of 2: rows r and r + 65 536 compared (a row index kept in 16 bits
# repeats the first rows' masks there), at 0.2 of drop_add_ln.independence's false-alarm budget
MASKED_ROWS, MASKED_WIDTH, MASKED_SHARE = 2 * 65_536, 2, 0.2


@pytest.mark.claim("drop_add_ln.independence")
def test_dropout_add_masks_of_rows_beyond_65535(dropout_add_kernel):
    dtype, device = checked_dtype(dropout_add_kernel), discover(dropout_add_kernel).device
    x = nonzero_values((MASKED_ROWS, MASKED_WIDTH), 65535, 0.0, 1.0)
    fraction = torch.rand(x.shape, generator=host_generator(4), dtype=torch.float64, device=HOST) * 2 - 1
    example = {"x": rounded(x, dtype, device), "residual": rounded(x * fraction, dtype, device),
               "weight": None, "bias": None, "eps": 1e-5, "p": 0.5, "seed": 12345}  # |residual| <= |x|: exact mask
    skip_when_too_slow(dropout_add_kernel, example, upstream=False)
    alpha = dropout_statistics.per_example("drop_add_ln.independence", 1, MASKED_SHARE)
    evidence.check(dropout_add.check_independence, dropout_add_kernel, {**example, "alpha": alpha})


@pytest.mark.claim("gn.forward")
def test_groupnorm_forward_beyond_65535_samples(groupnorm_kernel):
    example = many_rows_example(groupnorm_kernel, upstream=False)
    skip_when_too_slow(groupnorm_kernel, example, upstream=False)
    evidence.check(groupnorm.check_forward, groupnorm_kernel, example)


@pytest.mark.claim("gn.jacobian")
def test_groupnorm_gradients_beyond_65535_samples(groupnorm_kernel):
    norms.require_backward(groupnorm_kernel)
    example = many_rows_example(groupnorm_kernel, upstream=True)
    skip_when_too_slow(groupnorm_kernel, example, upstream=True)
    evidence.check(groupnorm.check_vjp, groupnorm_kernel, example)


# A batch past the token counts at which inference stacks switch norm kernels (vLLM and SGLang choose one by
# num_tokens: 256, 1024, 4096 rows) and 3 rows past every power of two (a partial last block of rows, whatever the rows
# per program), in every dtype the kernel computes in, at a width where a 16-bit accumulation shows: a path only large
# batches take is checked against the oracle. (The batch-invariance claims call such batches too, but compare the
# kernel with itself, and fail only a kernel that declares the property.)
LARGE_BATCH = 4_099
LARGE_BATCH_WIDTH = 256
LARGE_BATCH_BUDGET_S = 2.0  # per call: an interpreted kernel (one program per row) is checked where it runs natively
each_dtype = pytest.mark.parametrize("dtype", PROBED_DTYPES, ids=dtype_name)
# GroupNorm's gradients in float32 only (a large-batch path's structure; a gradient test costs 3-5 forward tests
# here); the row kinds' in every dtype
float32_only = pytest.mark.parametrize("dtype", [torch.float32], ids=dtype_name)


def large_batch_example(kernel, dtype: torch.dtype, upstream: bool) -> dict:
    """LARGE_BATCH rows of LARGE_BATCH_WIDTH in ``dtype`` (GroupNorm: samples of 2 groups of 2 channels); skipped,
    with the reason, in a dtype the kernel does not compute in, where the rows would take too long here, and for the
    gradients of a kernel that declares a 16-bit storage-precision backward (its dweight, a sum over the rows in
    16 bits, has no finite bound over LARGE_BATCH rows: n u >= 1; its 16-bit large batch is checked forward, its
    gradients in float32)."""
    if dtype not in discover(kernel).dtypes:
        reason = discover(kernel).not_tested.get(dtype_name(dtype), "not among its dtypes")
        pytest.skip(f"{kernel.name} does not compute in {dtype_name(dtype)}: {reason}")
    if upstream and storage_backward_width(kernel, dtype) is not None:
        pytest.skip(f"{kernel.name} declares a {dtype_name(dtype)} storage-precision backward: its parameter "
                    f"gradients, sums over {LARGE_BATCH} rows in {dtype_name(dtype)}, have no finite bound")
    example = many_rows_example(kernel, upstream, LARGE_BATCH, LARGE_BATCH_WIDTH, dtype, groups=2)
    skip_when_too_slow(kernel, example, upstream, LARGE_BATCH_BUDGET_S)
    return example


@pytest.mark.claim("ln.forward", "rms.forward")
@each_dtype
def test_forward_of_a_large_batch(norm_kernel, dtype):
    evidence.check(check_forward, norm_kernel, large_batch_example(norm_kernel, dtype, upstream=False))


@pytest.mark.claim("ln.jacobian", "rms.jacobian")
@each_dtype
def test_gradients_of_a_large_batch(norm_kernel, dtype):
    """In every dtype: a kernel that sums dweight/dbias over blocks of rows into a buffer of their 16-bit dtype (an
    atomic add on a half buffer) beyond some batch size rounds once per block."""
    norms.require_backward(norm_kernel)
    evidence.check(check_vjp, norm_kernel, large_batch_example(norm_kernel, dtype, upstream=True))


@pytest.mark.claim("add_ln.forward", "add_rms.forward")
@each_dtype
def test_fused_forward_of_a_large_batch(add_norm_kernel, dtype):
    evidence.check(fused.check_forward, add_norm_kernel, large_batch_example(add_norm_kernel, dtype, upstream=False))


@pytest.mark.claim("add_ln.jacobian", "add_rms.jacobian")
@each_dtype
def test_fused_gradients_of_a_large_batch(add_norm_kernel, dtype):
    """In every dtype, as the plain norms' (dweight partial sums of blocks of rows stored in 16 bits)."""
    norms.require_backward(add_norm_kernel)
    evidence.check(fused.check_vjp, add_norm_kernel, large_batch_example(add_norm_kernel, dtype, upstream=True))


@pytest.mark.claim("gn.forward")
@each_dtype
def test_groupnorm_forward_of_a_large_batch(groupnorm_kernel, dtype):
    evidence.check(groupnorm.check_forward, groupnorm_kernel,
                   large_batch_example(groupnorm_kernel, dtype, upstream=False))


@pytest.mark.claim("gn.jacobian")
@float32_only
def test_groupnorm_gradients_of_a_large_batch(groupnorm_kernel, dtype):
    norms.require_backward(groupnorm_kernel)
    evidence.check(groupnorm.check_vjp, groupnorm_kernel, large_batch_example(groupnorm_kernel, dtype, upstream=True))


def huge_example(kernel) -> dict:
    """A seeded ``block`` of PERIOD x HUGE_WIDTH in a 16-bit dtype of the kernel where it has one (half the memory),
    repeated to HUGE_ROWS rows by the check (the example, and a counterexample, stay small); a random weight (and
    bias), eps 1e-5. Skips off a CUDA GPU and where the GPU has not COPIES times x's size free."""
    caps = discover(kernel)
    if not caps.device.startswith("cuda"):
        pytest.skip(f"rows x d >= 2^31 is drawn only where the kernel runs on a CUDA GPU (it runs on {caps.device})")
    dtype = next((t for t in (torch.float16, torch.bfloat16) if t in caps.dtypes), torch.float32)
    needed = COPIES * HUGE_ROWS * HUGE_WIDTH * torch.finfo(dtype).bits // 8
    free, _ = torch.cuda.mem_get_info(torch.device(caps.device))
    if free < needed:
        pytest.skip(f"rows x d >= 2^31 in {dtype_name(dtype)} needs {needed / 2**30:.1f} GiB free on the GPU, "
                    f"{free / 2**30:.1f} GiB are")
    example = {"block": rounded(standard_values((PERIOD, HUGE_WIDTH), "normal", 31), dtype, caps.device),
               "weight": rounded(1.0 + standard_values((HUGE_WIDTH,), "normal", 1), dtype, caps.device), "eps": 1e-5}
    if kernel.record.has_bias:
        example["bias"] = rounded(standard_values((HUGE_WIDTH,), "normal", 2), dtype, caps.device)
    return example


def check_rows_beyond_2_31_elements(kernel, block: torch.Tensor, weight, eps: float, bias=None,
                                    rows: int = HUGE_ROWS, elements: int = 2**31) -> None:
    """x = ``block`` repeated to ``rows`` rows: |kernel(x) - oracle(x)| <= forward bound on the rows around element
    ``elements`` (2^31) and the last one (one call on all of x); oracle and bound those of the kernel's declared
    conventions, as ln.forward's other checks use (models.expected_forward)."""
    x = block.repeat(rows // block.shape[0] + 1, 1)[:rows]
    boundary = elements // x.shape[-1]
    checked = torch.tensor([0, boundary - 1, boundary, boundary + 1, rows - 1], device=x.device)
    got = norms.forward(kernel, x, weight, bias, eps)[checked]
    expected, bound, _ = models.expected_forward(kernel, x[checked], weight, bias, eps)  # its declared conventions
    comparison = outcome.compare(got, expected, bound, "output")
    outcome.conclude(comparison, "rows beyond 2^31 elements are not normalized (32-bit offsets?)",
                     d=x.shape[-1], dtype=dtype_name(x.dtype), rows=x.shape[0])


@pytest.mark.claim("ln.forward", "rms.forward")
def test_forward_beyond_2_31_elements(norm_kernel):
    try:
        evidence.check(check_rows_beyond_2_31_elements, norm_kernel, huge_example(norm_kernel))
    except (torch.cuda.OutOfMemoryError, guard.KernelFault) as error:
        skip_when_out_of_memory(error)
        raise


def skip_when_out_of_memory(error: BaseException) -> None:
    """Skip, with the reason, when the GPU ran out of memory (other runs share it, or the kernel works in a wider
    dtype than x): the size could not be checked here, which is not the kernel's fault; re-raise anything else."""
    cause = error if isinstance(error, torch.cuda.OutOfMemoryError) else error.__cause__
    if isinstance(cause, torch.cuda.OutOfMemoryError):
        pytest.skip(f"rows x d >= 2^31: the GPU ran out of memory ({one_line(cause)})")
