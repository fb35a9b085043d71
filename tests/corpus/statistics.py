"""Broken LayerNorm/RMSNorm kernels whose bug is in the row statistics (the mean and the scale rstd).

Every kernel here is :func:`_normalize`, a plain autograd implementation that casts x to float32 once,
computes in float32 and casts back to the input dtype,

    y = (x - mean) * rstd * weight + bias,

with one statistics rule ``(x in float32, eps, storage dtype) -> (mean, rstd)`` replaced by a bug. (Casting
once matters: with two ``x.float()`` nodes, autograd rounds each partial gradient to the storage dtype
before adding them, and dx, a difference of nearly equal terms, loses all accuracy in bfloat16.) The correct rules are
:func:`_layernorm_statistics` (mean, 1/sqrt(sigma^2 + eps), population variance, eps inside the root)
and :func:`_rmsnorm_statistics` (0, 1/sqrt(mean(x^2) + eps)); ``LN_TEXTBOOK`` and ``RMS_TEXTBOOK`` use
those: they are the textbook autograd-only implementations and the controls showing that the skeleton
itself is right. Each bug rule's docstring says the bug
and the claim ids that must catch it (the manifest, ``tests/corpus/__init__.py``, lists the same ids).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from core.registry import Kernel

SPEC = "tests/corpus/statistics.py:"
# the dtypes the float32 implementations of these files declare: they compute in float32, so float64 x (which they
# would normalize in float32 and return in float64) is not among them (ln.forward's float64 test skips them)
FLOAT32_ARITHMETIC = (torch.float32, torch.float16, torch.bfloat16)

Moments = tuple[torch.Tensor, torch.Tensor]  # (mean, rstd), float32, broadcastable against x
Statistics = Callable[[torch.Tensor, float, torch.dtype], Moments]


def _normalize(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
               statistics: Statistics) -> torch.Tensor:
    """(x - mean) * rstd * weight + bias in float32, cast back to x.dtype; (mean, rstd) = statistics(x, eps, dtype)."""
    return _normalized_with_statistics(x, weight, bias, eps, statistics)[0]


def _normalized_with_statistics(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
                                statistics: Statistics) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(:func:`_normalize`'s y, mean, rstd)."""
    x32 = x.float()
    mean, rstd = statistics(x32, eps, x.dtype)
    y = (x32 - mean) * rstd
    if weight is not None:
        y = y * weight.float()
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype), mean, rstd


def float32_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
                 centred: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, mean, rstd) of the correct float32 LayerNorm (``centred``) or RMSNorm (mean 0) of x's rows, y in x's
    dtype: the forward of the corpus's kernels whose backward is an autograd Function of their own."""
    return _normalized_with_statistics(x, weight, bias, eps,
                                       _layernorm_statistics if centred else _rmsnorm_statistics)


