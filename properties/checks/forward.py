"""ln.forward / rms.forward: the kernel's output is the float64 oracle's on the same rounded inputs,
within the error-model bound (properties.tolerance), for every width, dtype, weight and eps."""

from __future__ import annotations

import torch

from core.capabilities import dtype_name
from properties import norms, outcome, tolerance


def check_forward(kernel, x: torch.Tensor, weight, eps: float, bias=None) -> None:
    """|kernel(x) - oracle(x)| <= forward bound, elementwise."""
    got = norms.forward(kernel, x, weight, bias, eps)
    bound = tolerance.forward(kernel, x, weight, bias, eps)
    comparison = outcome.compare(got, norms.reference(kernel, x, weight, bias, eps), bound, "output")
    kappa = float(tolerance.condition_number(x, eps).max())
    outcome.conclude(comparison, "the output is farther from the exact normalization than rounding explains "
                                 f"(row condition number {kappa:.3g})",
                     kappa=kappa, d=x.shape[-1], dtype=dtype_name(x.dtype))
