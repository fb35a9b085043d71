"""ln.mean_stability: with a constant gamma (or none) the row mean of LN(x) is mean(beta), whatever x;
ln.shift_invariance: LN(x + c 1) = LN(x).

Both are checked on the kernel's own outputs. The mean is a sum of outputs, off by at most the mean of
their bounds. For the shift, x + c is rounded to the storage dtype, so the two inputs differ by more
than c 1 in general: the kernel's difference is compared with the oracle's difference on the same two
rounded inputs, within the sum of both forward bounds.
"""

from __future__ import annotations

import torch

from core.capabilities import dtype_name
from core.results import SERIES
from properties import norms, outcome
from properties.bounds import tolerance


def check_mean_stability(kernel, x: torch.Tensor, weight, eps: float, bias=None) -> None:
    """mean(kernel(x)) = mean(beta) per row, within mean(forward bound)."""
    got = norms.as_float64(norms.forward(kernel, x, weight, bias, eps)).mean(-1)
    expected = 0.0 if bias is None else float(norms.as_float64(bias).mean())
    bound = tolerance.of_sum(tolerance.forward(kernel, x, weight, bias, eps)) / x.shape[-1]
    outcome.conclude(outcome.compare(got, expected, bound, "row mean of the output"),
                     "the output's row mean moves with the input (the mean is not removed exactly)",
                     d=x.shape[-1], dtype=dtype_name(x.dtype))


def check_shift_invariance(kernel, x: torch.Tensor, shifted: torch.Tensor, weight, eps: float, bias=None) -> None:
    """kernel(shifted) - kernel(x) = oracle(shifted) - oracle(x), within the sum of both forward bounds."""
    difference = (norms.as_float64(norms.forward(kernel, shifted, weight, bias, eps))
                  - norms.as_float64(norms.forward(kernel, x, weight, bias, eps)))
    expected = norms.reference(kernel, shifted, weight, bias, eps) - norms.reference(kernel, x, weight, bias, eps)
    bound = tolerance.forward(kernel, shifted, weight, bias, eps) + tolerance.forward(kernel, x, weight, bias, eps)
    kappa = float(tolerance.condition_number(shifted, eps).max())
    outcome.conclude(outcome.compare(difference, expected, bound, "LN(x + c) - LN(x)"),
                     f"adding a constant to the row changes the output (shifted row condition number {kappa:.3g})",
                     **SERIES["ratio"].point(kappa=kappa), d=x.shape[-1], dtype=dtype_name(x.dtype))
