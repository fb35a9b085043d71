"""Broken kernels that are right on the rows, widths, dimensions and layouts the suite drew until a red-team session
wrote their like without seeing this corpus (2026-11-27): each takes a path by a row count of 5 to 64 (a decode
batch, a multiple of 8 rows), a width of 2, 4 or 6 mod 8, 3-D or 4-D x, or a view whose rows are contiguous but
whose batches are not, where the suite drew 1 to 4 rows (or thousands), odd widths, multiples of 8 and powers of two,
2-D x for the forward, and sequence-first views only. Each is the textbook float32 computation, rounded once, but for
its bug; each docstring names the claim that must catch it.

    LN_EVEN_ROWS_STORAGE_AFFINE         a multiple of 8 rows: x_hat rounded to x's dtype, the affine map in it
                                                                                            -> ln.forward
    RMS_DECODE_BATCH_FIXED_EPS          5 to 64 rows: the forward's eps fixed at 1e-6     -> rms.forward
    LN_PAIR_LOOP_TAIL                   d >= 32, d = 2 mod 4: the variance's last pair of columns skipped
                                                                                            -> ln.forward
    RMS_PADDED_VECTOR_DIVISOR           d >= 16, d = 4 mod 8: the mean square divided by d rounded up to 8
                                                                                            -> rms.forward
    RMS_BATCHED_INPUT_DOUBLE_ROUNDING   x of 3 or more dimensions: x_hat rounded before the weight multiply
                                                                                            -> rms.forward
    LN_ROWS_FROM_THE_LAST_STRIDES       x's last two strides (d, 1) but not contiguous: row r read at r * d
                                                                                            -> ln.layout_invariance
    RMS_DY_ROWS_FROM_THE_LAST_STRIDES   the same in the backward, for dy               -> rms.layout_invariance
    ADD_LN_DH_DROPPED_FROM_8_ROWS       8 to 4095 rows: the backward leaves dh out       -> add_ln.jacobian
    LN_WIDE_PAIRWISE_MERGE_DROPS_THE_ODD_BLOCK  rows wider than 16384: the blocks' statistics merged pairwise, a
                                        round's unpaired block dropped (3 blocks and more)  -> ln.forward

And escapes of that session found in the draws after it (a second backward of one graph on 5 to 65 rows, the
in-place update test in inference mode with parameters in another dtype, weightless mixed-dtype examples, a large
batch's gradients in 16 bits):

    LN_DX_INTO_SAVED_XHAT_FROM_8_ROWS   8 rows or more: the backward writes dx into its saved x_hat (scratch)
                                                                                            -> ln.jacobian
    LN_STALE_CAST_CACHE_IN_INFERENCE    grad mode off: float32 copies of weight and bias in another dtype cached by
                                        address, stale after an in-place update             -> ln.forward
    LN_WEIGHTLESS_BIAS_PROMOTES         no weight: y in promote(x, bias)'s dtype (float32 for 16-bit x)
                                                                                            -> ln.forward
    LN_DWEIGHT_HALF_BLOCK_SUMS          over 256 rows: dweight/dbias summed by 32-row blocks into 16-bit buffers
                                                                                            -> ln.jacobian (at scale)

And of a second red-team session (x of one dimension, NDIMS; batches of 257 to 2049 rows, test_forward_of_a_mid_batch):

    LN_RANK_1_UNSQUEEZED_LAST           x of shape [d]: unsqueezed last, each element normalized alone
                                                                                            -> ln.forward
    LN_MID_BATCH_BIAS_FROM_WEIGHT       257 to 4096 rows: gamma read where beta goes      -> ln.forward
    RMS_WIDE_BLOCK_SQUARES_IN_STORAGE_DTYPE  rows wider than 8192: a block's sum of squares in x's 16-bit dtype
                                        (inf in float16 at scale 30)                      -> rms.forward
    RMS_DWEIGHT_BLOCKS_IN_X_DTYPE_FROM_32768_ROWS  32 768 rows or more of at most 256 columns: dweight by blocks of
                                        16 rows in x's 16-bit dtype (linkedin/Liger-Kernel#950; float32 weight)
                                                                                      -> rms.jacobian (at scale)
    ADD_RMS_DWEIGHT_HALF_BLOCK_SUMS     LN_DWEIGHT_HALF_BLOCK_SUMS of fused add + RMSNorm (its large-batch gradients
                                        were drawn in float32 only)                   -> add_rms.jacobian (at scale)
    RMS_DWEIGHT_ROWS_BEYOND_THE_GRID    dweight over the first 65 535 rows only (the rows beyond weigh 1000 in dy
                                        since: test_many_rows._beyond_the_grid_weighted) -> rms.jacobian (at scale)

And of red-team round 7 (rows): forward row counts of 129 to 256 in inference, parameter gradients of 132 to 4096
rows (test_parameter_gradients_over_many_rows of the plain and the fused kinds):

    RMS_INFERENCE_129_TO_256_ROWS_FIXED_EPS  grad mode off, 129 to 256 rows (a serving bucket): eps fixed at 1e-6
                                        (vllm-project/vllm#48271's kernel by token count)   -> rms.forward
    LN_DWEIGHT_MID_BATCH_FLOOR_BLOCKS   132 to 4096 rows: dweight/dbias over rows // 64 programs of 64 rows, the last
                                        rows % 64 rows left out (Liger-Kernel's rows_per_program floor)
                                                                                            -> ln.jacobian
    ADD_RMS_DWEIGHT_PREFILL_FLOOR_BLOCKS  the same in fused add + RMSNorm for 128 to 4096 rows, 32 a program
                                                                                            -> add_rms.jacobian
"""

