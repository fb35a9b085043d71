"""How much of its forward bound a kernel uses, on the suite's own row distributions (scripts/tightness.py prints the
table of docs/tightness.md; tests/test_tightness.py pins its floor and ceiling)."""

from __future__ import annotations

import numpy as np
import torch

from core.registry import Kernel
from properties import norms, outcome
from properties.bounds import tolerance
from properties.draws.strategies import DISTRIBUTIONS, resolved_offset_ratio, standard_values, values_one_ulp_apart

GROUP = 4  # rows per bound evaluation, as the suite's examples (strategies.row_counts)


def suite_rows(d: int, mean_over_std: float, dtype: torch.dtype, rows: int, seed: int,
               one_ulp_apart: bool = False) -> torch.Tensor:
    """``rows`` rows of width d from the suite's distributions in turn (strategies.DISTRIBUTIONS, structured ones
    included), shifted by +-mean_over_std times their spread, rounded to dtype; with ``one_ulp_apart``, 16-bit rows
    beyond what they resolve one ulp apart instead, as ln/rms.forward's one-ulp test draws them (strategies)."""
    parts = []
    for k in range(rows):
        if one_ulp_apart and mean_over_std > resolved_offset_ratio(dtype):
            parts.append(values_one_ulp_apart(1, d, mean_over_std * (-1) ** k, 1.0, dtype, seed + k))
            continue
        z = standard_values((1, d), DISTRIBUTIONS[k % len(DISTRIBUTIONS)], seed + k)
        parts.append(mean_over_std * (float(z.std(correction=0)) or 1.0) * (-1) ** k + z)
    return torch.cat(parts).to(dtype)


def row_ratios(kernel: Kernel, x: torch.Tensor, eps: float = 1e-5, model: str | None = None,
               scale: float = 1.0) -> np.ndarray:
    """max_i |y_i - oracle_i| / (scale B_i) per row, B the forward bound (``model``, default the run's) evaluated on
    groups of GROUP rows; NaN for a row whose bound is not finite (the suite never draws such a row)."""
    got = norms.forward(kernel, x, None, None, eps)
    bound = np.concatenate([tolerance.forward(kernel, part, None, None, eps, model=model) for part in x.split(GROUP)])
    ratio = outcome.ratios(got, norms.reference(kernel, x, None, None, eps), bound * scale).max(axis=-1)
    return np.where(np.isfinite(bound).all(axis=-1), ratio, np.nan)
