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
def _dropout(
    X,  # input, contiguous, float32/float16/bfloat16
    Y,  # output, contiguous, X's dtype
    n_elements,  # elements of X
    p, scale, seed,  # drop probability, 1/(1 - p) (0 for p = 1), Philox seed (mod 2^64)
    BLOCK: tl.constexpr,  # elements per program
):
    """One program per block of BLOCK consecutive elements."""
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(X + offsets, mask=mask, other=0.0).to(tl.float32)
    keep = tl.rand(seed, offsets) >= p
    y = tl.where(keep, x * scale, 0.0)
    tl.store(Y + offsets, y.to(Y.dtype.element_ty), mask=mask)


def dropout(x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
    """Inverted dropout of ``x`` with drop probability ``p`` in [0, 1], deterministic for ``seed`` (an int)."""
    rows.check_tensor("dropout", "x", x)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"dropout: seed must be an int, not {type(seed).__name__}")
    x_flat = x.contiguous().view(-1)
    y = torch.empty_like(x_flat)
    if y.numel():
        scale = 0.0 if p == 1.0 else 1.0 / (1.0 - p)
        block = BLOCK[x.device.type]
        rows.launch(_dropout, (-(-x_flat.numel() // block),),
                    x_flat, y, x_flat.numel(), float(p), scale, seed % SEED_MODULUS, BLOCK=block, num_warps=4)
    return y.view(x.shape)