from __future__ import annotations

import torch

from core.registry import Kernel

SPEC = "tests/corpus/reach.py:"


def _rows(x: torch.Tensor) -> int:
    return x.numel() // max(1, x.shape[-1])


def _affine(y: torch.Tensor, weight, bias) -> torch.Tensor:
    y = y if weight is None else y * weight.float()
    return y if bias is None else y + bias.float()


def _layernorm(x: torch.Tensor, weight, bias, eps: float) -> torch.Tensor:
    h = x.float()
    mean = h.mean(-1, keepdim=True)
    var = (h - mean).square().mean(-1, keepdim=True)
    return _affine((h - mean) * torch.rsqrt(var + eps), weight, bias).to(x.dtype)


def _rmsnorm(x: torch.Tensor, weight, eps: float) -> torch.Tensor:
    h = x.float()
    return _affine(h * torch.rsqrt(h.square().mean(-1, keepdim=True) + eps), weight, None).to(x.dtype)


class _Norm(torch.autograd.Function):
    """A norm whose forward ``forward(x, weight, bias)`` may be wrong and whose backward is the exact one, from the
    float32 statistics (forward and backward are separate kernels, as in Triton and Apex): a bug of the forward
    alone. ``rows_of_dy(dy)`` is what the backward reads dy through (the identity unless broken); ``sum_rows(t,
    dtype)`` sums the float32 per-row terms of dweight and dbias over the rows into ``dtype`` (unless broken: in
    float32, rounded once)."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps, rms, forward, rows_of_dy, sum_rows):
        h = x.float()
        mean = torch.zeros_like(h[..., :1]) if rms else h.mean(-1, keepdim=True)
        rstd = torch.rsqrt((h - mean).square().mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.rms, ctx.rows_of_dy, ctx.sum_rows = rms, rows_of_dy, sum_rows
        ctx.bias_dtype = None if bias is None else bias.dtype
        return forward(x, weight, bias)

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, rstd = ctx.saved_tensors
        xhat = (x.float() - mean) * rstd
        dy = ctx.rows_of_dy(dy).float()
        g = dy if weight is None else dy * weight.float()
        centred = g - xhat * (g * xhat).mean(-1, keepdim=True)
        dx = rstd * (centred if ctx.rms else centred - g.mean(-1, keepdim=True))
        d = x.shape[-1]
        dweight = None if weight is None else ctx.sum_rows((dy * xhat).reshape(-1, d), weight.dtype)
        dbias = None if ctx.bias_dtype is None else ctx.sum_rows(dy.reshape(-1, d), ctx.bias_dtype)
        return dx.to(x.dtype), dweight, dbias, None, None, None, None, None


def _same(t: torch.Tensor) -> torch.Tensor:
    return t


def _sum_rows(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t.sum(0).to(dtype)


def _rows_from_the_last_strides(t: torch.Tensor) -> torch.Tensor:
    """``t``'s rows as a kernel addressing row r at its storage offset + r * d reads them whenever the last two strides
    are (d, 1): right for a contiguous t, wrong for a view whose outer dimensions are strided (t[:, :S] of a longer
    sequence, a permuted batch dimension)."""
    d = t.shape[-1]
    if t.dim() >= 3 and d and t.stride(-1) == 1 and t.stride(-2) == d and not t.is_contiguous():
        return torch.as_strided(t, (_rows(t), d), (d, 1), t.storage_offset()).reshape(t.shape)
    return t


def layernorm_even_rows_storage_affine(x, weight, bias, eps):
    """LayerNorm whose path for a multiple of 8 rows (no row masks, packed 16-bit arithmetic) rounds x_hat to x's
    dtype and applies weight and bias in it; other row counts and the backward are right. Must fail ln.forward."""
    def forward(x, weight, bias):
        h = x.float()
        mean = h.mean(-1, keepdim=True)
        xhat = (h - mean) * torch.rsqrt((h - mean).square().mean(-1, keepdim=True) + eps)
        if _rows(x) % 8:
            return _affine(xhat, weight, bias).to(x.dtype)
        y = xhat.to(x.dtype)
        y = y if weight is None else y * weight.to(x.dtype)
        return y if bias is None else y + bias.to(x.dtype)

    return _Norm.apply(x, weight, bias, eps, False, forward, _same, _sum_rows)


def rmsnorm_decode_batch_fixed_eps(x, weight, eps):
    """RMSNorm whose decode-batch forward (5 to 64 rows, one warp a row) was built with eps = 1e-6 instead of the
    argument; other row counts and the backward use eps. Must fail rms.forward."""
    def forward(x, weight, _):
        return _rmsnorm(x, weight, 1e-6 if 5 <= _rows(x) <= 64 else eps)

    return _Norm.apply(x, weight, None, eps, True, forward, _same, _sum_rows)


def rmsnorm_inference_129_to_256_rows_fixed_eps(x, weight, eps):
    """RMSNorm whose launcher picks a kernel by token count in inference (vllm-project/vllm#48271: the block size by
    num_tokens; SGLang's and FlashInfer's CUDA-graph batch buckets): with grad mode off, the 129-to-256-token bucket's
    specialization was compiled with eps = 1e-6 baked in (tenstorrent/tt-metal#14222's per-path statistics); other
    row counts, grad mode on and the backward use eps. The forward drew 1 to 65 rows, 257 and more (grad mode on).
    Must fail rms.forward."""
    serving = not torch.is_grad_enabled()  # read outside the Function, whose forward runs with grad mode off

    def forward(x, weight, _):
        return _rmsnorm(x, weight, 1e-6 if serving and 128 < _rows(x) <= 256 else eps)

    return _Norm.apply(x, weight, None, eps, True, forward, _same, _sum_rows)


def layernorm_pair_loop_tail(x, weight, bias, eps):
    """LayerNorm whose two-element vector path (d >= 32, d = 2 mod 4) sums the squared deviations over d // 2 - 1
    pairs, the last pair left out (divided by d all the same); the mean is right. Must fail ln.forward."""
    d = x.shape[-1]
    if d < 32 or d % 4 != 2:
        return _layernorm(x, weight, bias, eps)
    h = x.float()
    mean = h.mean(-1, keepdim=True)
    var = (h[..., : d - 2] - mean).square().sum(-1, keepdim=True) / d
    return _affine((h - mean) * torch.rsqrt(var + eps), weight, bias).to(x.dtype)


def rmsnorm_padded_vector_divisor(x, weight, eps):
    """RMSNorm whose 8-wide vector path (d >= 16, d = 4 mod 8) divides the sum of squares by d rounded up to a
    multiple of 8 (the padded lanes counted). Must fail rms.forward."""
    d = x.shape[-1]
    if d < 16 or d % 8 != 4:
        return _rmsnorm(x, weight, eps)
    h = x.float()
    mean_square = h.square().sum(-1, keepdim=True) / (-(-d // 8) * 8)
    return _affine(h * torch.rsqrt(mean_square + eps), weight, None).to(x.dtype)


def rmsnorm_batched_input_double_rounding(x, weight, eps):
    """RMSNorm whose entry for x of 3 or more dimensions (a module's forward on [B, S, d] activations) rounds x_hat to
    x's dtype before the weight multiply (Llama's casting); 2-D x and the backward are right. Must fail
    rms.forward."""
    def forward(x, weight, _):
        if x.dim() < 3:
            return _rmsnorm(x, weight, eps)
        h = x.float()
        y = (h * torch.rsqrt(h.square().mean(-1, keepdim=True) + eps)).to(x.dtype)
        return y if weight is None else y * weight.to(x.dtype)

    return _Norm.apply(x, weight, None, eps, True, forward, _same, _sum_rows)


def layernorm_rows_from_the_last_strides(x, weight, bias, eps):
    """LayerNorm that reads row r of x at its storage offset + r * d whenever x's last two strides are (d, 1): wrong
    for x[:, :S] of a longer sequence (NaN read past each batch's S rows). Must fail ln.layout_invariance."""
    return _layernorm(_rows_from_the_last_strides(x), weight, bias, eps)


def rmsnorm_dy_rows_from_the_last_strides(x, weight, eps):
    """RMSNorm whose backward reads dy's rows as the forward above reads x's (dy of a sliced or permuted y); the
    forward is right. Must fail rms.layout_invariance."""
    return _Norm.apply(x, weight, None, eps, True, lambda x, weight, _: _rmsnorm(x, weight, eps),
                       _rows_from_the_last_strides, _sum_rows)


class _GradientDropped(torch.autograd.Function):
    """The identity on residual_out whose backward drops the gradient the next layer sends into it."""

    @staticmethod
    def forward(ctx, h: torch.Tensor) -> torch.Tensor:
        return h.clone()

    @staticmethod
    def backward(ctx, dh: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(dh)


def add_layernorm_dh_dropped_from_8_rows(x, residual, weight, bias, eps):
    """Fused add + LayerNorm whose multi-row backward (8 to 4095 rows) leaves out dh, the gradient of residual_out:
    dx = dresidual = J^T dy only. Must fail add_ln.jacobian."""
    h = x + residual
    y = _layernorm(h, weight, bias, eps)
    return y, (_GradientDropped.apply(h) if 8 <= _rows(x) < 4096 else h)


def layernorm_wide_pairwise_merge_drops_the_odd_block(x, weight, bias, eps):
    """LayerNorm of rows wider than one block of 16384: each block's (count, mean, M2) merged pairwise in a tree
    (Chan's update), a round with an odd number of them dropping the unpaired last one (a row of 3 blocks and more).
    Must fail ln.forward."""
    d, block = x.shape[-1], 16384
    if d <= block:
        return _layernorm(x, weight, bias, eps)
    h = x.float()
    states = []
    for start in range(0, d, block):
        part = h[..., start:start + block]
        mean = part.mean(-1, keepdim=True)
        states.append((part.shape[-1], mean, (part - mean).square().sum(-1, keepdim=True)))
    while len(states) > 1:
        merged = []
        for (na, ma, qa), (nb, mb, qb) in zip(states[0::2], states[1::2], strict=False):  # the odd one left out
            n, delta = na + nb, mb - ma
            merged.append((n, ma + delta * nb / n, qa + qb + delta * delta * na * nb / n))
        states = merged
    n, mean, m2 = states[0]
    return _affine((h - mean) * torch.rsqrt(m2 / n + eps), weight, bias).to(x.dtype)


class _DxIntoSavedXhat(torch.autograd.Function):
    """LayerNorm saving x_hat (float32) for its backward, which from 8 rows on writes dx into that saved buffer through
    its storage (the pointer a kernel is given: no version-counter bump) and returns it."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        h = x.float()
        mean = h.mean(-1, keepdim=True)
        rstd = torch.rsqrt((h - mean).square().mean(-1, keepdim=True) + eps)
        xhat = (h - mean) * rstd
        ctx.save_for_backward(xhat, weight, rstd)
        ctx.x_dtype, ctx.bias_dtype = x.dtype, None if bias is None else bias.dtype
        return _affine(xhat, weight, bias).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        xhat, weight, rstd = ctx.saved_tensors
        dy, d = dy.float(), xhat.shape[-1]
        g = dy if weight is None else dy * weight.float()
        dx = rstd * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
        dweight = None if weight is None else (dy * xhat).reshape(-1, d).sum(0).to(weight.dtype)
        dbias = None if ctx.bias_dtype is None else dy.reshape(-1, d).sum(0).to(ctx.bias_dtype)
        if _rows(xhat) >= 8:
            dx = xhat.data.copy_(dx)
        return dx.to(ctx.x_dtype), dweight, dbias, None


def layernorm_dx_into_saved_xhat_from_8_rows(x, weight, bias, eps):
    """LayerNorm whose multi-row backward (8 rows and more) writes dx into the x_hat it saved, as scratch: a second
    backward of the same graph (retain_graph=True) reads the first one's dx as x_hat. Must fail ln.jacobian."""
    return _DxIntoSavedXhat.apply(x, weight, bias, eps)


_CAST_CACHE: dict[tuple, torch.Tensor] = {}


def layernorm_stale_cast_cache_in_inference(x, weight, bias, eps):
    """LayerNorm whose inference path (grad mode off) keeps the float32 copies of a weight and bias in another dtype
    than x, keyed by their address, dtype and size: after an in-place update (an optimizer step, a weight reload)
    it uses the old values. Must fail ln.forward."""
    def cast(t):
        if t is None or t.dtype == x.dtype or torch.is_grad_enabled():
            return t
        return _CAST_CACHE.setdefault((t.data_ptr(), t.dtype, t.shape[0]), t.float().clone())

    return _layernorm(x, cast(weight), cast(bias), eps)


def layernorm_weightless_bias_promotes(x, weight, bias, eps):
    """LayerNorm whose branch without a weight adds the bias in torch's promotion of x's and the bias's dtypes and
    returns that: float32 for 16-bit x with a float32 bias (the output-dtype rule: x's). Must fail ln.forward."""
    if weight is not None or bias is None:
        return _layernorm(x, weight, bias, eps)
    return _layernorm(x, None, None, eps).float().add(bias.float()).to(torch.promote_types(x.dtype, bias.dtype))


def _half_block_sums(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Over 256 rows: float32 sums of 32-row blocks, added one after another into a buffer of ``dtype`` (an atomic
    add on a 16-bit buffer: one rounding per block)."""
    if t.shape[0] <= 256:
        return _sum_rows(t, dtype)
    total = torch.zeros(t.shape[1], dtype=dtype, device=t.device)
    for start in range(0, t.shape[0], 32):
        total = (total.float() + t[start:start + 32].sum(0)).to(dtype)
    return total


def layernorm_dweight_half_block_sums(x, weight, bias, eps):
    """LayerNorm whose backward over more than 256 rows sums dweight and dbias by blocks of 32 rows into buffers of
    their own dtype (float16: one rounding per block); the forward and dx are right. Must fail ln.jacobian (a large
    batch in 16 bits)."""
    return _Norm.apply(x, weight, bias, eps, False, lambda x, weight, bias: _layernorm(x, weight, bias, eps), _same,
                       _half_block_sums)


LIGER_BLOCK_ROWS, LIGER_BLOCK_FROM_ROWS, LIGER_BLOCK_WIDEST = 16, 4096 * 8, 256


def rmsnorm_dweight_blocks_in_x_dtype_from_32768_rows(x, weight, eps):
    """RMSNorm whose backward over 32 768 rows or more of at most 256 columns (Liger-Kernel's block kernel) sums
    dweight by blocks of 16 rows in x's dtype before its float32 accumulator (linkedin/Liger-Kernel#950): one
    16-bit rounding per block, which a float32 weight beside 16-bit x shows. Must fail rms.jacobian (at scale)."""
    def block_sums(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        if x.dtype == torch.float32 or t.shape[0] < LIGER_BLOCK_FROM_ROWS or t.shape[1] > LIGER_BLOCK_WIDEST:
            return _sum_rows(t, dtype)
        blocks = torch.cat([t, t.new_zeros(-t.shape[0] % LIGER_BLOCK_ROWS, t.shape[1])]).to(x.dtype)
        blocks = blocks.reshape(-1, LIGER_BLOCK_ROWS, t.shape[1])
        total = blocks[:, 0]
        for row in range(1, LIGER_BLOCK_ROWS):  # the block's reduction in x's dtype
            total = total + blocks[:, row]
        return total.float().sum(0).to(dtype)

    return _Norm.apply(x, weight, None, eps, True, lambda x, weight, bias: _rmsnorm(x, weight, eps), _same,
                       block_sums)


def add_rmsnorm_dweight_half_block_sums(x, residual, weight, eps):
    """Fused add + RMSNorm whose backward over more than 256 rows sums dweight by blocks of 32 rows into a buffer of
    x's dtype (the fused analogue of LN_DWEIGHT_HALF_BLOCK_SUMS). Must fail add_rms.jacobian (a large batch in 16
    bits)."""
    h = (x.float() + residual.float()).to(residual.dtype)
    return _Norm.apply(h, weight, None, eps, True, lambda h, weight, bias: _rmsnorm(h, weight, eps).to(x.dtype),
                       _same, lambda t, dtype: _half_block_sums(t, x.dtype).to(dtype)), h


def _whole_blocks_of_rows(rows_per_block: int, fewest: int, most: int):
    """sum_rows of a dweight/dbias reduction over a grid of rows // rows_per_block programs of rows_per_block rows (a
    floor, not a ceiling) for ``fewest`` to ``most`` rows: the last rows % rows_per_block rows never summed."""
    def sum_rows(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        if fewest <= t.shape[0] <= most:
            t = t[:t.shape[0] // rows_per_block * rows_per_block]
        return _sum_rows(t, dtype)

    return sum_rows


def layernorm_dweight_mid_batch_floor_blocks(x, weight, bias, eps):
    """LayerNorm whose backward reduces dweight and dbias with a configuration chosen by row count: for 132 to 4096
    rows blocks of 64 rows over rows // 64 programs, the last rows % 64 rows never summed (Liger-Kernel's
    rows_per_program with a floor, as explicit_backward.py's DROP_ADD_DWEIGHT_FLOOR_ROWS_PER_PROGRAM;
    linkedin/Liger-Kernel#950's dW path); the forward and dx are right. Parameter gradients were drawn at 1 to 65,
    67, 131, 4099 and 65 539 rows. Must fail ln.jacobian."""
    return _Norm.apply(x, weight, bias, eps, False, lambda x, weight, bias: _layernorm(x, weight, bias, eps), _same,
                       _whole_blocks_of_rows(64, 132, 4096))


def add_rmsnorm_dweight_prefill_floor_blocks(x, residual, weight, eps):
    """Fused add + RMSNorm whose backward picks its dweight reduction by token count: for 128 to 4096 rows (a
    prefill) a grid of rows // 32 programs of 32 rows, the last rows % 32 rows never summed into dweight (the same
    floor, in the fused kind's own backward); the forward, dx and dresidual are right. The fused kinds' gradients
    were drawn at 1 to 65 rows, 4099 and 65 539. Must fail add_rms.jacobian."""
    h = (x.float() + residual.float()).to(residual.dtype)
    return _Norm.apply(h, weight, None, eps, True, lambda h, weight, bias: _rmsnorm(h, weight, eps).to(x.dtype),
                       _same, _whole_blocks_of_rows(32, 128, 4096)), h


def layernorm_rank_1_unsqueezed_last(x, weight, bias, eps):
    """LayerNorm whose path for x of one dimension (one token, [d]) adds the row dimension last (x.unsqueeze(-1):
    d rows of one element), so every element is normalized alone and y is beta. Must fail ln.forward."""
    if x.dim() != 1:
        return _layernorm(x, weight, bias, eps)
    h = x.float().unsqueeze(-1)
    mean = h.mean(-1, keepdim=True)
    xhat = (h - mean) * torch.rsqrt((h - mean).square().mean(-1, keepdim=True) + eps)
    return _affine(xhat.reshape(x.shape), weight, bias).to(x.dtype)


def layernorm_mid_batch_bias_from_weight(x, weight, bias, eps):
    """LayerNorm whose mid-batch path (257 to 4096 rows, weight and bias given) reads gamma where beta goes: y =
    gamma x_hat + gamma. Must fail ln.forward."""
    if 256 < _rows(x) <= 4096 and weight is not None and bias is not None:
        return _layernorm(x, weight, weight, eps)
    return _layernorm(x, weight, bias, eps)


def _sum_within_the_grid(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The sum over the rows a grid of 65 535 programs reaches: the rows beyond are left out."""
    return _sum_rows(t[:65_535], dtype)


def rmsnorm_dweight_rows_beyond_the_grid(x, weight, eps):
    """RMSNorm whose dweight kernel runs one program per row on a grid axis of at most 65 535: the rows beyond are
    left out of dweight; the forward and dx are right. Must fail rms.jacobian (beyond 65 535 rows)."""
    return _Norm.apply(x, weight, None, eps, True, lambda x, weight, _: _rmsnorm(x, weight, eps), _same,
                       _sum_within_the_grid)


def rmsnorm_wide_block_squares_in_storage_dtype(x, weight, eps):
    """RMSNorm of rows wider than one block of 8192: each block's sum of squares kept in x's dtype (float16: inf
    beyond 65504, e.g. 8192 values of 30), the blocks' sums added in float32. Must fail rms.forward."""
    d, block = x.shape[-1], 8192
    if d <= block or x.dtype == torch.float32:
        return _rmsnorm(x, weight, eps)
    h = x.float()
    total = sum(h[..., start:start + block].square().sum(-1, keepdim=True).to(x.dtype).float()
                for start in range(0, d, block))
    return _affine(h * torch.rsqrt(total / d + eps), weight, None).to(x.dtype)


def _kernel(attr: str, kind: str, fn) -> Kernel:
    return Kernel(attr.lower(), kind, fn, spec=SPEC + attr, dtypes=(torch.float32, torch.float16),
                  description=" ".join(fn.__doc__.split()))


LN_EVEN_ROWS_STORAGE_AFFINE = _kernel("LN_EVEN_ROWS_STORAGE_AFFINE", "layernorm", layernorm_even_rows_storage_affine)
RMS_DECODE_BATCH_FIXED_EPS = _kernel("RMS_DECODE_BATCH_FIXED_EPS", "rmsnorm", rmsnorm_decode_batch_fixed_eps)
LN_PAIR_LOOP_TAIL = _kernel("LN_PAIR_LOOP_TAIL", "layernorm", layernorm_pair_loop_tail)
RMS_PADDED_VECTOR_DIVISOR = _kernel("RMS_PADDED_VECTOR_DIVISOR", "rmsnorm", rmsnorm_padded_vector_divisor)
RMS_BATCHED_INPUT_DOUBLE_ROUNDING = _kernel("RMS_BATCHED_INPUT_DOUBLE_ROUNDING", "rmsnorm",
                                            rmsnorm_batched_input_double_rounding)
LN_ROWS_FROM_THE_LAST_STRIDES = _kernel("LN_ROWS_FROM_THE_LAST_STRIDES", "layernorm",
                                        layernorm_rows_from_the_last_strides)
RMS_DY_ROWS_FROM_THE_LAST_STRIDES = _kernel("RMS_DY_ROWS_FROM_THE_LAST_STRIDES", "rmsnorm",
                                            rmsnorm_dy_rows_from_the_last_strides)
ADD_LN_DH_DROPPED_FROM_8_ROWS = _kernel("ADD_LN_DH_DROPPED_FROM_8_ROWS", "add_layernorm",
                                        add_layernorm_dh_dropped_from_8_rows)
LN_WIDE_PAIRWISE_MERGE_DROPS_THE_ODD_BLOCK = _kernel("LN_WIDE_PAIRWISE_MERGE_DROPS_THE_ODD_BLOCK", "layernorm",
                                                     layernorm_wide_pairwise_merge_drops_the_odd_block)
LN_DX_INTO_SAVED_XHAT_FROM_8_ROWS = _kernel("LN_DX_INTO_SAVED_XHAT_FROM_8_ROWS", "layernorm",
                                            layernorm_dx_into_saved_xhat_from_8_rows)
LN_STALE_CAST_CACHE_IN_INFERENCE = _kernel("LN_STALE_CAST_CACHE_IN_INFERENCE", "layernorm",
                                           layernorm_stale_cast_cache_in_inference)
LN_WEIGHTLESS_BIAS_PROMOTES = _kernel("LN_WEIGHTLESS_BIAS_PROMOTES", "layernorm", layernorm_weightless_bias_promotes)
LN_DWEIGHT_HALF_BLOCK_SUMS = _kernel("LN_DWEIGHT_HALF_BLOCK_SUMS", "layernorm", layernorm_dweight_half_block_sums)
RMS_DWEIGHT_BLOCKS_IN_X_DTYPE_FROM_32768_ROWS = Kernel(
    "rms_dweight_blocks_in_x_dtype_from_32768_rows", "rmsnorm", rmsnorm_dweight_blocks_in_x_dtype_from_32768_rows,
    spec=SPEC + "RMS_DWEIGHT_BLOCKS_IN_X_DTYPE_FROM_32768_ROWS",
    description=" ".join(rmsnorm_dweight_blocks_in_x_dtype_from_32768_rows.__doc__.split()))
ADD_RMS_DWEIGHT_HALF_BLOCK_SUMS = _kernel("ADD_RMS_DWEIGHT_HALF_BLOCK_SUMS", "add_rmsnorm",
                                          add_rmsnorm_dweight_half_block_sums)
LN_RANK_1_UNSQUEEZED_LAST = _kernel("LN_RANK_1_UNSQUEEZED_LAST", "layernorm", layernorm_rank_1_unsqueezed_last)
LN_MID_BATCH_BIAS_FROM_WEIGHT = _kernel("LN_MID_BATCH_BIAS_FROM_WEIGHT", "layernorm",
                                        layernorm_mid_batch_bias_from_weight)
RMS_DWEIGHT_ROWS_BEYOND_THE_GRID = _kernel("RMS_DWEIGHT_ROWS_BEYOND_THE_GRID", "rmsnorm",
                                           rmsnorm_dweight_rows_beyond_the_grid)
RMS_WIDE_BLOCK_SQUARES_IN_STORAGE_DTYPE = _kernel("RMS_WIDE_BLOCK_SQUARES_IN_STORAGE_DTYPE", "rmsnorm",
                                                  rmsnorm_wide_block_squares_in_storage_dtype)
RMS_INFERENCE_129_TO_256_ROWS_FIXED_EPS = _kernel("RMS_INFERENCE_129_TO_256_ROWS_FIXED_EPS", "rmsnorm",
                                                  rmsnorm_inference_129_to_256_rows_fixed_eps)
LN_DWEIGHT_MID_BATCH_FLOOR_BLOCKS = _kernel("LN_DWEIGHT_MID_BATCH_FLOOR_BLOCKS", "layernorm",
                                            layernorm_dweight_mid_batch_floor_blocks)
ADD_RMS_DWEIGHT_PREFILL_FLOOR_BLOCKS = _kernel("ADD_RMS_DWEIGHT_PREFILL_FLOOR_BLOCKS", "add_rmsnorm",
                                               add_rmsnorm_dweight_prefill_floor_blocks)
