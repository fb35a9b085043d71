"""Broken fused dropout + add + LayerNorm kernels (kind dropout_add_layernorm): residual_out = residual + dropout(x)
(mask of the seed, i.i.d. Bernoulli(1-p) per element), y = LN(residual_out), with exactly one thing broken.

    DROP_ADD_NO_RESCALE           kept values not divided by 1 - p                -> drop_add_ln.values
    DROP_ADD_ONE_MASK_FOR_ROWS    every row gets the same mask (a per-column mask) -> drop_add_ln.independence
    DROP_ADD_ONE_MASK_ABOVE_4096  the same, for rows wider than 4096               -> drop_add_ln.independence
    DROP_ADD_MASK_EVERY_64_ROWS   row r gets row r mod 64's mask (64-row programs offset by the row in the block)
                                                                                   -> drop_add_ln.independence
    DROP_ADD_BLOCKS_OF_2          neighbour pairs share one draw                   -> drop_add_ln.variance_bias,
                                                                                     drop_add_ln.independence
    DROP_ADD_NORM_WITHOUT_DROPOUT y = LN(residual + x): the dropout skipped for y   -> drop_add_ln.forward
    DROP_ADD_KEEP_DROP_SWAPPED    keeps an element with probability p, not 1 - p  -> drop_add_ln.keep_rate
    DROP_ADD_SEED_LOW_31_BITS     the seed's low 31 bits only: seeds 2^31 apart share a mask -> drop_add_ln.seeds
    DROP_ADD_P_ZERO_UNSET         p = 0 read as unset (p or 0.1): drops at p = 0      -> drop_add_ln.values
    DROP_ADD_P_ONE_NAN            p = 1: the dropped elements scaled by 1/0, NaN     -> drop_add_ln.values
    DROP_ADD_P_ONE_BACKWARD_NAN   p = 1: the forward right, dx scaled by 1/0, NaN    -> drop_add_ln.gradient
    DROP_ADD_EMPTY_BATCH_RAISES   an empty batch raises (n / programs unguarded)     -> drop_add_ln.forward
    DROP_ADD_ROW_INDEX_IN_16_BITS rows past 65 535 repeat the first rows' masks      -> drop_add_ln.independence
    DROP_ADD_UNIFORM_IN_STORAGE_DTYPE  uniforms drawn in x's dtype (bfloat16: a grid of 2^-8) -> drop_add_ln.keep_rate
    DROP_ADD_FIXED_INTERNAL_SEED  the seed argument ignored (a fixed generator)   -> drop_add_ln.seeds
    DROP_ADD_UNSEEDED             the mask from torch's global generator          -> drop_add_ln.determinism
    DROP_ADD_BACKWARD_OTHER_MASK  the backward drops with another mask            -> drop_add_ln.gradient
    DROP_ADD_BACKWARD_UNSCALED    the backward forgets the 1/(1-p) scale           -> drop_add_ln.gradient
    DROP_ADD_RESIDUAL_WRITTEN     writes residual_out into the residual argument  -> drop_add_ln.inputs_unmodified
    DROP_ADD_WHOLE_TENSOR_STATISTICS  LayerNorm statistics over the whole tensor  -> drop_add_ln.row_independence
    DROP_ADD_STRIDES_IGNORED      reads x and residual with contiguous strides    -> drop_add_ln.layout_invariance
    DROP_ADD_ROW_STREAMS_OVERLAP_WIDE  rows of 64+: row r's random offset r d/2, row r + 1 repeats half of row r
                                                                                   -> drop_add_ln.independence
    DROP_ADD_P1_RETURNS_RESIDUAL  p = 1: residual_out is the residual tensor itself -> drop_add_ln.values
    DROP_ADD_KEY_FROM_ADDRESS     the generator keyed with seed XOR x's address    -> drop_add_ln.determinism
    DROP_ADD_STREAMS_PER_THREAD   the generator keyed with (seed, thread count)    -> drop_add_ln.determinism
    DROP_ADD_MASK_FROM_OUTPUT     no mask saved: the backward's kept elements where residual_out != residual, a kept
                                  x of 0 gets no gradient (ROCm/tensorflow-upstream#1012)  -> drop_add_ln.gradient
    DROP_ADD_ROW_STRIDE_KEYED     the forward's uniforms keyed by x's memory offsets, the backward's by the contiguous
                                  dx's (pytorch/pytorch#47176's class)              -> drop_add_ln.layout_invariance
    DROP_ADD_TINY_P_DROPS_EVERYTHING  the keep threshold uint32(float32(1 - p) 2^32) wraps to 0 for 0 < p < 2^-25: the
                                  whole branch dropped, residual_out = residual (NVIDIA/cudnn-frontend#875,
                                  NVIDIA/TransformerEngine#2014)                        -> drop_add_ln.keep_rate
    DROP_ADD_RESIDUAL_DOWNCAST    a float32 residual beside 16-bit x rounded to x's dtype, the dropout + add done
                                  there, residual_out handed back in float32 holding a 16-bit sum
                                  (NVIDIA/Megatron-LM#3504)                             -> drop_add_ln.gradient

The control computes in float32 and rounds residual_out to the storage dtype, so in 16-bit storage its autograd
backward rounds dL/d(residual_out) twice, as torch-fused does (docs/findings.md [R1]): inside the k-term sum the
gradient bound allows (properties.bounds.tolerance), so it runs in every dtype.
"""

