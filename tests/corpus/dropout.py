"""Dropout kernels: a correct inverted dropout with its own generator, and broken ones.

Correct (``DROPOUT_BERNOULLI``): keep each element independently with probability 1 - p, drawn from a
``torch.Generator`` seeded with ``seed`` (so the same seed gives the same mask), and scale the kept ones
by 1/(1 - p):

    y = x * m / (1 - p),   m_i ~ Bernoulli(1 - p) i.i.d.        (p = 1: y = 0)

Each broken kernel is :func:`_dropout` with one rule replaced; the rule's docstring says the bug and the
claim ids that must catch it (the manifest lists the same ids).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from core.registry import Kernel

SPEC = "tests/corpus/dropout.py:"


def _seeded_generator(x: torch.Tensor, seed: int) -> torch.Generator:
    """A generator of its own on x's device, seeded with ``seed``."""
    return torch.Generator(device=x.device).manual_seed(seed)


def _keep_mask(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """m_i = [u_i >= p], u_i ~ U[0, 1) i.i.d.: kept with probability 1 - p."""
    return torch.rand(x.shape, generator=generator, device=x.device) >= p


def _inverted_scale(p: float) -> float:
    """1 / (1 - p), and 0 for p = 1 (everything dropped)."""
    return 0.0 if p >= 1.0 else 1.0 / (1.0 - p)


def _leave_input(x: torch.Tensor, y: torch.Tensor) -> None:
    """Leaves the input's buffer alone."""


def _forward_mask(x: torch.Tensor, p: float, seed: int, mask: torch.Tensor) -> torch.Tensor:
    """The backward's mask: the forward's."""
    return mask


def _forward_scale(p: float) -> float:
    """The backward's scale: the forward's, 1/(1 - p)."""
    return _inverted_scale(p)


def _scaled(x: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """x * mask * scale: the mask in x's dtype (0 or 1, exact), the product by the Python float scale in float32
    (torch's opmath for a 16-bit tensor times a scalar), rounded once to x's dtype."""
    return x * mask.to(x.dtype) * scale


def _no_shortcut(x: torch.Tensor, p: float) -> torch.Tensor | None:
    """No special case: every p goes through the mask."""
    return None


class _MaskedScale(torch.autograd.Function):
    """y = apply(x, mask, scale) (x * mask * scale when correct); dL/dx = dL/dy * backward_mask * backward_scale (the
    same mask and scale when correct)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, mask: torch.Tensor, scale: float, backward_mask: torch.Tensor,
                backward_scale: float, apply: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]
                ) -> torch.Tensor:
        ctx.save_for_backward(backward_mask)
        ctx.backward_scale = backward_scale
        return apply(x, mask, scale)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        (mask,) = ctx.saved_tensors
        return dy * mask.to(dy.dtype) * ctx.backward_scale, None, None, None, None, None


def _dropout(x: torch.Tensor, p: float, seed: int, *,
             generator: Callable[[torch.Tensor, int], torch.Generator] = _seeded_generator,
             keep_mask: Callable[[torch.Tensor, float, torch.Generator], torch.Tensor] = _keep_mask,
             scale: Callable[[float], float] = _inverted_scale,
             backward_mask: Callable[[torch.Tensor, float, int, torch.Tensor], torch.Tensor] = _forward_mask,
             backward_scale: Callable[[float], float] = _forward_scale,
             after: Callable[[torch.Tensor, torch.Tensor], None] = _leave_input,
             apply: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor] = _scaled,
             shortcut: Callable[[torch.Tensor, float], torch.Tensor | None] = _no_shortcut) -> torch.Tensor:
    early = shortcut(x, p)
    if early is not None:
        return early
    mask = keep_mask(x, p, generator(x, seed))
    y = _MaskedScale.apply(x, mask, scale(p), backward_mask(x, p, seed, mask), backward_scale(p), apply)
    after(x, y)
    return y


# --- bug rules --------------------------------------------------------------------------------------------------


def _no_rescale(p: float) -> float:
    """Dropout without rescaling: kept elements are x, not x/(1 - p), so E[y] = (1 - p) x. Must fail
    dropout.values."""
    return 1.0


def _keep_probability_p(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """Keep and drop probability swapped: keeps with probability p (u < p) but still scales by 1/(1 - p)
    (indistinguishable only at p = 1/2). Must fail dropout.keep_rate."""
    return torch.rand(x.shape, generator=generator, device=x.device) < p


def _unseeded_generator(x: torch.Tensor, seed: int) -> torch.Generator:
    """The seed is ignored: the generator is seeded from the OS, so the same seed gives another mask every
    call. Must fail dropout.determinism."""
    generator = torch.Generator(device=x.device)
    generator.seed()
    return generator


def _mask_per_row(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """One mask value per row broadcast over the row (mask shape [..., 1] instead of x.shape): whole rows
    are kept or dropped, so E[Var(z)] - Var(x) = p/(1 - p) Var(x) instead of p(d-1)/(d(1-p)) (v + mu^2).
    Every value is 0 or x/(1 - p) and the expected keep rate is right. Must fail dropout.variance_bias."""
    return torch.rand((*x.shape[:-1], 1), generator=generator, device=x.device) >= p


def _result_written_into_input(x: torch.Tensor, y: torch.Tensor) -> None:
    """The result is also written into the input's buffer (an in-place variant's ``out=x`` left in):
    the caller's x is overwritten. Must fail dropout.inputs_unmodified."""
    x.detach().copy_(y.detach())


def _identity_below_a_tenth(p: float) -> float:
    """Returns x unchanged for p < 0.1 (the range used in practice): no element dropped, no rescaling; right
    for p >= 0.1. Must fail dropout.keep_rate (p below 0.1 is drawn)."""
    return 1.0 if p < 0.1 else _inverted_scale(p)


def _keep_all_below_a_tenth(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """The mask of :func:`_identity_below_a_tenth`: every element kept for p < 0.1."""
    return torch.ones_like(x, dtype=torch.bool) if p < 0.1 else _keep_mask(x, p, generator)


def _float_scale(p: float) -> float:
    """1/(1 - p) as a float without the p = 1 case: inf at p = 1, so the dropped elements are 0 * inf = NaN.
    Must fail dropout.edge_probabilities."""
    return 1.0 / (1.0 - p) if p < 1.0 else float("inf")


def _backward_float_scale(p: float) -> float:
    """The backward's 1/(1 - p) without the p = 1 case its forward has (pytorch/pytorch#75288: native_dropout's
    ``p == 1 ? 0 : 1/(1-p)`` is needed in both directions): the forward returns zeros at p = 1, the backward
    dy * mask * inf, 0 * inf = NaN. Must fail dropout.edge_probabilities."""
    return _float_scale(p)


def _row_index_in_16_bits(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """Each row's uniforms drawn at its row index kept in 16 bits (a uint16 counter, a grid's y dimension wrapped):
    row r gets the mask of row r mod 65 536, so rows past 65 535 repeat the first rows' masks. Must fail
    dropout.independence (its rows r and r + 65 536 of narrow rows)."""
    rows = x.reshape(-1, x.shape[-1]).shape[0] if x.dim() else 1
    drawn = torch.rand((min(rows, 65_536), x.shape[-1] if x.dim() else 1), generator=generator, device=x.device) >= p
    return drawn[torch.arange(rows, device=x.device) % 65_536].reshape(x.shape)


ELEMENTS_A_PROGRAM = 4096


def _elements_a_program_unguarded(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """The mask of ceil(n / 4096) programs with n / programs elements each, the division unguarded for an empty x
    (pytorch/pytorch#20499: F.dropout's SIGFPE on an empty CUDA tensor): an empty batch raises. Must fail
    dropout.values."""
    programs = -(-x.numel() // ELEMENTS_A_PROGRAM)
    x.numel() // programs  # the bug: ZeroDivisionError where x has no element
    return _keep_mask(x, p, generator)


def _fixed_internal_seed(x: torch.Tensor, seed: int) -> torch.Generator:
    """A fixed internal seed (1234): the seed argument is ignored, every seed gives the same mask (same seed,
    same output still holds). Must fail dropout.seeds."""
    return _seeded_generator(x, 1234)


def _seed_parity(x: torch.Tensor, seed: int) -> torch.Generator:
    """Only seed % 2 reaches the generator: seeds s and s + 2 give the same mask. Must fail dropout.seeds."""
    return _seeded_generator(x, seed % 2)


UNSEEDED_ABOVE = 65536


def _unseeded_when_large(x: torch.Tensor, seed: int) -> torch.Generator:
    """Seeded for small tensors, seeded from the OS above 65 536 elements (a second code path for large
    inputs that forgot the seed): two calls with the same seed differ. Must fail dropout.determinism (at 2^20)."""
    return _unseeded_generator(x, seed) if x.numel() > UNSEEDED_ABOVE else _seeded_generator(x, seed)


def _fixed_count_per_row(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """Exactly round(p d) elements dropped in every row, a uniform random set (sampling without replacement): the
    keep rate is right, the per-row count is not Binomial(d, 1-p). Must fail dropout.mask_distribution and
    dropout.variance_bias."""
    order = torch.rand(x.shape, generator=generator, device=x.device).argsort(dim=-1).argsort(dim=-1)
    return order >= round(p * x.shape[-1])


def _shared_by_blocks(k: int) -> Callable[[torch.Tensor, float, torch.Generator], torch.Tensor]:
    def keep_mask(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
        draws = torch.rand(-(-x.numel() // k), generator=generator, device=x.device) >= p
        return draws.repeat_interleave(k)[: x.numel()].view(x.shape)

    keep_mask.__doc__ = (f"One random number shared by each block of {k} consecutive elements (a vectorized kernel "
                         f"drawing one uniform per {k}-lane vector): the keep rate is right, the bits are not "
                         "independent. Must fail dropout.mask_distribution, dropout.independence and "
                         "dropout.variance_bias.")
    return keep_mask


NEIGHBOUR_COPY = 0.25


def _neighbour_copies(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """Each bit copies its left neighbour with probability 0.25 (a Markov chain along the flattened tensor): keep
    rate right, lag-1 correlation 0.25. Must fail dropout.independence."""
    fresh = (torch.rand(x.numel(), generator=generator, device=x.device) >= p).tolist()
    copy = (torch.rand(x.numel(), generator=generator, device=x.device) < NEIGHBOUR_COPY).tolist()
    for n in range(1, len(fresh)):
        if copy[n]:
            fresh[n] = fresh[n - 1]
    return torch.tensor(fresh, device=x.device).view(x.shape)


def _strided_counters(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """Element (i_0, ..., i_last) draws uniform number sum_a i_a stride_a over the leading dimensions plus i_last,
    assuming the last stride is 1: right for a contiguous x, but on a transposed x (strides (1, n)) row r + 1 is
    row r shifted by one element. Must fail dropout.layout_invariance."""
    index = torch.zeros(x.shape, dtype=torch.long, device=x.device)
    for axis in range(x.dim()):
        positions = torch.arange(x.shape[axis], device=x.device).view([-1 if a == axis else 1 for a in range(x.dim())])
        index = index + positions * (x.stride(axis) if axis < x.dim() - 1 else 1)
    uniforms = torch.rand(int(index.max()) + 1 if index.numel() else 0, generator=generator, device=x.device)
    return uniforms[index] >= p


def _seed_low_16_bits(x: torch.Tensor, seed: int) -> torch.Generator:
    """Seeds its generator with the seed's low 16 bits (the seed packed into a 16-bit field of a launch argument):
    seeds 2^16 apart give the same mask. Must fail dropout.seeds."""
    return torch.Generator(device=x.device).manual_seed(seed & 0xFFFF)


def _seed_low_31_bits(x: torch.Tensor, seed: int) -> torch.Generator:
    """Seeds its generator with the seed's low 31 bits (an int32 launch argument's sign bit masked off): seeds 2^31
    apart give the same mask. Must fail dropout.seeds."""
    return torch.Generator(device=x.device).manual_seed(seed & 0x7FFFFFFF)


def _rows_seeded_by_index(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """Row r draws from a generator seeded with seed + r (a per-row or per-device seed offset, tt-metal issue 16823):
    each row's mask is i.i.d., but row r of seed s + 1 is row r + 1 of seed s. The seed is the generator's initial
    seed. Must fail dropout.seeds."""
    seed, d = generator.initial_seed(), x.shape[-1]
    rows = [torch.rand(d, generator=torch.Generator(device=x.device).manual_seed(seed + r), device=x.device)
            for r in range(x.numel() // max(d, 1))]
    return (torch.stack(rows) if rows else torch.empty(0, d, device=x.device)).reshape(x.shape) >= p


WIDE_ROW = 2048


def _column_offsets_when_wide(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """Rows of 2048 elements or more draw their random numbers at the column index only (a Triton kernel whose wide
    path forgot ``row * stride`` in the Philox offset): every row gets one mask, right in law row by row. Must fail
    dropout.independence."""
    if x.dim() >= 2 and x.shape[-1] >= WIDE_ROW:
        return (torch.rand(x.shape[-1], generator=generator, device=x.device) >= p).expand(x.shape)
    return _keep_mask(x, p, generator)


def _uniform_in_storage_dtype(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """The uniforms drawn in x's dtype (``torch.rand_like(x)``): in bfloat16 they lie on a grid of 2^-8, so p = 0.001
    drops 1/256 of the elements and p = 0.999 keeps none (float16's grid of 2^-11 is off by less). Must fail
    dropout.keep_rate."""
    return torch.rand(x.shape, generator=generator, device=x.device, dtype=x.dtype) >= p


def _column_offsets_above_4096(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """Rows wider than 4096 elements (a kernel's path of several blocks a row) draw their random numbers at the column
    index only: every row gets one mask. Must fail dropout.independence."""
    if x.dim() >= 2 and x.shape[-1] > 4096:
        return (torch.rand(x.shape[-1], generator=generator, device=x.device) >= p).expand(x.shape)
    return _keep_mask(x, p, generator)


REGENERATED_CHUNK = 2**18


def _regenerated_in_reseeded_chunks(x: torch.Tensor, p: float, seed: int, mask: torch.Tensor) -> torch.Tensor:
    """The backward draws its mask again (nothing stored), one program per 2^18 elements, each seeded with seed +
    its index, where the forward drew one stream: the same mask up to 2^18 elements, another beyond. Must fail
    dropout.gradient (at scale)."""
    if x.numel() <= REGENERATED_CHUNK:
        return mask
    flat = [torch.rand(min(REGENERATED_CHUNK, x.numel() - start), device=x.device,
                       generator=_seeded_generator(x, seed + start // REGENERATED_CHUNK)) >= p
            for start in range(0, x.numel(), REGENERATED_CHUNK)]
    return torch.cat(flat).reshape(x.shape)


def _mask_of_the_next_seed(x: torch.Tensor, p: float, seed: int, mask: torch.Tensor) -> torch.Tensor:
    """The backward draws its mask again, from seed + 1 (a recomputing backward with an off-by-one seed): the
    gradient is not the forward's mask. Must fail dropout.gradient."""
    return _keep_mask(x, p, _seeded_generator(x, seed + 1))


def _unscaled_backward(p: float) -> float:
    """The backward forgets 1/(1 - p): dL/dx = dL/dy * mask. Must fail dropout.gradient."""
    return 1.0


VECTORIZED_WIDTH = 64


def _row_streams_overlap_when_wide(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """Rows of 64 elements or more (a vectorized path; narrower rows take a scalar path whose offsets are right) take
    their uniforms from one stream at row offset r * d/2 instead of r * d: the per-row Philox offset advanced by half
    the draws a row consumes (FlagGems' dropout rewrite to four masks per 128-bit Philox output and its offset
    'nelems rounded up to 4's multiples', flagos-ai/FlagGems#85, #27; xlite-dev/ffpa-attn#166 'fix philox state for
    dropout'). Row r + 1's first d/2 mask bits are row r's last d/2; each row is i.i.d. Bernoulli(1 - p) and one
    column of two rows independent (the same column reads different uniforms). Must fail dropout.independence (its
    rows compared at every shift)."""
    d = x.shape[-1] if x.dim() else 1
    rows = x.numel() // d if d else 0
    if d < VECTORIZED_WIDTH or rows == 0:
        return _keep_mask(x, p, generator)
    offset = d // 2
    stream = torch.rand((rows - 1) * offset + d, generator=generator, device=x.device)
    index = torch.arange(rows, device=x.device).unsqueeze(1) * offset + torch.arange(d, device=x.device)
    return (stream[index] >= p).reshape(x.shape)


def _input_itself_at_p_zero(x: torch.Tensor, p: float) -> torch.Tensor | None:
    """p = 0 short-circuits to ``return input`` (ATen's _dropout_impl: ``if (p == 0 || !train || input.numel() ==
    0) return input;``, pytorch/pytorch#126755): the output is x itself, so a caller that updates it in place (the
    bias-dropout-add of an inference path, ``y += residual``) writes the caller's x. The values are right. Must
    fail dropout.edge_probabilities (the output shares x's storage)."""
    return x if p == 0.0 else None


def _noise_in_storage_dtype(x: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """The mask scaled in x's dtype first, noise = mask.to(x.dtype) * 1/(1 - p), then y = x * noise (ATen's CPU
    _dropout_impl: ``noise.bernoulli_(1 - p); noise.div_(1 - p)``; PaddlePaddle/Paddle#39501 moved float16 dropout
    to a float32 scale): 1/(1 - p) is rounded once to bfloat16 / float16, the same way for every element, a
    systematic bias of the kept values (p = 0.1 in bfloat16: 1.109375 for 1.1111, -0.16 %; p = 0.5: exact), each
    element within the three storage roundings of dropout.values' bound. Must fail dropout.values (the kept values
    are not x/(1-p) rounded once)."""
    return x * (mask.to(x.dtype) * scale)


def _streams_per_thread(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """The mask drawn in torch.get_num_threads() chunks, chunk c from a generator seeded with (seed, c) (an OpenMP
    dropout seeding each thread's engine by its thread number: NervanaSystems/ngraph#3006; oneDNN's dropout RFC,
    uxlfoundation/oneDNN#3939, CPU dropout reproducible only single-threaded): another thread count (another
    machine, OMP_NUM_THREADS, a DataLoader worker) gives another mask for the same (x, p, seed); within one process
    the mask is a function of them. Must fail dropout.determinism (the call repeated under one thread)."""
    n, seed = x.numel(), generator.initial_seed()
    chunk = -(-n // max(1, torch.get_num_threads()))
    parts = [torch.rand(min(chunk, n - start), device=x.device,
                        generator=_seeded_generator(x, (seed * 1_000_003 + c) % 2**63))
             for c, start in enumerate(range(0, n, max(chunk, 1)))]
    return (torch.cat(parts) if parts else torch.empty(0, device=x.device)).reshape(x.shape) >= p


def _key_from_address(x: torch.Tensor, seed: int) -> torch.Generator:
    """The generator keyed with seed XOR x's storage address / 16, not the seed alone (facebookresearch/xformers#173:
    k_dropout used the memory address of the seed tensor as the seed): the same x object and seed give the same
    mask, another buffer holding the same x (a recomputation under activation checkpointing, a replay) another.
    Must fail dropout.determinism (the call repeated on a copy of x)."""
    return _seeded_generator(x, (seed ^ (x.untyped_storage().data_ptr() >> 4)) & (2**63 - 1))


def _keep_by_one_byte(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """Each element's keep decision compares ONE random byte with floor(256 p) (NVIDIA/TransformerEngine#2014:
    "Dropout with 8-bit RNG", packed_le_8bit(random, p_dropout_in_uint32_t); NVIDIA/apex#1614: "Use 8bit comparison
    to generate dropout mask"; ROCm/composable_kernel#903: dropout's random numbers from ushort to uint8): the drop
    probability is quantized to multiples of 1/256, so p = 0.001 never drops (threshold 0), p = 0.999 keeps 1/256 of
    the elements, p = 0.1 drops 25/256. Must fail dropout.keep_rate."""
    draws = torch.randint(0, 256, x.shape, generator=generator, device=x.device)
    return draws >= min(int(p * 256.0), 255)


def _keep_below_a_wrapping_threshold(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """Keep where a 32-bit random number is below uint32(float32(1 - p) * 2^32), 1 - p rounded to float32 (the
    32-bit keep threshold of fused dropout kernels: NVIDIA/cudnn-frontend#875's keep_threshold32 at the end of the
    float32 range, NVIDIA/TransformerEngine#2014's p_dropout_in_uint32_t): for 0 < p < 2^-25 float32(1 - p) is 1.0
    and the threshold 2^32 wraps to 0, so EVERY element is dropped instead of almost none (p = 0 is special-cased
    and right, every ordinary p too): a dropout schedule annealed towards 0 zeroes the whole activation on its way.
    Must fail dropout.keep_rate."""
    if p == 0.0:
        return torch.ones(x.shape, dtype=torch.bool, device=x.device)
    threshold = int(torch.tensor(1.0 - p, dtype=torch.float32).item() * 2.0**32) % 2**32  # the bug: wraps to 0
    return torch.randint(0, 2**32, x.shape, generator=generator, device=x.device) < threshold


def _kept_as_bitwise_not(x: torch.Tensor, p: float, seed: int, mask: torch.Tensor) -> torch.Tensor:
    """The mask saved as a uint8 byte per element of the DROPPED ones, the backward's kept mask taken as ~dropped, a
    bitwise NOT of a uint8 (255 where kept, 254 where dropped) instead of a logical one (lvzhaoyang/
    DeeperInverseCompositionalAlgorithm#5: "After pytorch 1.3, the not operation for 0 in uint type is 255, instead
    of 1"): dx = dy (255 or 254) / (1 - p). Must fail dropout.gradient, dropout.layout_invariance."""
    dropped = (~mask).to(torch.uint8)
    return ~dropped


# --- kernels ----------------------------------------------------------------------------------------------------


def _backward_scale_in_half(p: float) -> float:
    """The mask saved for the backward pre-multiplied by 1/(1 - p) in float16, to halve the saved bytes (a fused
    bias-dropout-add in the style of Megatron's and apex's keeping ``mask * scale`` in the half dtype): the backward's
    scale is fl16(1/(1 - p)), off by up to 2^-11 relative on every kept element of float32 (and bfloat16) x. Must
    fail dropout.gradient."""
    return float(torch.tensor(_inverted_scale(p), dtype=torch.float16))


def _mask_from_the_ratio(x: torch.Tensor, p: float, seed: int, mask: torch.Tensor) -> torch.Tensor:
    """No mask kept: the backward recovers it as the ratio of output to input, y / x = mask / (1 - p) where x != 0 and
    1 (dL/dx = dL/dy) where x == 0 (kaldi-asr/kaldi#3890: "if in_value == 0 then in_deriv = out_deriv else in_deriv =
    out_value / in_value * out_deriv"; the output-inspecting gradient of ROCm/tensorflow-upstream#1008/#1012): wherever
    x is exactly 0 (after a ReLU, padding, pruned rows) a dropped element gets dy and a kept one dy, not dy / (1 - p)
    (at p = 1, with no scale to divide by, those elements are dropped as the others). Must fail dropout.gradient (x
    with exact zeros)."""
    scale = _inverted_scale(p)
    return torch.where(x == 0, 1.0 / scale if scale else 0.0, mask.to(torch.float32))


def _memory_offsets(t: torch.Tensor) -> torch.Tensor:
    """Each element's offset in t's storage from its first element, sum_a i_a stride_a (the pointer offsets a strided
    kernel loads with); for a contiguous t, its index in memory order."""
    offsets = torch.zeros(t.shape, dtype=torch.long, device=t.device)
    for axis in range(t.dim()):
        positions = torch.arange(t.shape[axis], device=t.device).view([-1 if a == axis else 1 for a in range(t.dim())])
        offsets = offsets + positions * t.stride(axis)
    return offsets


def _keyed_by_memory_offsets(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """The forward's uniforms keyed by x's memory offsets (Triton's ``tl.rand(seed, offsets)`` with the offsets it
    loads x with): element i draws uniform number offset_i of one stream; a contiguous x gets the correct mask."""
    offsets = _memory_offsets(x)
    uniforms = torch.rand(int(offsets.max()) + 1 if offsets.numel() else 0, generator=generator, device=x.device)
    return uniforms[offsets] >= p


def _regenerated_at_contiguous_offsets(x: torch.Tensor, p: float, seed: int, mask: torch.Tensor) -> torch.Tensor:
    """The backward regenerates the mask from (seed, offsets) of the contiguous dy/dx it reads and writes, while the
    forward keyed it by x's own memory offsets (:func:`_keyed_by_memory_offsets`; pytorch/pytorch#47176, fixed by
    #47552: the fused dropout's mask offsets computed for the wrong layout of a non-contiguous input): for a
    transposed or sliced x the backward drops other elements than the forward did. Must fail
    dropout.layout_invariance (the gradient of a strided x)."""
    return _keep_mask(x, p, _seeded_generator(x, seed))


def _kernel(name: str, description: str, **rule: Callable) -> Kernel:
    def dropout(x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
        return _dropout(x, p, seed, **rule)

    return Kernel(name, "dropout", dropout, spec=SPEC + name.upper(), description=" ".join(description.split()))


DROPOUT_BERNOULLI = _kernel("dropout_bernoulli", "Correct inverted dropout, seeded generator of its own (control).")
DROPOUT_NO_RESCALE = _kernel("dropout_no_rescale", _no_rescale.__doc__, scale=_no_rescale)
DROPOUT_KEEP_DROP_SWAPPED = _kernel("dropout_keep_drop_swapped", _keep_probability_p.__doc__,
                                    keep_mask=_keep_probability_p)
DROPOUT_SEED_IGNORED = _kernel("dropout_seed_ignored", _unseeded_generator.__doc__, generator=_unseeded_generator)
DROPOUT_MASK_PER_ROW = _kernel("dropout_mask_per_row", _mask_per_row.__doc__, keep_mask=_mask_per_row)
DROPOUT_INPUT_OVERWRITTEN = _kernel("dropout_input_overwritten", _result_written_into_input.__doc__,
                                    after=_result_written_into_input)
DROPOUT_IDENTITY_BELOW_A_TENTH = _kernel("dropout_identity_below_a_tenth", _identity_below_a_tenth.__doc__,
                                         keep_mask=_keep_all_below_a_tenth, scale=_identity_below_a_tenth)
DROPOUT_NAN_AT_ONE = _kernel("dropout_nan_at_one", _float_scale.__doc__, scale=_float_scale)
DROPOUT_BACKWARD_NAN_AT_ONE = _kernel("dropout_backward_nan_at_one", _backward_float_scale.__doc__,
                                      backward_scale=_backward_float_scale)
DROPOUT_ROW_INDEX_IN_16_BITS = _kernel("dropout_row_index_in_16_bits", _row_index_in_16_bits.__doc__,
                                       keep_mask=_row_index_in_16_bits)
DROPOUT_EMPTY_BATCH_RAISES = _kernel("dropout_empty_batch_raises", _elements_a_program_unguarded.__doc__,
                                     keep_mask=_elements_a_program_unguarded)
DROPOUT_FIXED_INTERNAL_SEED = _kernel("dropout_fixed_internal_seed", _fixed_internal_seed.__doc__,
                                      generator=_fixed_internal_seed)
DROPOUT_SEED_PARITY = _kernel("dropout_seed_parity", _seed_parity.__doc__, generator=_seed_parity)
DROPOUT_UNSEEDED_WHEN_LARGE = _kernel("dropout_unseeded_when_large", _unseeded_when_large.__doc__,
                                      generator=_unseeded_when_large)
DROPOUT_FIXED_COUNT_PER_ROW = _kernel("dropout_fixed_count_per_row", _fixed_count_per_row.__doc__,
                                      keep_mask=_fixed_count_per_row)
DROPOUT_BLOCKS_OF_2 = _kernel("dropout_blocks_of_2", _shared_by_blocks(2).__doc__, keep_mask=_shared_by_blocks(2))
DROPOUT_BLOCKS_OF_4 = _kernel("dropout_blocks_of_4", _shared_by_blocks(4).__doc__, keep_mask=_shared_by_blocks(4))
DROPOUT_NEIGHBOUR_COPIES = _kernel("dropout_neighbour_copies", _neighbour_copies.__doc__, keep_mask=_neighbour_copies)
DROPOUT_STRIDED_COUNTERS = _kernel("dropout_strided_counters", _strided_counters.__doc__, keep_mask=_strided_counters)
DROPOUT_SEED_LOW_16_BITS = _kernel("dropout_seed_low_16_bits", _seed_low_16_bits.__doc__, generator=_seed_low_16_bits)
DROPOUT_SEED_LOW_31_BITS = _kernel("dropout_seed_low_31_bits", _seed_low_31_bits.__doc__, generator=_seed_low_31_bits)
DROPOUT_ROWS_SEEDED_BY_INDEX = _kernel("dropout_rows_seeded_by_index", _rows_seeded_by_index.__doc__,
                                       keep_mask=_rows_seeded_by_index)
DROPOUT_COLUMN_OFFSETS_WHEN_WIDE = _kernel("dropout_column_offsets_when_wide", _column_offsets_when_wide.__doc__,
                                           keep_mask=_column_offsets_when_wide)
DROPOUT_UNIFORM_IN_STORAGE_DTYPE = _kernel("dropout_uniform_in_storage_dtype", _uniform_in_storage_dtype.__doc__,
                                           keep_mask=_uniform_in_storage_dtype)
DROPOUT_COLUMN_OFFSETS_ABOVE_4096 = _kernel("dropout_column_offsets_above_4096", _column_offsets_above_4096.__doc__,
                                            keep_mask=_column_offsets_above_4096)
DROPOUT_BACKWARD_OTHER_MASK = _kernel("dropout_backward_other_mask", _mask_of_the_next_seed.__doc__,
                                      backward_mask=_mask_of_the_next_seed)
DROPOUT_BACKWARD_REGENERATED_IN_CHUNKS = _kernel("dropout_backward_regenerated_in_chunks",
                                                 _regenerated_in_reseeded_chunks.__doc__,
                                                 backward_mask=_regenerated_in_reseeded_chunks)
DROPOUT_BACKWARD_UNSCALED = _kernel("dropout_backward_unscaled", _unscaled_backward.__doc__,
                                    backward_scale=_unscaled_backward)
DROPOUT_ROW_STREAMS_OVERLAP_WIDE = _kernel("dropout_row_streams_overlap_wide", _row_streams_overlap_when_wide.__doc__,
                                           keep_mask=_row_streams_overlap_when_wide)
DROPOUT_P0_RETURNS_INPUT = _kernel("dropout_p0_returns_input", _input_itself_at_p_zero.__doc__,
                                   shortcut=_input_itself_at_p_zero)
DROPOUT_SCALE_IN_STORAGE_DTYPE = _kernel("dropout_scale_in_storage_dtype", _noise_in_storage_dtype.__doc__,
                                         apply=_noise_in_storage_dtype)
DROPOUT_STREAMS_PER_THREAD = _kernel("dropout_streams_per_thread", _streams_per_thread.__doc__,
                                     keep_mask=_streams_per_thread)
DROPOUT_MASK_SAVED_IN_HALF = _kernel("dropout_mask_saved_in_half", _backward_scale_in_half.__doc__,
                                     backward_scale=_backward_scale_in_half)
DROPOUT_RATIO_BACKWARD = _kernel("dropout_ratio_backward", _mask_from_the_ratio.__doc__,
                                 backward_mask=_mask_from_the_ratio)
DROPOUT_OFFSET_KEYED = _kernel("dropout_offset_keyed", _regenerated_at_contiguous_offsets.__doc__,
                               keep_mask=_keyed_by_memory_offsets, backward_mask=_regenerated_at_contiguous_offsets)
DROPOUT_KEY_FROM_ADDRESS = _kernel("dropout_key_from_address", _key_from_address.__doc__, generator=_key_from_address)
# red-team round 8 (channels and dropout): the keep decision by one byte, a 32-bit threshold wrapping at tiny p, the
# saved uint8 mask inverted bitwise
DROPOUT_8BIT_THRESHOLD = _kernel("dropout_8bit_threshold", _keep_by_one_byte.__doc__, keep_mask=_keep_by_one_byte)
DROPOUT_TINY_P_DROPS_EVERYTHING = _kernel("dropout_tiny_p_drops_everything", _keep_below_a_wrapping_threshold.__doc__,
                                          keep_mask=_keep_below_a_wrapping_threshold)
DROPOUT_UINT8_MASK_NOT = _kernel("dropout_uint8_mask_not", _kept_as_bitwise_not.__doc__,
                                 backward_mask=_kept_as_bitwise_not)
