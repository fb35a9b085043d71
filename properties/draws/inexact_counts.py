"""Counts of elements a 16-bit float cannot hold, for the rows of statistics of the kinds over x [N, C, *].

float16 holds every integer up to 2^11 = 2048, bfloat16 up to 2^8 = 256; past them only every 2nd, 4th... A kernel
that keeps a row's count n in x's 16-bit dtype (pytorch/pytorch#70901, fixed in PR #71050: the counts of
batch_norm_gather_stats_with_counts in half) divides the row's sums by fl(n) = n (1 + delta): its mean is off by
|mean| |delta|, which on rows of |mean|/std = OFFSET_RATIO is OFFSET_RATIO |delta| in units of std, y's own scale.
The counts here are rounded by about the dtype's unit roundoff u (|delta| near u), so that y misses by about
OFFSET_RATIO u, OFFSET_RATIO times the one rounding of y that a correct kernel's forward bound mostly consists of. Every
count a 16-bit draw takes elsewhere (at most 1008, or 4608 = 144 x 32) is exact in both dtypes.
"""

from __future__ import annotations

import torch

from core.boundary import HOST

# n = a b with the factors each kind spreads over its axes (a: samples, b: spatial elements, for BatchNorm's N S):
# float16: 2049 = 3 x 683, halfway between 2048 and 2050, rounds to 2048 (|delta| = 4.9e-4 = u_16);
# bfloat16: 259 = 7 x 37, halfway between 258 and 260, rounds to 260 (|delta| = 3.9e-3 = u_bf16)
INEXACT_COUNT_FACTORS = {torch.float16: (3, 683), torch.bfloat16: (7, 37)}
SIXTEEN_BIT = tuple(INEXACT_COUNT_FACTORS)
OFFSET_RATIO = 10.0  # |mean|/std of the rows: the count's error shows as OFFSET_RATIO |delta| std in y


def inexact_count(dtype: torch.dtype) -> tuple[int, int]:
    """(a, b) with n = a b a count ``dtype`` cannot hold, rounded by about its unit roundoff."""
    a, b = INEXACT_COUNT_FACTORS[dtype]
    n = a * b
    assert float(torch.tensor(float(n), dtype=dtype, device=HOST)) != n
    return a, b
