"""ln.forward / rms.forward: the kernel's output is the float64 oracle's on the same rounded inputs,
within the error-model bound (properties.tolerance), for every width, dtype, weight and eps; or, for a kernel
that declares conventions, within their derived model (properties.diagnosis). A failure names the mechanisms
that explain it."""

from __future__ import annotations

import torch

from core.capabilities import dtype_name
from core.results import SERIES
from properties import diagnosis, norms, outcome, tolerance


def check_forward(kernel, x: torch.Tensor, weight, eps: float, bias=None) -> None:
    """|kernel(x) - oracle(x)| <= forward bound, elementwise."""
    got = norms.forward(kernel, x, weight, bias, eps)
    expected, bound, declared = diagnosis.expected_forward(kernel, x, weight, bias, eps)
    comparison = outcome.compare(got, expected, bound, "output")
    kappa = float(tolerance.condition_number(x, eps).max())
    model = f"the declared {' and '.join(declared)} model" if declared else "the exact normalization"
    outcome.conclude(comparison, f"the output is farther from {model} than rounding explains "
                                 f"(row condition number {kappa:.3g})",
                     diagnose=diagnosis.of_forward(kernel, x, weight, bias, eps, got),
                     **SERIES["ratio"].point(kappa=kappa), d=x.shape[-1], dtype=dtype_name(x.dtype),
                     **diagnosis.declared_point(declared))
