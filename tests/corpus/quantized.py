"""Broken quantized-output kernels (kinds layernorm_quant, rmsnorm_quant, add_rmsnorm_quant; issue 29): the torch
reference of core.adapters.quantized (LayerNorm or RMSNorm in float32, y rounded to x's dtype where declared
"storage", q = Q(y / s) clamped to the format's range) with exactly one of the reported bugs of fused quant
norms, for LayerNorm (LN_), RMSNorm (RMS_) and residual add + RMSNorm (ADD_RMS_); the manifest
(tests/corpus/__init__.py) lists the claims that must catch each.

    {LN,RMS,ADD_RMS}_QUANT_AMAX_UNROUNDED  declared "storage" (the rounded y is quantized), but amax, hence the dynamic
                                    scale, is taken of the float32 y (TransformerEngine PR 2355)       -> *.scales
    ADD_RMS_QUANT_TOKEN_SCALE_UNROUNDED  per-token scale from the unrounded norm, y = RMS(x + residual) before
                                    residual_out's rounding, while y of residual_out is quantized      -> *.scales
    {LN,RMS,ADD_RMS}_QUANT_FNUZ_FMAX       e4m3fn's dynamic scale from float8_e4m3fnuz's maximum 240 instead of 448
                                    (the ROCm format's constant on the OCP format)                    -> *.scales
    {LN,RMS,ADD_RMS}_QUANT_NO_SCALE_FLOOR  no floor on the dynamic scale: an all-zero row gets scale 0 and q = Q(0/0)
                                                                                                      -> *.scales
    {LN,RMS,ADD_RMS}_QUANT_PAIR_AMAX_FROM_8_TOKENS  8 tokens or more (two a warp): each dynamic scale from the larger
                                    amax of its pair of tokens                                        -> *.scales
    {LN,RMS,ADD_RMS}_QUANT_AMAX_OF_THE_FIRST_1024  rows wider than 1024: the amax of the first 1024 columns only
                                                                                                      -> *.scales
    {LN,RMS,ADD_RMS}_QUANT_SCALE_INVERTED  a static scale multiplied, not divided by (the scale and its inverse
                                    confused)                                            -> *.values, *.dequantized
    {LN,RMS,ADD_RMS}_QUANT_TIES_AWAY       exact ties rounded away from zero where ties to even is declared: INT8 as
                                    floor(|v| + 1/2) (tenstorrent/tt-metal#56525), FP8 by a software downcast
                                    (triton-lang/triton#11897's interpreter)                          -> *.values
    {LN,RMS,ADD_RMS}_QUANT_EMPTY_BATCH_RAISES  a dynamic scale's all-zero guard by a whole-tensor max, which raises on
                                    an empty batch (a mixture-of-experts expert given no token, pytorch/FBGEMM#3448)
                                                                                                      -> *.values
    {LN,RMS,ADD_RMS}_QUANT_STALE_SCALE     1 / a static scale cached by the tensor's address: a scale updated in place
                                    (a delayed-scaling recipe's) keeps its old reciprocal             -> *.values
    {LN,RMS,ADD_RMS}_QUANT_NO_SATURATION   no clamp to the format's range: e5m2 overflows to inf, int8 wraps around
                                    (CPU e4m3fn conversion happens to saturate)                    -> *.saturation
    {LN,RMS,ADD_RMS}_QUANT_Y_WRITTEN_INTO_X  the normalized y also written into x's buffer (vLLM's in-place rms_norm
                                    and fused_add_rms_norm semantics behind a functional signature)
                                                                                    -> *.inputs_unmodified
    ADD_RMS_QUANT_RESIDUAL_OUT_ROUNDED  declares a float32 residual_out but rounds it to the residual's dtype
                                                                                      -> add_rms_quant.residual_out
    {RMS,ADD_RMS}_QUANT_STRIDES_IGNORED  row t of x (and the residual) read at t * d from the view's first element,
                                    columns at stride 1 (vllm-project/vllm-xpu-kernels#397, ModelTC/LightLLM#1467,
                                    vllm-project/vllm#28103): a strided, transposed or offset view reads other
                                    values             -> *.values, *.scales (add + RMSNorm: its residual_out)
    {RMS,ADD_RMS}_QUANT_NAN_HIDDEN  the clamp written fmaxf(-fmax, fminf(v, fmax)) and the amax reduced with
                                    fmaxf, both dropping NaN (vLLM's scaled_fp8_conversion, FlashInfer's
                                    RMSNormQuantKernel, flashinfer-ai/flashinfer#2639): a NaN/inf row comes back as
                                    q = +fmax with a finite scale                           -> *.values, *.scales
    {RMS,ADD_RMS}_QUANT_OUTPUT_BUFFERS_REUSED  q and the dynamic scale copied into buffers kept per shape and
                                    format and returned (persistent / CUDA-graph output buffers behind a functional
                                    signature; pytorch/pytorch#104435, vllm-project/vllm#9724's class): the next call
                                    of that shape overwrites them                              -> *.inputs_unmodified
    {RMS,ADD_RMS}_QUANT_SUBNORMALS_FLUSHED_NARROW  rows of at most 1024 (a one-block path of its own): FP8
                                    results below the format's smallest normal flushed to 0 (triton-lang/triton#7382,
                                    #3634: fp32 -> fp8 conversions flushing subnormals)                -> *.values
    {RMS,ADD_RMS}_QUANT_FLOOR_FOR_ZERO_ROWS_ONLY  the declared floor of the dynamic scale applied as an all-zero
                                    guard (amax == 0 ? floor : amax / fmax), not max(amax / fmax, floor) (vLLM's
                                    min_scaling_factor; dropbox/gemlite#38): rows of small amax get a scale below
                                    the floor                                                          -> *.scales
    RMS_QUANT_TAIL_IGNORED          rows wider than 1024, not a multiple of it: the dynamic amax over the whole blocks
                                    of 1024 columns only, the tail left out (karpathy/llama2.c#532, ROCm/aiter#5044)
                                                                                             -> rms_quant.scales
    LN_QUANT_STATS_TAIL_DROPPED     rows wider than 1024: the mean and variance summed over the whole blocks of 1024
                                    columns only (tile-ai/tilelang-ascend#890, ROCm/aiter#5044)
                                                                              -> ln_quant.values, ln_quant.scales
    LN_QUANT_SCALE_BEFORE_WEIGHT    the dynamic scale from the amax of x_hat, before the weight and bias (the amax of
                                    the wrong tensor, NVIDIA/TransformerEngine#2355's class)  -> ln_quant.scales
    RMS_QUANT_RECIPROCAL_IN_STORAGE a static scale's reciprocal rounded to x's 16-bit dtype and multiplied in
                                    (tile-ai/TileOPs#2108's one reciprocal, held in the compute dtype)
                                                                        -> rms_quant.values, rms_quant.dequantized
    ADD_RMS_QUANT_E4M3_MAX_EVERYWHERE  fp8_max 448 for every FP8 format: e5m2 scaled and clamped with e4m3fn's
                                    maximum (ROCm/aiter#5081)                                -> add_rms_quant.scales
    RMS_QUANT_POW2_SCALE            the dynamic scale rounded up to a power of two (UE8M0), undeclared
                                    (sgl-project/sglang#28418)                               -> rms_quant.scales
    RMS_QUANT_AMAX_UPPER_BOUND      the per-token amax clamped to a default scale upper bound of 1200 before amax /
                                    fmax (vllm-project/vllm#48868's scale_ub, Meta's FP8 Llama recipe): rows whose
                                    |y| exceeds 1200 saturate                               -> rms_quant.scales
    RMS_QUANT_TOKENS_BEYOND_GRID    one program per token on a grid axis of at most 65 535: tokens from 65 535 on never
                                    normalized nor quantized, their q and dynamic scales left as allocated
                                    (vllm-project/vllm#52381, NVIDIA/TensorRT-LLM#16847) -> rms_quant.values (at scale)
    RMS_QUANT_VECTOR_TAIL_WIDE      rows wider than 1024 on a path of 8 elements a step: for d % 8 != 0 the last d % 8
                                    columns left out of the dynamic amax and never stored (ROCm/aiter#5044,
                                    flashinfer-ai/flashinfer#4480, vllm-project/vllm#6511)
                                                                                -> rms_quant.scales, rms_quant.values
    RMS_QUANT_INVERSE_DECLARED      the multiply convention, declared (scale_convention="multiply": q = Q(y s),
                                    dynamic scale fmax / amax): correct
    {LN,RMS,ADD_RMS}_QUANT_RECIPROCAL_SCALE  the dynamic scale as amax * fl(1/fmax), two float32 roundings, as torch's
                                    CUDA amax / fmax computes it ([R12]): correct
    ADD_RMS_QUANT_SYMMETRIC_INT8    INT8 clamped to [-127, 127], declared (int8_minimum=-127): correct
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable

import torch

from core.adapters.quantized import MINIMUM_SCALE, ln_float32, quantize, rms_float32
from core.kernel import Kernel, Quantization

SPEC = "tests/corpus/quantized.py:"
BLOCK = 1024  # the columns a block of 1024 threads covers a step
E4M3_MAX = 448.0
SCALE_UB = 1200.0  # the activation scale upper bound of Meta's FP8 Llama recipe (fbgemm's scale_ub)
DECLARED = Quantization(minimum_scale=MINIMUM_SCALE)
KINDS = {"LN": "layernorm_quant", "RMS": "rmsnorm_quant", "ADD_RMS": "add_rmsnorm_quant"}


def _fmax(quant_dtype: torch.dtype) -> float:
    return float(torch.iinfo(quant_dtype).max if not quant_dtype.is_floating_point else torch.finfo(quant_dtype).max)


def _scale_of(y: torch.Tensor, quant_dtype: torch.dtype) -> torch.Tensor:
    """The dynamic per-row scale max(amax / fmax, MINIMUM_SCALE) of y."""
    return torch.clamp(y.abs().amax(-1, keepdim=True) / _fmax(quant_dtype), min=MINIMUM_SCALE)


# each way to quantize: (y32, x, scale, quant_dtype) -> (q, scale), y32 the float32 norm output, x for its dtype
def _amax_unrounded(y32, x, scale, quant_dtype):
    if scale is None:
        scale = _scale_of(y32, quant_dtype)  # the bug: amax of the float32 y, the rounded y quantized below
    return quantize(y32.to(x.dtype).float(), scale, quant_dtype)


def _scale_inverted(y32, x, scale, quant_dtype):
    y = y32.to(x.dtype).float()
    if scale is None:
        return quantize(y, None, quant_dtype)
    q, _ = quantize(y, 1.0 / scale, quant_dtype)  # the bug: y * scale
    return q, scale


def _no_saturation(y32, x, scale, quant_dtype):
    y = y32.to(x.dtype).float()
    s = _scale_of(y, quant_dtype) if scale is None else scale
    v = y / s
    if not quant_dtype.is_floating_point:
        v = torch.round(v)  # the bug: no clamp, int8 wraps around
    return v.to(quant_dtype), s


def _fnuz_fmax(y32, x, scale, quant_dtype):
    y = y32.to(x.dtype).float()
    if scale is None and quant_dtype == torch.float8_e4m3fn:
        # the bug: the ROCm float8_e4m3fnuz maximum (240) for OCP e4m3fn (448): the scale is 448/240 too large and
        # a third of the format's range is never used (vLLM's fp8 helpers pick the maximum by platform)
        scale = torch.clamp(y.abs().amax(-1, keepdim=True) / 240.0, min=MINIMUM_SCALE)
    return quantize(y, scale, quant_dtype)


def _no_scale_floor(y32, x, scale, quant_dtype):
    y = y32.to(x.dtype).float()
    if scale is None:
        scale = y.abs().amax(-1, keepdim=True) / _fmax(quant_dtype)  # the bug: no floor, an all-zero row's is 0
    return quantize(y, scale, quant_dtype)


def _pair_amax_from_8_tokens(y32, x, scale, quant_dtype):
    y = y32.to(x.dtype).float()
    rows = y.reshape(-1, y.shape[-1])
    if scale is not None or rows.shape[0] < 8:
        return quantize(y, scale, quant_dtype)
    # the bug: two tokens a warp from 8 tokens on, the amax reduction spanning both (an odd last token alone)
    amax = rows.abs().amax(-1)
    paired = amax.clone()
    even = amax.shape[0] // 2 * 2
    paired[:even] = amax[:even].reshape(-1, 2).amax(-1).repeat_interleave(2)
    scale = torch.clamp(paired / _fmax(quant_dtype), min=MINIMUM_SCALE).reshape(*y.shape[:-1], 1)
    return quantize(y, scale, quant_dtype)


def _amax_of_the_first_1024(y32, x, scale, quant_dtype):
    y = y32.to(x.dtype).float()
    if scale is None and y.shape[-1] > 1024:
        # the bug: the per-token amax over the first block of 1024 columns only
        scale = torch.clamp(y[..., :1024].abs().amax(-1, keepdim=True) / _fmax(quant_dtype), min=MINIMUM_SCALE)
    return quantize(y, scale, quant_dtype)


def _ties_away_from_zero(y32, x, scale, quant_dtype):
    v_and_scale = _correct(y32, x, scale, quant_dtype)[1]
    v = (y32.to(x.dtype).float() / v_and_scale.float()).clamp(-_fmax(quant_dtype), _fmax(quant_dtype))
    if not quant_dtype.is_floating_point:  # the bug: floor(|v| + 1/2) with v's sign
        return (torch.sign(v) * torch.floor(v.abs() + 0.5)).clamp(min=-128).to(quant_dtype), v_and_scale
    # the bug: a tie (the two floats around v round apart) takes the neighbour away from zero
    away = torch.nextafter(v, torch.full_like(v, float("inf")).copysign(v)).to(quant_dtype)
    toward = torch.nextafter(v, torch.zeros_like(v)).to(quant_dtype)
    return torch.where(away.float() != toward.float(), away, v.to(quant_dtype)), v_and_scale


def _whole_tensor_guard(y32, x, scale, quant_dtype):
    if scale is None:
        y32.abs().max()  # the bug: an all-zero guard by a whole-tensor max, which raises on no element
    return _correct(y32, x, scale, quant_dtype)


_RECIPROCALS: dict[int, tuple] = {}  # address -> (a weak reference to the scale tensor, its reciprocal)


def _reciprocal_cached_by_pointer(y32, x, scale, quant_dtype):
    if scale is None:
        return _correct(y32, x, scale, quant_dtype)
    cached = _RECIPROCALS.get(scale.data_ptr())  # the bug: 1/scale cached for the tensor, never refreshed
    if cached is None or cached[0]() is not scale:  # (a freed tensor's address reused by another is a new entry)
        cached = _RECIPROCALS[scale.data_ptr()] = (weakref.ref(scale), 1.0 / scale.float())
    inverse = cached[1]
    v, fmax = y32.to(x.dtype).float() * inverse, _fmax(quant_dtype)
    v = torch.round(v).clamp(-128, fmax) if not quant_dtype.is_floating_point else v.clamp(-fmax, fmax)
    return v.to(quant_dtype), scale


def _correct(y32, x, scale, quant_dtype):
    return quantize(y32.to(x.dtype).float(), scale, quant_dtype)


def _y_written_into_x(y32, x, scale, quant_dtype):
    q, s = _correct(y32, x, scale, quant_dtype)
    x.copy_(y32.to(x.dtype))  # the bug: the normalized output kept in the input's buffer
    return q, s


def _inverse_declared(y32, x, scale, quant_dtype):
    y = y32.to(x.dtype).float()
    if scale is None:
        _, divide = quantize(y, None, quant_dtype)
        scale = 1.0 / divide
    v = y * scale
    fmax = _fmax(quant_dtype)
    if not quant_dtype.is_floating_point:  # INT8's lowest value: -128 (the declared default)
        return torch.round(v).clamp(torch.iinfo(quant_dtype).min, fmax).to(quant_dtype), scale
    return v.clamp(-fmax, fmax).to(quant_dtype), scale


def _reciprocal_scale(y32, x, scale, quant_dtype):
    """The dynamic scale as amax * fl(1/fmax), two float32 roundings: what torch's CUDA ``amax / fmax`` computes
    (docs/findings.md [R12]), here on any device."""
    y = y32.to(x.dtype).float()
    if scale is None:
        reciprocal = torch.tensor(1.0 / _fmax(quant_dtype), dtype=torch.float32, device=y.device)
        scale = torch.clamp(y.abs().amax(-1, keepdim=True) * reciprocal, min=MINIMUM_SCALE)
    return quantize(y, scale, quant_dtype)


def _symmetric_int8(y32, x, scale, quant_dtype):
    q, s = _correct(y32, x, scale, quant_dtype)
    return (q if quant_dtype.is_floating_point else q.clamp(min=-127)), s


def _nan_hidden(y32, x, scale, quant_dtype):
    y = y32.to(x.dtype).float()
    if scale is None:  # the bug: amax reduced with fmaxf, which drops NaN
        magnitude = y.abs()
        amax = torch.where(torch.isnan(magnitude), 0.0, magnitude).amax(-1, keepdim=True)
        scale = torch.clamp(amax / _fmax(quant_dtype), min=MINIMUM_SCALE)
    v = y / scale.float()
    fmax = _fmax(quant_dtype)
    lowest = -fmax if quant_dtype.is_floating_point else float(torch.iinfo(quant_dtype).min)
    if not quant_dtype.is_floating_point:
        v = torch.round(v)
    # the bug: fmaxf(lowest, fminf(v, fmax)), which takes the number where v is NaN: +fmax
    v = torch.fmax(torch.fmin(v, torch.full_like(v, fmax)), torch.full_like(v, lowest))
    return v.to(quant_dtype), scale


_OUTPUT_BUFFERS: dict[tuple, torch.Tensor] = {}


def _output_buffers_reused(y32, x, scale, quant_dtype):
    q, s = _correct(y32, x, scale, quant_dtype)
    key = (tuple(q.shape), quant_dtype, str(q.device))
    kept = _OUTPUT_BUFFERS.setdefault((*key, "q"), torch.empty_like(q))  # the bug: one buffer per shape and format
    kept.copy_(q)
    if scale is not None:
        return kept, s
    kept_scale = _OUTPUT_BUFFERS.setdefault((*key, "scale"), torch.empty_like(s))
    kept_scale.copy_(s)
    return kept, kept_scale


NARROW_ROWS = 1024  # the widest row of the one-block path


def _subnormals_flushed_narrow(y32, x, scale, quant_dtype):
    q, s = _correct(y32, x, scale, quant_dtype)
    if not quant_dtype.is_floating_point or y32.shape[-1] > NARROW_ROWS:
        return q, s
    values = q.float()  # the bug: a subnormal result of the conversion flushed to 0
    return torch.where(values.abs() < torch.finfo(quant_dtype).smallest_normal, 0.0, values).to(quant_dtype), s


def _floor_for_zero_rows_only(y32, x, scale, quant_dtype):
    y = y32.to(x.dtype).float()
    if scale is None:  # the bug: the floor as an all-zero guard, not max(amax / fmax, floor)
        ratio = y.abs().amax(-1, keepdim=True) / _fmax(quant_dtype)
        scale = torch.where(ratio == 0, MINIMUM_SCALE, ratio)
    return quantize(y, scale, quant_dtype)


def _amax_of_the_whole_blocks(y32, x, scale, quant_dtype):
    y = y32.to(x.dtype).float()
    d = y.shape[-1]
    if scale is None and d > BLOCK and d % BLOCK:  # the bug: the tail past the last whole block left out of amax
        scale = _scale_of(y[..., :d // BLOCK * BLOCK], quant_dtype)
    return quantize(y, scale, quant_dtype)


def _reciprocal_in_storage(y32, x, scale, quant_dtype):
    if scale is None:
        return _correct(y32, x, scale, quant_dtype)
    inverse = (1.0 / scale.float()).to(x.dtype).float()  # the bug: 1 / scale held in x's (16-bit) dtype
    v, fmax = y32.to(x.dtype).float() * inverse, _fmax(quant_dtype)
    v = torch.round(v).clamp(-128, fmax) if not quant_dtype.is_floating_point else v.clamp(-fmax, fmax)
    return v.to(quant_dtype), scale


def _e4m3_max_everywhere(y32, x, scale, quant_dtype):
    if not quant_dtype.is_floating_point:
        return _correct(y32, x, scale, quant_dtype)
    y = y32.to(x.dtype).float()
    if scale is None:  # the bug: e4m3fn's maximum for every FP8 format, in the scale and in the clamp
        scale = torch.clamp(y.abs().amax(-1, keepdim=True) / E4M3_MAX, min=MINIMUM_SCALE)
    return (y / scale.float()).clamp(-E4M3_MAX, E4M3_MAX).to(quant_dtype), scale


def _power_of_two_scale(y32, x, scale, quant_dtype):
    y = y32.to(x.dtype).float()
    if scale is None:  # the bug: amax / fmax rounded up to a power of two (UE8M0), undeclared
        scale = torch.exp2(torch.ceil(torch.log2(_scale_of(y, quant_dtype))))
    return quantize(y, scale, quant_dtype)


def _amax_upper_bound(y32, x, scale, quant_dtype):
    y = y32.to(x.dtype).float()
    if scale is None:  # the bug: the amax clamped to a scale upper bound left on by default
        scale = _scale_of(y.abs().amax(-1, keepdim=True).clamp(max=SCALE_UB), quant_dtype)
    return quantize(y, scale, quant_dtype)


GRID_Y = 65_535  # the programs a grid's y axis launches
VECTOR = 8  # the elements a step of the wide rows' vectorized path


def _tokens_beyond_the_grid(y32, x, scale, quant_dtype):
    q, s = _correct(y32, x, scale, quant_dtype)
    d = q.shape[-1] if q.dim() else 0
    if not d or q.numel() // d <= GRID_Y:
        return q, s
    # the bug: the tokens from GRID_Y on never quantized, q (and the dynamic scales) as the allocation left them
    unwritten = torch.empty_like(q).reshape(-1, d)
    unwritten[:GRID_Y] = q.reshape(-1, d)[:GRID_Y]
    if scale is None:
        scales = torch.empty_like(s).reshape(-1, 1)
        scales[:GRID_Y] = s.reshape(-1, 1)[:GRID_Y]
        s = scales.reshape(s.shape)
    return unwritten.reshape(q.shape), s


def _vector_tail_left_out_wide(y32, x, scale, quant_dtype):
    d = y32.shape[-1]
    if d <= BLOCK or not d % VECTOR:
        return _correct(y32, x, scale, quant_dtype)
    whole = d - d % VECTOR  # the bug: only the whole vectors enter the amax and are quantized and stored
    q, s = _correct(y32[..., :whole], x, scale, quant_dtype)
    unwritten = torch.empty(y32.shape, dtype=q.dtype, device=q.device)
    unwritten[..., :whole] = q
    return unwritten, s


def _ln_quant_stats_tail_dropped(x, weight, bias, eps, scale, quant_dtype):
    """LayerNorm whose statistics loop over blocks of 1024 columns runs d // 1024 times: the partial last block never
    enters the mean and variance (both still divided by d)."""
    h = x.float()
    d = h.shape[-1]
    covered = d // BLOCK * BLOCK if d > BLOCK else d
    mean = h[..., :covered].sum(-1, keepdim=True) / d
    centred = h - mean
    y = centred * torch.rsqrt(centred[..., :covered].square().sum(-1, keepdim=True) / d + eps)
    y = y if weight is None else y * weight.float()
    return _correct(y if bias is None else y + bias.float(), x, scale, quant_dtype)


def _ln_quant_scale_before_weight(x, weight, bias, eps, scale, quant_dtype):
    """The dynamic scale from the amax of x_hat (in x's dtype), taken with the statistics before the weight and bias
    are applied; q of y = x_hat w + b."""
    if scale is None:
        scale = _scale_of(ln_float32(x, None, None, eps).to(x.dtype).float(), quant_dtype)
    return _correct(ln_float32(x, weight, bias, eps), x, scale, quant_dtype)


def _as_if_contiguous(t: torch.Tensor | None) -> torch.Tensor | None:
    """t's shape read from its first element at contiguous strides (row r at r * d): another view's values."""
    if t is None or t.is_contiguous() or not t.numel():
        return t
    strides = [1] * t.dim()
    for axis in range(t.dim() - 2, -1, -1):
        strides[axis] = strides[axis + 1] * t.shape[axis + 1]
    return torch.as_strided(t, t.shape, strides, t.storage_offset())


def _strides_ignored(kind: Callable) -> Callable:
    """The kind's kernel reading x (and the residual) as :func:`_as_if_contiguous` does."""
    @functools.wraps(kind)
    def reading_rows_at_t_times_d(x, *arguments):
        if kind.__name__ == "add_rmsnorm_quant":
            residual, *arguments = arguments
            return kind(_as_if_contiguous(x), _as_if_contiguous(residual), *arguments)
        return kind(_as_if_contiguous(x), *arguments)

    return reading_rows_at_t_times_d


def _layernorm(quantized: Callable) -> Callable:
    def layernorm_quant(x, weight, bias, eps, scale, quant_dtype):
        return quantized(ln_float32(x, weight, bias, eps), x, scale, quant_dtype)

    return layernorm_quant


def _rmsnorm(quantized: Callable) -> Callable:
    def rmsnorm_quant(x, weight, eps, scale, quant_dtype):
        return quantized(rms_float32(x, weight, eps), x, scale, quant_dtype)

    return rmsnorm_quant


def _fused(quantized: Callable, residual_out_rounded: bool = False) -> Callable:
    """The add kind: h = x + residual in float32, residual_out = h in the residual's dtype (float32 when
    ``residual_out_rounded``, after the bug's rounding to the residual's dtype), y = RMS(residual_out)."""

    def add_rmsnorm_quant(x, residual, weight, eps, scale, quant_dtype):
        h = x if residual is None else (x.float() + residual.float()).to(residual.dtype)
        q, s = quantized(rms_float32(h, weight, eps), x, scale, quant_dtype)
        return q, s, h.float() if residual_out_rounded else h

    return add_rmsnorm_quant


WRAPPERS = {"LN": _layernorm, "RMS": _rmsnorm, "ADD_RMS": _fused}


def _token_scale_unrounded(x, residual, weight, eps, scale, quant_dtype):
    h32 = x.float() if residual is None else x.float() + residual.float()
    h = h32.to(x.dtype if residual is None else residual.dtype)
    s = _scale_of(rms_float32(h32, weight, eps), quant_dtype) if scale is None else scale  # the bug
    q, _ = quantize(rms_float32(h, weight, eps).to(x.dtype).float(), s, quant_dtype)
    return q, s, h


def _kernel(name: str, kind_prefix: str, fn: Callable, description: str, **declarations) -> Kernel:
    declarations.setdefault("quantization", DECLARED)
    attr = f"{kind_prefix}_QUANT_{name}"
    return Kernel(attr.lower().replace("_", "-"), KINDS[kind_prefix], fn, spec=SPEC + attr, description=description,
                  **declarations)


def _every_kind(name: str, quantized: Callable, what: str, *claims: str,
                around: Callable[[Callable], Callable] | None = None,
                prefixes: tuple[str, ...] = tuple(WRAPPERS)) -> tuple[Kernel, ...]:
    """The bug in the three kinds (``prefixes``: some of them), each description naming its claims
    ``{prefix}_quant.{claim}``; ``around``: the bug in how the kind's function is called (its inputs), wrapped around
    the kind quantizing with ``quantized``."""
    def description(prefix: str) -> str:
        return f"{what} -> {', '.join(f'{prefix.lower()}_quant.{claim}' for claim in claims)}"

    def kind(wrap: Callable) -> Callable:
        return wrap(quantized) if around is None else around(wrap(quantized))

    return tuple(_kernel(name, prefix, kind(WRAPPERS[prefix]), description(prefix)) for prefix in prefixes)


LN_QUANT_AMAX_UNROUNDED, RMS_QUANT_AMAX_UNROUNDED, ADD_RMS_QUANT_AMAX_UNROUNDED = _every_kind(
    "AMAX_UNROUNDED", _amax_unrounded, "amax of the float32 y, the rounded y quantized", "scales")
LN_QUANT_FNUZ_FMAX, RMS_QUANT_FNUZ_FMAX, ADD_RMS_QUANT_FNUZ_FMAX = _every_kind(
    "FNUZ_FMAX", _fnuz_fmax, "e4m3fn scaled with e4m3fnuz's maximum 240", "scales")
LN_QUANT_NO_SCALE_FLOOR, RMS_QUANT_NO_SCALE_FLOOR, ADD_RMS_QUANT_NO_SCALE_FLOOR = _every_kind(
    "NO_SCALE_FLOOR", _no_scale_floor, "no floor on the dynamic scale: an all-zero row's scale is 0, its q 0/0",
    "scales")
(LN_QUANT_PAIR_AMAX_FROM_8_TOKENS, RMS_QUANT_PAIR_AMAX_FROM_8_TOKENS,
 ADD_RMS_QUANT_PAIR_AMAX_FROM_8_TOKENS) = _every_kind(
    "PAIR_AMAX_FROM_8_TOKENS", _pair_amax_from_8_tokens, "8 tokens or more: each dynamic scale from the larger amax "
    "of its pair of tokens (two a warp)", "scales")
(LN_QUANT_AMAX_OF_THE_FIRST_1024, RMS_QUANT_AMAX_OF_THE_FIRST_1024,
 ADD_RMS_QUANT_AMAX_OF_THE_FIRST_1024) = _every_kind(
    "AMAX_OF_THE_FIRST_1024", _amax_of_the_first_1024, "rows wider than 1024: the dynamic scale from the amax of the "
    "first 1024 columns only", "scales")
LN_QUANT_SCALE_INVERTED, RMS_QUANT_SCALE_INVERTED, ADD_RMS_QUANT_SCALE_INVERTED = _every_kind(
    "SCALE_INVERTED", _scale_inverted, "a static scale multiplied, not divided by", "values", "dequantized")
LN_QUANT_TIES_AWAY, RMS_QUANT_TIES_AWAY, ADD_RMS_QUANT_TIES_AWAY = _every_kind(
    "TIES_AWAY", _ties_away_from_zero, "exact ties rounded away from zero (INT8 as floor(|v| + 1/2), FP8 by a "
    "downcast adding half an ulp), ties to even declared", "values")
LN_QUANT_EMPTY_BATCH_RAISES, RMS_QUANT_EMPTY_BATCH_RAISES, ADD_RMS_QUANT_EMPTY_BATCH_RAISES = _every_kind(
    "EMPTY_BATCH_RAISES", _whole_tensor_guard, "an all-zero guard by a whole-tensor max: raises on an empty batch",
    "values")
LN_QUANT_STALE_SCALE, RMS_QUANT_STALE_SCALE, ADD_RMS_QUANT_STALE_SCALE = _every_kind(
    "STALE_SCALE", _reciprocal_cached_by_pointer, "1 / a static scale cached by the tensor's address: a scale updated "
    "in place keeps its old reciprocal", "values")
LN_QUANT_NO_SATURATION, RMS_QUANT_NO_SATURATION, ADD_RMS_QUANT_NO_SATURATION = _every_kind(
    "NO_SATURATION", _no_saturation, "no clamp to the format's range", "saturation")
LN_QUANT_Y_WRITTEN_INTO_X, RMS_QUANT_Y_WRITTEN_INTO_X, ADD_RMS_QUANT_Y_WRITTEN_INTO_X = _every_kind(
    "Y_WRITTEN_INTO_X", _y_written_into_x, "the normalized y also written into x's buffer", "inputs_unmodified")
# red-team round 6's escapes, in the kinds it wrote them for (rmsnorm_quant, add_rmsnorm_quant)
RED_TEAM_KINDS = ("RMS", "ADD_RMS")
(RMS_QUANT_STRIDES_IGNORED,) = _every_kind(
    "STRIDES_IGNORED", _correct, "row t of x read at t * d: strides and offsets of a view ignored", "values",
    "scales", around=_strides_ignored, prefixes=("RMS",))
ADD_RMS_QUANT_STRIDES_IGNORED = _kernel(
    "STRIDES_IGNORED", "ADD_RMS", _strides_ignored(_fused(_correct)), "rows t of x and the residual read at t * d: "
    "residual_out (and q, of it) from other elements -> add_rms_quant.residual_out")
RMS_QUANT_NAN_HIDDEN, ADD_RMS_QUANT_NAN_HIDDEN = _every_kind(
    "NAN_HIDDEN", _nan_hidden, "a NaN-dropping clamp fmaxf(-fmax, fminf(v, fmax)) and amax: a NaN/inf row comes back "
    "as +fmax with a finite scale", "values", "scales", prefixes=RED_TEAM_KINDS)
RMS_QUANT_OUTPUT_BUFFERS_REUSED, ADD_RMS_QUANT_OUTPUT_BUFFERS_REUSED = _every_kind(
    "OUTPUT_BUFFERS_REUSED", _output_buffers_reused, "q and the dynamic scale in buffers kept per shape and format: "
    "the next call overwrites them", "inputs_unmodified", prefixes=RED_TEAM_KINDS)
RMS_QUANT_SUBNORMALS_FLUSHED_NARROW, ADD_RMS_QUANT_SUBNORMALS_FLUSHED_NARROW = _every_kind(
    "SUBNORMALS_FLUSHED_NARROW", _subnormals_flushed_narrow, f"rows of at most {NARROW_ROWS}: FP8 subnormal results "
    "flushed to 0", "values", prefixes=RED_TEAM_KINDS)
RMS_QUANT_FLOOR_FOR_ZERO_ROWS_ONLY, ADD_RMS_QUANT_FLOOR_FOR_ZERO_ROWS_ONLY = _every_kind(
    "FLOOR_FOR_ZERO_ROWS_ONLY", _floor_for_zero_rows_only, "the floor of the dynamic scale for all-zero rows only, "
    "not max(amax / fmax, floor)", "scales", prefixes=RED_TEAM_KINDS)
ADD_RMS_QUANT_TOKEN_SCALE_UNROUNDED = _kernel(
    "TOKEN_SCALE_UNROUNDED", "ADD_RMS", _token_scale_unrounded,
    "per-token scale from the norm of the unrounded x + residual -> add_rms_quant.scales")
ADD_RMS_QUANT_RESIDUAL_OUT_ROUNDED = _kernel(
    "RESIDUAL_OUT_ROUNDED", "ADD_RMS", _fused(_correct, residual_out_rounded=True),
    "declares a float32 residual_out, rounds it to the residual's dtype -> add_rms_quant.residual_out",
    residual_dtype="float32")
# red-team round 7's (inference)
(RMS_QUANT_TAIL_IGNORED,) = _every_kind(
    "TAIL_IGNORED", _amax_of_the_whole_blocks, "karpathy/llama2.c#532 (the tail hidden_dim % group_size not "
    "quantized) and ROCm/aiter#5044 (rmsnorm_quant's unhandled vectorized tail): rows wider than 1024 and not a "
    "multiple of it, the dynamic amax over the whole blocks of 1024 columns only, so a larger tail element saturates",
    "scales", prefixes=("RMS",))
LN_QUANT_STATS_TAIL_DROPPED = _kernel(
    "STATS_TAIL_DROPPED", "LN", _ln_quant_stats_tail_dropped, "tile-ai/tilelang-ascend#890 (RMSNorm wrong at N = 513: "
    "the tail block not handled) and ROCm/aiter#5044: rows wider than 1024, the mean and variance over the whole "
    "blocks of 1024 columns only (widths 1536, 2560, 5120 wrong; 4096, 8192 right) -> ln_quant.values, "
    "ln_quant.scales")
LN_QUANT_SCALE_BEFORE_WEIGHT = _kernel(
    "SCALE_BEFORE_WEIGHT", "LN", _ln_quant_scale_before_weight, "the dynamic scale from the amax of x_hat, reduced "
    "with the statistics before the weight and bias are applied (the amax of the wrong tensor, "
    "NVIDIA/TransformerEngine#2355's class) -> ln_quant.scales")
(RMS_QUANT_RECIPROCAL_IN_STORAGE,) = _every_kind(
    "RECIPROCAL_IN_STORAGE", _reciprocal_in_storage, "tile-ai/TileOPs#2108 (a row multiplied by one reciprocal of the "
    "scale), the reciprocal of a static scale held in x's 16-bit dtype (off by up to 2^-9 in bfloat16)", "values",
    "dequantized", prefixes=("RMS",))
(ADD_RMS_QUANT_E4M3_MAX_EVERYWHERE,) = _every_kind(
    "E4M3_MAX_EVERYWHERE", _e4m3_max_everywhere, "ROCm/aiter#5081 (constexpr float fp8_max = 448.0f, no branch on "
    "the format): float8_e5m2's dynamic scale amax / 448 and q clamped to +-448", "scales", prefixes=("ADD_RMS",))
(RMS_QUANT_POW2_SCALE,) = _every_kind(
    "POW2_SCALE", _power_of_two_scale, "sgl-project/sglang#28418 (UE8M0 power-of-two scales) shipped under the plain "
    "amax / fmax contract: the dynamic scale rounded up to a power of two, undeclared", "scales", prefixes=("RMS",))
(RMS_QUANT_AMAX_UPPER_BOUND,) = _every_kind(
    "AMAX_UPPER_BOUND", _amax_upper_bound, "vllm-project/vllm#48868 (scale_ub clamps the per-token amax the quant "
    "scale is derived from; Meta's FP8 Llama recipe's activation scale_ub 1200) left on by default: the dynamic scale "
    "min(amax, 1200) / fmax, so a token whose |y| exceeds 1200 (massive activations after a large gain) saturates",
    "scales", prefixes=("RMS",))
# red-team round 8 (channels and dropout): more than 65 535 tokens, a vector path's tail of wide rows
(RMS_QUANT_TOKENS_BEYOND_GRID,) = _every_kind(
    "TOKENS_BEYOND_GRID", _tokens_beyond_the_grid, "vllm-project/vllm#52381 (fused_norm_rope and fused_q placed "
    "num_tokens on CUDA grid-y: a launch of 65 536 tokens exceeded its 65 535 block limit), "
    "NVIDIA/TensorRT-LLM#16847 (a per-token FP8 quant grid of num_tokens): one program per token on a grid axis "
    "clipped to 65 535, so tokens from 65 535 on are never normalized nor quantized, their q and dynamic scales "
    "whatever the freshly allocated outputs held", "values", prefixes=("RMS",))
(RMS_QUANT_VECTOR_TAIL_WIDE,) = _every_kind(
    "VECTOR_TAIL_WIDE", _vector_tail_left_out_wide, "ROCm/aiter#5044 (HIP RMSNorm corrupts row-boundary elements for "
    "odd hidden sizes: an unhandled vectorized tail in module_rmsnorm_quant's fast path), "
    "flashinfer-ai/flashinfer#4480 (a thread per vector, no bounds guard, hidden_size checked only % 128), "
    "vllm-project/vllm#6511 (vectorized only if hidden_size % 4 == 0): rows wider than 1024 take a path of 8 "
    "elements a step whose amax and quantize loop cover the whole vectors only, so for d % 8 != 0 the last d % 8 "
    "columns are left out of the dynamic amax and never stored (rows up to 1024: a scalar path, right)", "scales",
    "values", prefixes=("RMS",))
RMS_QUANT_INVERSE_DECLARED = _kernel(
    "INVERSE_DECLARED", "RMS", _rmsnorm(_inverse_declared),
    "q = Q(y * scale), declared (scale_convention='multiply'): correct",
    quantization=Quantization(scale_convention="multiply", minimum_scale=MINIMUM_SCALE))
LN_QUANT_RECIPROCAL_SCALE, RMS_QUANT_RECIPROCAL_SCALE, ADD_RMS_QUANT_RECIPROCAL_SCALE = _every_kind(
    "RECIPROCAL_SCALE", _reciprocal_scale, "the dynamic scale as amax times the rounded 1/fmax (torch's CUDA "
    "division by a number): correct", "scales")
ADD_RMS_QUANT_SYMMETRIC_INT8 = _kernel(
    "SYMMETRIC_INT8", "ADD_RMS", _fused(_symmetric_int8), "INT8 in [-127, 127], declared (int8_minimum=-127): correct",
    quantization=Quantization(int8_minimum=-127, minimum_scale=MINIMUM_SCALE))