def _layernorm_statistics(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """Correct LayerNorm statistics: two-pass mean and population variance in float32, eps inside the root."""
    mean = x.mean(-1, keepdim=True)
    variance = (x - mean).square().mean(-1, keepdim=True)
    return mean, torch.rsqrt(variance + eps)


def _rmsnorm_statistics(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """Correct RMSNorm statistics: no centring, mean of squares in float32, eps inside the root."""
    return torch.zeros_like(x[..., :1]), torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)


# --- LayerNorm statistics bugs ----------------------------------------------------------------------------------


def _one_pass_variance(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """One-pass variance E[x^2] - E[x]^2 in float32 (clamped at 0, as such kernels do): it cancels
    catastrophically, relative error ~ u (|mean|/std)^2. Must fail ln.forward and ln.special_inputs
    (|mean|/std up to 1e4 in fp32), by a wide margin."""
    mean = x.mean(-1, keepdim=True)
    variance = (x.square().mean(-1, keepdim=True) - mean.square()).clamp_min(0.0)
    return mean, torch.rsqrt(variance + eps)


def _eps_outside_root(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """eps outside the square root: rstd = 1/(sigma + eps) instead of 1/sqrt(sigma^2 + eps); wrong by a
    factor ~ 1/sqrt(eps) at sigma -> 0. Must fail ln.forward, ln.variance_insensitivity, ln.spectral_norm."""
    mean = x.mean(-1, keepdim=True)
    variance = (x - mean).square().mean(-1, keepdim=True)
    return mean, 1.0 / (variance.sqrt() + eps)


def _unbiased_variance(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """Unbiased variance (divides by d - 1, torch.var's default) instead of the population variance: output
    scaled by sqrt((d-1)/d), NaN at d = 1. Must fail ln.forward, ln.special_inputs (d = 1, 2, 3) and ln.seed_example."""
    mean = x.mean(-1, keepdim=True)
    variance = (x - mean).square().sum(-1, keepdim=True) / (x.shape[-1] - 1)
    return mean, torch.rsqrt(variance + eps)


def _no_eps(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """No eps at all: rstd = 1/sigma, NaN (0 * inf) on constant rows, unbounded Jacobian as sigma -> 0.
    Must fail ln.forward (eps = 1e-2), ln.special_inputs (constant rows), ln.spectral_norm."""
    mean = x.mean(-1, keepdim=True)
    variance = (x - mean).square().mean(-1, keepdim=True)
    return mean, torch.rsqrt(variance)


def _max_variance_eps(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """max(sigma^2, eps) instead of sigma^2 + eps: right only where one term dwarfs the other; Var(xhat) = 1
    for sigma^2 > eps. Must fail ln.forward (eps = 1e-2) and ln.variance_insensitivity."""
    mean = x.mean(-1, keepdim=True)
    variance = (x - mean).square().mean(-1, keepdim=True)
    return mean, torch.rsqrt(variance.clamp_min(eps))


def _eps_ignored(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """The eps argument is ignored (1e-5 hard-coded). Must fail ln.forward (eps = 1e-2, 1e-12) and ln.affine
    (LN_eps(a x + b) = sign(a) LN_{eps/a^2}(x) needs the kernel to honour eps/a^2)."""
    return _layernorm_statistics(x, 1e-5, storage)


def _eps_unusual_constant(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """The eps argument is ignored for a constant no library default holds (3e-4): the diagnosis must fit it, not
    pick it from a list (issue 28). Must fail ln.forward (eps = 1e-2, 1e-12) and ln.affine."""
    return _layernorm_statistics(x, 3e-4, storage)


ACCUMULATOR_LANES = 64


def _sum_accumulated_in_storage_dtype(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Row sums of t as a Triton kernel with an accumulator of ``dtype`` computes them: 64 lanes, each adding
    its strided column chunk in turn (rounded to dtype after every addition), then the lanes added in turn."""
    d = t.shape[-1]
    chunks = F.pad(t, (0, -d % ACCUMULATOR_LANES)).unflatten(-1, (-1, ACCUMULATOR_LANES))
    lanes = torch.zeros_like(chunks[..., 0, :], dtype=dtype)
    for chunk in chunks.unbind(-2):
        lanes = lanes + chunk.to(dtype)
    total = torch.zeros_like(lanes[..., :1])
    for lane in lanes.split(1, dim=-1):
        total = total + lane
    return total.float()


def _storage_dtype_accumulation(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """Sums accumulated in the storage dtype (an fp16 accumulator for fp16 inputs) instead of float32: the
    mean is off by ~ d u_fp16 |mean|, so the output by ~ d u_fp16 |mean|/std. Must fail ln.forward (fp16)
    by a wide margin."""
    d = x.shape[-1]
    mean = _sum_accumulated_in_storage_dtype(x, storage) / d
    variance = _sum_accumulated_in_storage_dtype((x - mean).square(), storage) / d
    return mean, torch.rsqrt(variance + eps)


def _one_pass_in_regime(storages: tuple[torch.dtype, ...], low: int, high: float, where: str) -> Statistics:
    """The one-pass variance of :func:`_one_pass_variance` only for rows stored in ``storages`` of width
    low <= d < high, the correct two-pass statistics elsewhere: caught only if the suite draws that regime."""

    def statistics(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
        rule = _one_pass_variance if storage in storages and low <= x.shape[-1] < high else _layernorm_statistics
        return rule(x, eps, storage)

    statistics.__doc__ = (f"One-pass variance E[x^2] - E[x]^2 (float32) only {where}, two-pass elsewhere: an error "
                          "~ u (|mean|/std)^2 relative to the variance, visible where |mean|/std is large in that "
                          "regime. Must fail ln.forward in the ci profile (the strategies draw it every run).")
    return statistics


STATISTICS_BLOCK = 256


def _block_partials_in_storage_dtype(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """Statistics accumulated in blocks of 256 columns (float32 inside a block) whose partial sums are stored in the
    storage dtype (a float16/bfloat16 scratch buffer) before they are added: the mean is off by ~ u_storage
    |mean| per block, the output by ~ u_storage |mean|/std. Must fail ln.forward (16-bit storage)."""
    d = x.shape[-1]

    def summed(t: torch.Tensor) -> torch.Tensor:
        return sum(block.sum(-1, keepdim=True).to(storage).float() for block in t.split(STATISTICS_BLOCK, -1))

    mean = summed(x) / d
    return mean, torch.rsqrt(summed((x - mean).square()) / d + eps)


def _whole_tensor_statistics(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """Mean and variance over the whole tensor instead of each row (a batch-norm-like reduction): right only
    for a single row. Must fail ln.row_independence and ln.special_inputs (a NaN row poisons every row)."""
    mean = x.mean()
    variance = (x - mean).square().mean()
    return mean, torch.rsqrt(variance + eps)


ROWS_PER_PROGRAM = 4


def _statistics_over_row_blocks(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """A kernel handling 4 rows per program reduces over the whole [4, d] block (axis=None instead of
    axis=1): rows of one block share their statistics. Must fail ln.row_independence."""
    rows = x.reshape(-1, x.shape[-1])
    block = torch.arange(rows.shape[0], device=x.device) // ROWS_PER_PROGRAM
    elements = torch.bincount(block).unsqueeze(-1) * rows.shape[-1]
    mean = rows.new_zeros(elements.shape).index_add(0, block, rows.sum(-1, keepdim=True)) / elements
    centred = rows - mean[block]
    variance = rows.new_zeros(elements.shape).index_add(0, block, centred.square().sum(-1, keepdim=True)) / elements
    shape = (*x.shape[:-1], 1)
    return mean[block].reshape(shape), torch.rsqrt(variance + eps)[block].reshape(shape)


def _statistics_of_a_second_cast(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """x cast to float32 at each use (``x.float()`` in the statistics and again in the normalization) instead of
    once: the forward is exact, but autograd rounds each partial gradient to the storage dtype before adding
    them, and dx, their nearly cancelling sum, loses its accuracy in bfloat16/float16. Must fail ln.jacobian."""
    return _layernorm_statistics(x.to(storage).float(), eps, storage)


# --- RMSNorm statistics bugs ------------------------------------------------------------------------------------


def _rms_centres(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """An RMSNorm that centres: subtracts the row mean and divides by the standard deviation (LayerNorm
    statistics). Must fail rms.forward."""
    return _layernorm_statistics(x, eps, storage)


def _rms_sum_of_squares(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """Sum instead of mean of squares: output too small by sqrt(d) (right only at d = 1). Must fail
    rms.forward and rms.spectral_norm."""
    return torch.zeros_like(x[..., :1]), torch.rsqrt(x.square().sum(-1, keepdim=True) + eps)


def _rms_eps_ignored(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """The eps argument is ignored (1e-6 hard-coded, Llama's default). Must fail rms.forward and rms.affine."""
    return _rmsnorm_statistics(x, 1e-6, storage)


def _rms_eps_unusual_constant(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """The eps argument is ignored for 2.5e-3, a constant no library default holds (issue 28). Must fail rms.forward
    and rms.affine."""
    return _rmsnorm_statistics(x, 2.5e-3, storage)


def _rms_no_eps(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """No eps: rstd = 1/rms(x), NaN (0 * inf) on zero rows. Must fail rms.forward (eps = 1e-2) and
    rms.special_inputs (zero rows)."""
    return torch.zeros_like(x[..., :1]), torch.rsqrt(x.square().mean(-1, keepdim=True))


def _rms_whole_tensor_statistics(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """Mean of squares over the whole tensor instead of each row. Must fail rms.row_independence and
    rms.special_inputs (a NaN row poisons every row)."""
    return torch.zeros(()), torch.rsqrt(x.square().mean() + eps)


# --- kernels ----------------------------------------------------------------------------------------------------


def _description(statistics: Statistics) -> str:
    return " ".join(statistics.__doc__.split())


def _layernorm(name: str, statistics: Statistics) -> Kernel:
    def layernorm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                  eps: float) -> torch.Tensor:
        return _normalize(x, weight, bias, eps, statistics)

    return Kernel(name, "layernorm", layernorm, spec=SPEC + name.upper(), description=_description(statistics),
                  dtypes=FLOAT32_ARITHMETIC)


def _rmsnorm(name: str, statistics: Statistics, weight_offset: float = 0.0) -> Kernel:
    def rmsnorm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
        return _normalize(x, weight, None, eps, statistics)

    return Kernel(name, "rmsnorm", rmsnorm, spec=SPEC + name.upper(), weight_offset=weight_offset,
                  description=_description(statistics), dtypes=FLOAT32_ARITHMETIC)


LN_TEXTBOOK = _layernorm("ln_textbook", _layernorm_statistics)
RMS_TEXTBOOK = _rmsnorm("rms_textbook", _rmsnorm_statistics)

LN_ONE_PASS_VARIANCE = _layernorm("ln_one_pass_variance", _one_pass_variance)
LN_EPS_OUTSIDE_ROOT = _layernorm("ln_eps_outside_root", _eps_outside_root)
LN_UNBIASED_VARIANCE = _layernorm("ln_unbiased_variance", _unbiased_variance)
LN_NO_EPS = _layernorm("ln_no_eps", _no_eps)
LN_MAX_VARIANCE_EPS = _layernorm("ln_max_variance_eps", _max_variance_eps)
LN_EPS_IGNORED = _layernorm("ln_eps_ignored", _eps_ignored)
LN_EPS_UNUSUAL_CONSTANT = _layernorm("ln_eps_unusual_constant", _eps_unusual_constant)
LN_STORAGE_DTYPE_ACCUMULATION = _layernorm("ln_storage_dtype_accumulation", _storage_dtype_accumulation)
LN_ONE_PASS_FP32_D1024 = _layernorm("ln_one_pass_fp32_d1024", _one_pass_in_regime(
    (torch.float32,), 1024, 4096, "for float32 rows of width 1024 <= d < 4096"))
LN_ONE_PASS_FP32_D4096 = _layernorm("ln_one_pass_fp32_d4096", _one_pass_in_regime(
    (torch.float32,), 4096, 8192, "for float32 rows of width 4096 <= d < 8192"))
LN_ONE_PASS_FP32_D8192 = _layernorm("ln_one_pass_fp32_d8192", _one_pass_in_regime(
    (torch.float32,), 8192, float("inf"), "for float32 rows of width d >= 8192"))
LN_ONE_PASS_FP16 = _layernorm("ln_one_pass_fp16", _one_pass_in_regime(
    (torch.float16,), 1, float("inf"), "for float16 rows (any width)"))
LN_ONE_PASS_BF16 = _layernorm("ln_one_pass_bf16", _one_pass_in_regime(
    (torch.bfloat16,), 1, float("inf"), "for bfloat16 rows (any width)"))
LN_BLOCK_PARTIALS_IN_STORAGE_DTYPE = _layernorm("ln_block_partials_in_storage_dtype", _block_partials_in_storage_dtype)
LN_WHOLE_TENSOR_STATISTICS = _layernorm("ln_whole_tensor_statistics", _whole_tensor_statistics)
LN_ROW_BLOCK_STATISTICS = _layernorm("ln_row_block_statistics", _statistics_over_row_blocks)
LN_CAST_AT_EACH_USE = _layernorm("ln_cast_at_each_use", _statistics_of_a_second_cast)

RMS_CENTRES = _rmsnorm("rms_centres", _rms_centres)
RMS_SUM_OF_SQUARES = _rmsnorm("rms_sum_of_squares", _rms_sum_of_squares)
RMS_EPS_IGNORED = _rmsnorm("rms_eps_ignored", _rms_eps_ignored)
RMS_EPS_UNUSUAL_CONSTANT = _rmsnorm("rms_eps_unusual_constant", _rms_eps_unusual_constant)
RMS_NO_EPS = _rmsnorm("rms_no_eps", _rms_no_eps)
RMS_WHOLE_TENSOR_STATISTICS = _rmsnorm("rms_whole_tensor_statistics", _rms_whole_tensor_statistics)


def _gemma_offset_in_weight_dtype(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """Gemma's scale 1 + w added in the weight's dtype before the float32 multiply (bfloat16 15.8125 + 1 is
    16.75): right for float32 weights, off by a 16-bit rounding of the scale for 16-bit ones (vllm-project/vllm#29810).
    Must fail rms.forward and rms.jacobian (autograd differentiates the rounded scale; most of all with a 16-bit
    weight beside float32 x)."""
    return RMS_TEXTBOOK.fn(x, None if weight is None else 1 + weight, eps)


RMS_GEMMA_OFFSET_IN_WEIGHT_DTYPE = Kernel(
    "rms_gemma_offset_in_weight_dtype", "rmsnorm", _gemma_offset_in_weight_dtype,
    spec=SPEC + "RMS_GEMMA_OFFSET_IN_WEIGHT_DTYPE", weight_offset=1.0,
    description=_description(_gemma_offset_in_weight_dtype), dtypes=FLOAT32_ARITHMETIC)

# Declares Gemma's convention (scale = 1 + weight) but scales by weight, as Llama does: a Gemma checkpoint's
# weights loaded into a Llama RMSNorm. The rule itself is the correct one; the bug is the convention.
RMS_GEMMA_OFFSET_MISSING = Kernel(
    "rms_gemma_offset_missing", "rmsnorm", RMS_TEXTBOOK.fn, spec=SPEC + "RMS_GEMMA_OFFSET_MISSING", weight_offset=1.0,
    description="Declared Gemma convention (scale 1 + w) but scales by w (Llama's RMSNorm on Gemma weights). "
                "Must fail rms.forward.")
