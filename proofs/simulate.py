"""Reference LayerNorm/RMSNorm implementations in a chosen numpy dtype, for checking the error model.

Each rounds every operation to ``acc`` (numpy does float32/float16 arithmetic in that dtype) and the
output to ``out``. Reductions: ``sequential`` (left to right), ``pairwise`` (a tree), or ``welford``
(running mean and M2). ``layernorm_one_pass`` is the E[x^2] - E[x]^2 variance the error model rejects.
"""

from __future__ import annotations

import numpy as np


def _numpy_pairwise(values: np.ndarray) -> np.ndarray:
    """numpy's pairwise_sum (numpy/_core/src/umath/loops_utils.h.src), row by row: below 8 terms a running sum; up to
    128, 8 accumulators over every 8th term, a 3-level tree of them, then the remainder one by one; above, two halves
    (the first a multiple of 8 long) summed apart and added."""
    dtype, width = values.dtype.type, values.shape[-1]
    if width < 8:
        return np.add.accumulate(values, axis=-1, dtype=dtype)[..., -1]
    if width > 128:
        half = width // 2 - (width // 2) % 8
        return (_numpy_pairwise(values[..., :half]) + _numpy_pairwise(values[..., half:])).astype(dtype)
    lanes = values[..., :8]
    stop = width - width % 8
    for start in range(8, stop, 8):
        lanes = (lanes + values[..., start:start + 8]).astype(dtype)
    while lanes.shape[-1] > 1:  # ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        lanes = (lanes[..., 0::2] + lanes[..., 1::2]).astype(dtype)
    total = lanes[..., 0]
    for k in range(stop, width):
        total = (total + values[..., k]).astype(dtype)
    return total


def summed(values: np.ndarray, order: str) -> np.ndarray:
    """The row sum (last axis) in the dtype of ``values``, in the given order (``numpy_pairwise``: np.sum's)."""
    dtype = values.dtype.type
    if order == "sequential":
        return np.add.accumulate(values, axis=-1, dtype=dtype)[..., -1]
    if order == "numpy_pairwise":
        return _numpy_pairwise(values)
    if order == "pairwise":
        while values.shape[-1] > 1:
            if values.shape[-1] % 2:
                values = np.concatenate([values, np.zeros_like(values[..., :1])], axis=-1)
            values = (values[..., 0::2] + values[..., 1::2]).astype(dtype)
        return values[..., 0]
    raise ValueError(f"unknown summation order {order!r}")


def lanes_sum(values: np.ndarray, block: int) -> np.ndarray:
    """The row sum (last axis) of kernels/norm.py's statistics under the Triton interpreter (the declared tree
    ``exact_tree="numpy_pow2"``, proofs.reduction): the row zero-padded and folded into min(next_pow2(d), block)
    lanes, added block after block in the dtype of ``values``, then numpy's pairwise sum of the lanes."""
    width = values.shape[-1]
    lanes = min(1 << max(width - 1, 0).bit_length(), block)
    padded = np.concatenate([values, np.zeros((*values.shape[:-1], -width % lanes), values.dtype)], axis=-1)
    folded = padded.reshape(*values.shape[:-1], -1, lanes)
    return _numpy_pairwise(np.add.accumulate(folded, axis=-2, dtype=values.dtype.type)[..., -1, :])


def _welford(row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    dtype = row.dtype.type
    mean = np.zeros(row.shape[:-1], dtype)
    m2 = np.zeros(row.shape[:-1], dtype)
    for n in range(row.shape[-1]):
        value = row[..., n]
        delta = (value - mean).astype(dtype)
        mean = (mean + delta / dtype(n + 1)).astype(dtype)
        m2 = (m2 + delta * (value - mean)).astype(dtype)
    return mean, (m2 / dtype(row.shape[-1])).astype(dtype)


def layernorm_two_pass(x: np.ndarray, eps: float, acc=np.float32, out=np.float32, order: str = "sequential"):
    """Two-pass LN (gamma = 1, beta = 0): mean, then the mean of squared deviations, then rsqrt."""
    row = np.asarray(x).astype(acc)
    width = acc(row.shape[-1])
    if order == "welford":
        mean, var = _welford(row)
    else:
        mean = (summed(row, order) / width).astype(acc)
        centred = (row - mean[..., None]).astype(acc)
        var = (summed((centred * centred).astype(acc), order) / width).astype(acc)
    rstd = (acc(1) / np.sqrt((var + acc(eps)).astype(acc))).astype(acc)
    return ((row - mean[..., None]).astype(acc) * rstd[..., None]).astype(out)


def layernorm_one_pass(x: np.ndarray, eps: float, acc=np.float32, out=np.float32, order: str = "sequential"):
    """One-pass LN: var = E[x^2] - E[x]^2 (clamped at 0), the cancellation-prone variant."""
    row = np.asarray(x).astype(acc)
    width = acc(row.shape[-1])
    mean = (summed(row, order) / width).astype(acc)
    mean_square = (summed((row * row).astype(acc), order) / width).astype(acc)
    var = np.maximum((mean_square - mean * mean).astype(acc), acc(0))
    rstd = (acc(1) / np.sqrt((var + acc(eps)).astype(acc))).astype(acc)
    return ((row - mean[..., None]).astype(acc) * rstd[..., None]).astype(out)


def rmsnorm_reference(x: np.ndarray, eps: float, acc=np.float32, out=np.float32, order: str = "sequential"):
    """RMSNorm (gamma = 1): the mean of squares, then rsqrt."""
    row = np.asarray(x).astype(acc)
    mean_square = (summed((row * row).astype(acc), order) / acc(row.shape[-1])).astype(acc)
    rstd = (acc(1) / np.sqrt((mean_square + acc(eps)).astype(acc))).astype(acc)
    return (row * rstd[..., None]).astype(out)


def adversarial_rows(rng: np.random.Generator, rows: int, width: int, mean_over_std: float, dtype) -> np.ndarray:
    """Rows mean + N(0, 1) with |mean|/std = mean_over_std, rounded to dtype, returned as float64."""
    values = rng.standard_normal((rows, width)) + mean_over_std * rng.choice([-1.0, 1.0])
    return values.astype(dtype).astype(np.float64)


def layernorm_backward(x: np.ndarray, dy: np.ndarray, eps: float, acc=np.float32, order: str = "sequential"):
    """dx of LN (gamma = 1) as kernels compute it: r (g - mean(g) - xhat mean(g xhat)), two-pass statistics."""
    row, upstream = np.asarray(x).astype(acc), np.asarray(dy).astype(acc)
    width = acc(row.shape[-1])
    mean = (summed(row, order) / width).astype(acc)
    centred = (row - mean[..., None]).astype(acc)
    var = (summed((centred * centred).astype(acc), order) / width).astype(acc)
    rstd = (acc(1) / np.sqrt((var + acc(eps)).astype(acc))).astype(acc)
    normalized = (centred * rstd[..., None]).astype(acc)
    first = (summed(upstream, order) / width).astype(acc)
    second = (summed((upstream * normalized).astype(acc), order) / width).astype(acc)
    inner = ((upstream - first[..., None]).astype(acc) - (normalized * second[..., None]).astype(acc)).astype(acc)
    return (inner * rstd[..., None]).astype(acc)
