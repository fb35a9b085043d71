"""ln.variance_insensitivity: Var(xhat) = sigma^2 / (sigma^2 + eps) (population variance of the
normalized row), and its sensitivity d Var(xhat) / d sigma^2 = eps / (sigma^2 + eps)^2.

Rows are drawn with sigma^2 between eps/10 and 10 eps, where both are far from trivial.

Value: with y_i off by at most b_i, the centred values y_i - mean(y) are off by at most
beta_i = b_i + mean(b), so the population variance is off by at most (1/d) sum_i (2 |c_i| beta_i + beta_i^2),
c_i the exact centred output.
Sensitivity: for two rows x and a x (sigma^2 = s1 < s2), the secant (V(s2) - V(s1)) / (s2 - s1) equals the
derivative somewhere in [s1, s2]; eps/(s + eps)^2 decreases in s, so it lies in
[sens(s2), sens(s1)]. The kernel's secant may leave that interval by at most (B1 + B2) / (s2 - s1).
"""

from __future__ import annotations

import numpy as np
import torch

from core.capabilities import dtype_name
from proofs import oracles
from properties import norms, outcome
from properties.bounds import tolerance


def _variance_and_bound(kernel, x: torch.Tensor, eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(Var of the kernel's normalized rows, its error bound, sigma^2 of the rows), all per row."""
    got = norms.as_float64(norms.forward(kernel, x, None, None, eps))
    exact = norms.reference(kernel, x, None, None, eps)
    b = tolerance.forward(kernel, x, None, None, eps)
    spread = b + b.mean(-1, keepdims=True)
    centred = exact - exact.mean(-1, keepdims=True)
    bound = np.mean(2 * np.abs(centred) * spread + spread**2, axis=-1)
    return got.var(-1), bound, norms.as_float64(x).var(-1)


def check_normalized_variance(kernel, x: torch.Tensor, eps: float) -> None:
    """Var(kernel(x)) = sigma^2/(sigma^2 + eps) per row within the bound (module docstring)."""
    variance, bound, sigma2 = _variance_and_bound(kernel, x, eps)
    outcome.conclude(outcome.compare(variance, oracles.normalized_variance(sigma2, eps), bound,
                                     "Var of the normalized row"),
                     "the normalized variance is not sigma^2/(sigma^2 + eps): eps enters differently",
                     d=x.shape[-1], dtype=dtype_name(x.dtype), sigma2=float(sigma2.max()), eps=eps)


def check_variance_sensitivity(kernel, x: torch.Tensor, scaled: torch.Tensor, eps: float) -> None:
    """The kernel's secant of Var(xhat) in sigma^2 lies in [sens(s2), sens(s1)] within (B1 + B2)/(s2 - s1)."""
    v1, b1, s1 = _variance_and_bound(kernel, x, eps)
    v2, b2, s2 = _variance_and_bound(kernel, scaled, eps)
    step = s2 - s1
    secant = (v2 - v1) / step
    ends = (oracles.normalized_variance_sensitivity(s1, eps), oracles.normalized_variance_sensitivity(s2, eps))
    low, high = np.minimum(*ends), np.maximum(*ends)
    outcome.conclude(outcome.compare(secant, np.clip(secant, low, high), (b1 + b2) / np.abs(step),
                                     "secant of Var(xhat) in sigma^2 vs eps/(sigma^2+eps)^2"),
                     "the normalized variance does not respond to sigma^2 as derived",
                     d=x.shape[-1], dtype=dtype_name(x.dtype), eps=eps)
