"""A broken Triton LayerNorm (forward only) whose padded lanes enter the statistics.

Written like Triton's tutorial 05-layer-norm: one program per row, the row loaded into a power-of-two
block of BLOCK >= d lanes with the lanes past d masked. The bug: the masked lanes are loaded as 0 and the
sums are divided by BLOCK instead of d, so the BLOCK - d padded lanes count as data,

    mean' = sum(x) / BLOCK,     var' = (sum((x - mean')^2) + (BLOCK - d) mean'^2) / BLOCK,

which is right only when d is a power of two. Must fail ln.forward, ln.mean_stability (the output's row
mean is (mean - mean') * rstd' * gamma, not 0) and ln.shift_invariance (the padded zeros do not shift
with x). Compiled on CUDA tensors; on CPU tensors it runs under Triton's interpreter (kernels.interpret).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from core.registry import Kernel
from kernels import interpret


@triton.jit
def _layernorm_forward_padded_lanes(X, Y, W, B, row_stride, N, eps,
                                    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(X + row * row_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / BLOCK  # BUG: divides by BLOCK, not N; the padded zeros count as data
    centred = x - mean  # BUG: not masked back to 0, so the padded lanes add mean^2 each to the variance
    variance = tl.sum(centred * centred, axis=0) / BLOCK
    rstd = 1.0 / tl.sqrt(variance + eps)
    y = centred * rstd
    if HAS_WEIGHT:
        y = y * tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_BIAS:
        y = y + tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(Y + row * row_stride + cols, y.to(Y.dtype.element_ty), mask=mask)


def layernorm_padded_lanes(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                           eps: float) -> torch.Tensor:
    """Padded lanes of the power-of-two block enter the statistics (loaded as 0, sums divided by BLOCK).
    Must fail ln.forward, ln.mean_stability, ln.shift_invariance (d not a power of two)."""
    d = x.shape[-1]
    rows = x.detach().reshape(-1, d).contiguous()
    y = torch.empty_like(rows)
    if rows.device.type == "cpu":
        interpret.enable()
    if rows.numel():
        _layernorm_forward_padded_lanes[(rows.shape[0],)](
            rows, y, rows if weight is None else weight.detach().contiguous(),
            rows if bias is None else bias.detach().contiguous(), rows.stride(0), d, eps,
            HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None, BLOCK=triton.next_power_of_2(d))
    return y.reshape(x.shape)


LN_PADDED_LANES = Kernel(
    "ln_padded_lanes", "layernorm", layernorm_padded_lanes, spec="tests/corpus/padded_block.py:LN_PADDED_LANES",
    dtypes=(torch.float32, torch.float16),
    description=" ".join(layernorm_padded_lanes.__doc__.split()))
