"""ln.affine / rms.affine: LN_eps(a x + b 1) = sign(a) LN_{eps/a^2}(x) and RMS_eps(a x) = sign(a) RMS_{eps/a^2}(x)
for a != 0; for a = 0 the row is constant (LN) or zero (RMS) and the output is 0 (no weight, no bias).

The kernel is called on both sides (so an eps argument it ignores, or eps outside the root, shows).
a x + b is rounded to the storage dtype, so the kernel's difference of the two sides is compared with the
oracle's difference on the same rounded inputs, within the sum of both forward bounds.
"""

from __future__ import annotations

import math

import torch

from core.capabilities import dtype_name
from properties import norms, outcome
from properties.bounds import tolerance


def check_affine(kernel, x: torch.Tensor, transformed: torch.Tensor, a: float, eps: float) -> None:
    """kernel(transformed, eps) - sign(a) kernel(x, eps/a^2) matches the oracle's difference (a = 0: kernel = 0)."""
    left = norms.as_float64(norms.forward(kernel, transformed, None, None, eps))
    expected = norms.reference(kernel, transformed, None, None, eps)
    bound = tolerance.forward(kernel, transformed, None, None, eps)
    if a != 0:
        right_eps = eps / a**2
        right = math.copysign(1.0, a) * norms.as_float64(norms.forward(kernel, x, None, None, right_eps))
        left = left - right
        expected = expected - math.copysign(1.0, a) * norms.reference(kernel, x, None, None, right_eps)
        bound = bound + tolerance.forward(kernel, x, None, None, right_eps)
    outcome.conclude(outcome.compare(left, expected, bound, f"N_eps(a x + b) - sign(a) N_(eps/a^2)(x), a = {a:g}"),
                     "scaling the input is not the same as rescaling eps: eps is used differently",
                     d=x.shape[-1], dtype=dtype_name(x.dtype), eps=eps)