from __future__ import annotations

import math

import torch

from core.kernel import Kernel
from corpus.memory import read_as_if_contiguous

SPEC = "tests/corpus/dropout_add.py:"
FIXED_SEED = 1234


def _mask(shape, p: float, seed: int, bug: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    if bug == "unseeded":
        return torch.rand(shape) >= p
    generator = torch.Generator().manual_seed(FIXED_SEED if bug == "fixed_seed" else
                                              seed & 0x7FFFFFFF if bug == "seed_31_bits" else seed)
    if bug == "rows" or (bug == "rows_above_4096" and shape[-1] > 4096):
        return (torch.rand(shape[-1], generator=generator) >= p).expand(shape)
    if bug == "every_64_rows":  # row r gets the mask of row r mod 64
        rows = math.prod(shape[:-1])  # x's rows over every leading dimension
        first = torch.rand(min(rows, 64), shape[-1], generator=generator) >= p
        return first.repeat(-(-rows // 64), 1)[:rows].reshape(shape)
    if bug == "row_index_16_bits":  # row r gets the mask of row r mod 65 536 (a 16-bit row counter)
        rows = math.prod(shape[:-1])
        first = torch.rand(min(rows, 65_536), shape[-1], generator=generator) >= p
        return first[torch.arange(rows) % 65_536].reshape(shape)
    if bug == "row_streams_overlap" and shape[-1] >= 64 and math.prod(shape):
        # row r's uniforms start at r * d/2 of one stream, not r * d (flagos-ai/FlagGems#85, #27: the per-row Philox
        # offset advanced by half the draws a row consumes): row r + 1's first d/2 bits are row r's last d/2
        d, rows = shape[-1], math.prod(shape[:-1])
        stream = torch.rand((rows - 1) * (d // 2) + d, generator=generator)
        return (stream[torch.arange(rows).unsqueeze(1) * (d // 2) + torch.arange(d)] >= p).reshape(shape)
    if bug == "threshold_wraps" and p > 0.0:  # keep where a 32-bit draw < uint32(float32(1 - p) 2^32), wrapping to 0
        threshold = int(torch.tensor(1.0 - p, dtype=torch.float32).item() * 2.0**32) % 2**32
        return torch.randint(0, 2**32, shape, generator=generator) < threshold
    if bug == "blocks":  # one draw for each pair of neighbours (an even width)
        return (torch.rand(*shape[:-1], shape[-1] // 2, generator=generator) >= p).repeat_interleave(2, -1)
    draws = torch.rand(shape, generator=generator, dtype=dtype if bug == "storage_uniform" else torch.float32)
    return draws < p if bug == "swapped" else draws >= p


def _value_of_first_gradient_of_second(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """first's value, second's gradient."""
    return first.detach() + (second - second.detach())


def _memory_offsets(t: torch.Tensor) -> torch.Tensor:
    """Each element's offset in t's storage from its first element, sum_a i_a stride_a (the pointer offsets a strided
    kernel loads with)."""
    offsets = torch.zeros(t.shape, dtype=torch.long)
    for axis in range(t.dim()):
        offsets = offsets + (torch.arange(t.shape[axis]) * t.stride(axis)).view([-1 if a == axis else 1
                                                                                 for a in range(t.dim())])
    return offsets


def _mask_at_memory_offsets(x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
    """The mask of the seed keyed by x's memory offsets (element i draws uniform number offset_i of one stream): for a
    contiguous x, :func:`_mask`'s."""
    offsets = _memory_offsets(x)
    stream = torch.rand(int(offsets.max()) + 1 if offsets.numel() else 0, generator=torch.Generator().manual_seed(seed))
    return stream[offsets] >= p


def _make(bug: str):
    def fn(x, residual, weight, bias, eps, p, seed):
        if bug == "p_zero_unset":
            p = p or 0.1  # the bug: p = 0 read as "unset", the default dropped with
        if bug == "p_one_nan" and p == 1.0:
            # the bug: every element dropped (x m = 0), then scaled by 1/(1-p) = inf: 0 * inf = NaN
            h = (residual.float() + (x.float() * 0.0) * float("inf")).to(residual.dtype)
            return torch.nn.functional.layer_norm(h.float(), x.shape[-1:], None, None, eps).to(x.dtype), h
        if bug == "p_one_backward_nan" and p == 1.0:
            # the bug: the forward's p = 1 case (every element dropped, h = residual) but a backward through x scaled
            # by the float 1/(1-p) = inf: dL/dx = dh * 0 * inf = NaN
            dropped = _value_of_first_gradient_of_second(torch.zeros_like(x, dtype=torch.float32),
                                                         x.float() * 0.0 * float("inf"))
            h = (residual.float() + dropped).to(residual.dtype)
            return torch.nn.functional.layer_norm(h.float(), x.shape[-1:], None, None, eps).to(x.dtype), h
        if bug == "empty_raises":  # the bug: n / programs unguarded (pytorch/pytorch#20499's SIGFPE on no element)
            x.numel() // -(-x.numel() // 4096)
        if bug == "p_one_residual" and p == 1.0:
            # the bug: every element dropped, so residual_out "is" the residual: returned itself, not a copy
            return torch.nn.functional.layer_norm(residual.float(), x.shape[-1:], None, None, eps).to(x.dtype), residual
        if bug == "address":  # the bug: the key from x's storage address (facebookresearch/xformers#173)
            seed = (seed ^ (x.untyped_storage().data_ptr() >> 4)) & (2**63 - 1)
        if bug == "threads":  # the bug: one engine per thread, keyed by the thread (NervanaSystems/ngraph#3006)
            seed = (seed * 1_000_003 + torch.get_num_threads()) % 2**63
        if bug == "strides":
            x, residual = read_as_if_contiguous(x), read_as_if_contiguous(residual)
        kept = _mask(x.shape, p, seed, bug, x.dtype).to(x.device)
        scale = 1.0 if bug == "rescale" else 1.0 / (1.0 - p)
        if bug == "row_stride_keyed":  # the forward keyed by x's offsets, the backward by the contiguous dx's
            at_offsets = _mask_at_memory_offsets(x, p, seed).to(x.device)
            kept, regenerated = at_offsets, kept
        branch = torch.where(kept, x.float() * scale, 0.0)
        if bug == "row_stride_keyed":
            branch = _value_of_first_gradient_of_second(branch, torch.where(regenerated, x.float() * scale, 0.0))
        if bug == "mask_from_output":  # no mask saved: the backward keeps where residual_out != residual
            unchanged = (residual.float() + branch).to(residual.dtype) == residual
            branch = _value_of_first_gradient_of_second(branch, torch.where(unchanged, 0.0, x.float() * scale))
        if bug == "other_mask":
            other = _mask(x.shape, p, seed + 1, "").to(x.device)
            branch = _value_of_first_gradient_of_second(branch, torch.where(other, x.float() * scale, 0.0))
        if bug == "unscaled":
            branch = _value_of_first_gradient_of_second(branch, torch.where(kept, x.float(), 0.0))
        h = (residual.float() + branch).to(residual.dtype)
        if bug == "residual_downcast" and residual.dtype != x.dtype:  # the residual rounded to x's dtype, summed there
            h = (residual.to(x.dtype) + branch.to(x.dtype)).to(residual.dtype)
        if bug == "written":
            residual.data.copy_(h.detach())
        normalized = (residual.float() + x.float()) if bug == "skipped" else h.float()
        shape = normalized.shape if bug == "whole" else x.shape[-1:]  # the whole tensor's statistics
        y = torch.nn.functional.layer_norm(normalized, shape, None, None, eps)
        y = y if weight is None else y * weight.float()
        y = y if bias is None else y + bias.float()
        return y.to(x.dtype), h

    return fn


def _kernel(name: str, bug: str, description: str, **declared) -> Kernel:
    return Kernel(name.lower(), "dropout_add_layernorm", _make(bug), spec=f"{SPEC}{name}", description=description,
                  **declared)


DROP_ADD_NO_RESCALE = _kernel("DROP_ADD_NO_RESCALE", "rescale",
                              "kept values not rescaled by 1/(1-p): drop_add_ln.values")
DROP_ADD_ONE_MASK_FOR_ROWS = _kernel("DROP_ADD_ONE_MASK_FOR_ROWS", "rows",
                                     "the same mask in every row: drop_add_ln.independence")
DROP_ADD_ONE_MASK_ABOVE_4096 = _kernel("DROP_ADD_ONE_MASK_ABOVE_4096", "rows_above_4096",
                                       "the same mask in every row wider than 4096: drop_add_ln.independence")
DROP_ADD_MASK_EVERY_64_ROWS = _kernel("DROP_ADD_MASK_EVERY_64_ROWS", "every_64_rows",
                                      "row r gets row r mod 64's mask: drop_add_ln.independence")
DROP_ADD_BLOCKS_OF_2 = _kernel("DROP_ADD_BLOCKS_OF_2", "blocks", "one draw for each pair of neighbours: "
                               "drop_add_ln.variance_bias, drop_add_ln.independence")
DROP_ADD_NORM_WITHOUT_DROPOUT = _kernel("DROP_ADD_NORM_WITHOUT_DROPOUT", "skipped",
                                        "y normalizes residual + x, not residual_out: drop_add_ln.forward")
DROP_ADD_KEEP_DROP_SWAPPED = _kernel("DROP_ADD_KEEP_DROP_SWAPPED", "swapped",
                                     "keeps with probability p instead of 1 - p: drop_add_ln.keep_rate")
DROP_ADD_SEED_LOW_31_BITS = _kernel("DROP_ADD_SEED_LOW_31_BITS", "seed_31_bits",
                                    "the generator seeded with the seed's low 31 bits: drop_add_ln.seeds")
DROP_ADD_P_ZERO_UNSET = _kernel("DROP_ADD_P_ZERO_UNSET", "p_zero_unset",
                                "p = 0 read as unset (p or 0.1): elements dropped at p = 0: drop_add_ln.values")
DROP_ADD_P_ONE_NAN = _kernel("DROP_ADD_P_ONE_NAN", "p_one_nan",
                             "p = 1: the dropped elements scaled by 1/(1-p) = inf, NaN: drop_add_ln.values")
DROP_ADD_P_ONE_BACKWARD_NAN = _kernel("DROP_ADD_P_ONE_BACKWARD_NAN", "p_one_backward_nan",
                                      "p = 1: the forward drops every element, its backward scales dx by 1/(1-p) = "
                                      "inf, NaN (pytorch/pytorch#75288's guard missing there): drop_add_ln.gradient")
DROP_ADD_ROW_INDEX_IN_16_BITS = _kernel("DROP_ADD_ROW_INDEX_IN_16_BITS", "row_index_16_bits",
                                        "row r gets the mask of row r mod 65536 (a row index kept in 16 bits): "
                                        "drop_add_ln.independence (beyond 65 535 rows)")
DROP_ADD_EMPTY_BATCH_RAISES = _kernel("DROP_ADD_EMPTY_BATCH_RAISES", "empty_raises",
                                      "the elements a program, n / ceil(n / 4096), unguarded: an empty batch raises "
                                      "(pytorch/pytorch#20499): drop_add_ln.forward")
DROP_ADD_UNIFORM_IN_STORAGE_DTYPE = _kernel("DROP_ADD_UNIFORM_IN_STORAGE_DTYPE", "storage_uniform",
                                            "the uniforms drawn in x's dtype (torch.rand_like(x)): in bfloat16 p = "
                                            "0.001 drops 1/256, p = 0.999 keeps none: drop_add_ln.keep_rate")
DROP_ADD_FIXED_INTERNAL_SEED = _kernel("DROP_ADD_FIXED_INTERNAL_SEED", "fixed_seed",
                                       "ignores the seed argument (one fixed generator seed): drop_add_ln.seeds")
DROP_ADD_UNSEEDED = _kernel("DROP_ADD_UNSEEDED", "unseeded",
                            "draws the mask from torch's global generator, not the seed: drop_add_ln.determinism")
DROP_ADD_BACKWARD_OTHER_MASK = _kernel("DROP_ADD_BACKWARD_OTHER_MASK", "other_mask",
                                       "the backward drops with the mask of seed + 1: drop_add_ln.gradient")
DROP_ADD_BACKWARD_UNSCALED = _kernel("DROP_ADD_BACKWARD_UNSCALED", "unscaled",
                                     "the backward does not rescale by 1/(1-p): drop_add_ln.gradient")
DROP_ADD_RESIDUAL_WRITTEN = _kernel("DROP_ADD_RESIDUAL_WRITTEN", "written", "writes residual_out into the residual "
                                    "argument: drop_add_ln.inputs_unmodified")
DROP_ADD_WHOLE_TENSOR_STATISTICS = _kernel("DROP_ADD_WHOLE_TENSOR_STATISTICS", "whole", "LayerNorm's mean and variance "
                                           "over the whole tensor, not per row: drop_add_ln.row_independence")
DROP_ADD_STRIDES_IGNORED = _kernel("DROP_ADD_STRIDES_IGNORED", "strides", "reads x and residual from their storage "
                                   "offset with contiguous strides: drop_add_ln.layout_invariance")
DROP_ADD_ROW_STREAMS_OVERLAP_WIDE = _kernel(
    "DROP_ADD_ROW_STREAMS_OVERLAP_WIDE", "row_streams_overlap",
    "rows of 64 elements or more draw from one stream at row offset r d/2, not r d (the per-row Philox offset advanced "
    "by half the draws a row consumes: flagos-ai/FlagGems#85, #27; xlite-dev/ffpa-attn#166): row r + 1's first d/2 "
    "mask bits are row r's last d/2, one column of two rows independent: drop_add_ln.independence")
DROP_ADD_P1_RETURNS_RESIDUAL = _kernel(
    "DROP_ADD_P1_RETURNS_RESIDUAL", "p_one_residual",
    "p = 1 short-circuits to residual_out = the residual tensor itself (every element dropped; ATen's dropout "
    "'return input' short-circuit, pytorch/pytorch#126755, in the fused kind): the values are right, but a caller "
    "that updates residual_out in place (the next layer's residual add) writes its residual: drop_add_ln.values")
DROP_ADD_KEY_FROM_ADDRESS = _kernel(
    "DROP_ADD_KEY_FROM_ADDRESS", "address",
    "the generator keyed with seed XOR x's storage address / 16 (facebookresearch/xformers#173: the address of the "
    "seed tensor as the seed): the same x in another buffer (a recomputation, a replay) gets another mask: "
    "drop_add_ln.determinism")
DROP_ADD_STREAMS_PER_THREAD = _kernel(
    "DROP_ADD_STREAMS_PER_THREAD", "threads",
    "the generator keyed with (seed, torch.get_num_threads()) (an engine per OpenMP thread: "
    "NervanaSystems/ngraph#3006, uxlfoundation/oneDNN#3939): another thread count gives another mask: "
    "drop_add_ln.determinism")
DROP_ADD_MASK_FROM_OUTPUT = _kernel(
    "DROP_ADD_MASK_FROM_OUTPUT", "mask_from_output",
    "saves no mask: the backward counts an element as dropped where residual_out == residual (the dropout gradient "
    "'inspecting the output buffer' instead of the mask, ROCm/tensorflow-upstream#1012; #1008: no gradient where the "
    "input is 0; chelsea0x3b/dfdx#110): a kept x of 0 (or one so small that residual + x/(1-p) rounds to residual) "
    "gets no gradient: drop_add_ln.gradient")
DROP_ADD_ROW_STRIDE_KEYED = _kernel(
    "DROP_ADD_ROW_STRIDE_KEYED", "row_stride_keyed",
    "the forward keys its Philox counters with x's memory offsets, row * stride_x_row + col * stride_x_col, the "
    "backward with the contiguous dx's, row * d + col: the same mask for a contiguous x, another in the backward for "
    "x with another row stride (a slice of a fused qkv or hidden buffer, a transposed view) (pytorch/pytorch#47176's "
    "class, fixed by #47552: a dropout mask addressed with the wrong layout of a non-contiguous input): "
    "drop_add_ln.layout_invariance")
DROP_ADD_TINY_P_DROPS_EVERYTHING = _kernel(
    "DROP_ADD_TINY_P_DROPS_EVERYTHING", "threshold_wraps",
    "the branch's keep threshold uint32(float32(1 - p) 2^32), 1 - p rounded to float32 (NVIDIA/cudnn-frontend#875's "
    "keep_threshold32 at the end of the float32 range; NVIDIA/TransformerEngine#2014's p_dropout_in_uint32_t), wraps "
    "to 0 for 0 < p < 2^-25: the whole branch dropped, residual_out = residual and y = LN(residual), the sublayer's "
    "output silently gone (p = 0 and every ordinary p right): drop_add_ln.keep_rate")
DROP_ADD_RESIDUAL_DOWNCAST = _kernel(
    "DROP_ADD_RESIDUAL_DOWNCAST", "residual_downcast",
    "NVIDIA/Megatron-LM#3504 (\"Fixed fp32 residuals\": _bias_dropout_add_func downcast the fp32 residual to the "
    "computation dtype, residual.to(x.dtype), so fp32_residual_connection never kept the residual stream in fp32): "
    "beside 16-bit x a float32 residual rounded to x's dtype, the dropout + add done there, residual_out handed back "
    "in float32 (its declared dtype) holding a 16-bit sum: drop_add_ln.gradient")
DROP_ADD_CORRECT = _kernel("DROP_ADD_CORRECT", "", "the same implementation, unbroken: the control")
