"""Inverted dropout in Triton, with a counter-based RNG (Philox, ``tl.rand``).

    y_i = x_i / (1 - p)  if u_i >= p,   else 0,        u_i = rand(seed, i) uniform in [0, 1)

so each element is kept with probability 1 - p and E[y_i] = x_i. ``u_i`` depends only on the seed and
the element's index i in row-major order of x's shape, not on x's memory layout or values: the same
seed gives the same mask, and the backward pass is the same kernel applied to the upstream gradient.
p = 0 returns x unchanged (as a copy), p = 1 returns zeros. Storage float32/float16/bfloat16, the
scaling computed in float32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels import rows

# Elements per program: 1024 on CUDA (4 warps, 8 per thread); larger under the interpreter, whose cost is per
# program and per operation (Philox is ~100 of them), not per element.
BLOCK = {"cuda": 1024, "cpu": 16384}
SEED_MODULUS = 2**64  # Philox keys are 64 bits: seeds are taken modulo 2^64


@triton.jit
def dropped_out(
    values,  # float32 tensor: what is dropped out
    index,  # int64 tensor of values' shape: each element's row-major index i in the dropped tensor
    p,  # float32: drop probability
    scale,  # float32: 1/(1 - p)
    seed,  # int: Philox seed, mod 2^64
):
    """values_i / (1 - p) where rand(seed, i) >= p, else 0, in float32: the mask of every kernel that drops out (this
    module's, the fused add + norm's forward and the backward's regeneration of it), one definition."""
    keep = tl.rand(seed, index) >= p  # u_i = rand(seed, i), uniform in [0, 1): depends on seed and i only
    return tl.where(keep, values * scale, 0.0)


@triton.jit
def _dropout(
    X,  # pointer to the input x, flattened and contiguous, float32/float16/bfloat16
    Y,  # pointer to the output y, flattened and contiguous, X's dtype
    n_elements,  # int: elements of X
    p,  # float32: drop probability, in [0, 1]
    scale,  # float32: 1/(1 - p), the kept values' scale (0 for p = 1)
    seed,  # int: Philox seed, taken mod 2^64
    BLOCK: tl.constexpr,  # int, power of two: elements per program
):
    """One program per block of BLOCK consecutive elements."""
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)  # int64: the row-major element index i
    mask = offsets < n_elements  # the last block is partial when BLOCK does not divide n_elements
    x = tl.load(X + offsets, mask=mask, other=0.0).to(tl.float32)
    y = dropped_out(x, offsets, p, scale, seed)  # the scaling in float32
    tl.store(Y + offsets, y.to(Y.dtype.element_ty), mask=mask)  # rounded once to X's dtype


def dropout(x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
    """Inverted dropout of ``x`` with drop probability ``p`` in [0, 1], deterministic for ``seed`` (an int)."""
    rows.check_tensor("dropout", "x", x)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"dropout: seed must be an int, not {type(seed).__name__}")
    x_flat = x.contiguous().view(-1)
    y = x.new_empty(x.shape)  # returned itself, not a view: a view made in an autograd Function cannot be written
    if y.numel():
        scale = 0.0 if p == 1.0 else 1.0 / (1.0 - p)
        block = BLOCK[x.device.type]
        rows.launch(_dropout, (-(-x_flat.numel() // block),),
                    x_flat, y.view(-1), x_flat.numel(), float(p), scale, seed % SEED_MODULUS, BLOCK=block,
                    num_warps=4)
    return y
