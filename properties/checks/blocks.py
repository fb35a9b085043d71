"""Checks of LayerNorm kernels against the block claims (proofs/claims/blocks.py):

- ln.contraction: ||J_kernel||_2 (gamma = 1, d >= 3, exact SVD of the Jacobian from d VJPs) is the derived
  1/sqrt(sigma^2 + eps) within ||B||_F, and it is below 1 exactly when sigma^2 + eps > 1 (asserted where the
  derived value is farther from 1 than the slack);
- blocks.jacobians: a Post-LN block with W = aI built from the kernel, g(x) = LN(x + a x), has the Jacobian
  J_{LN, eps/(1+a)^2}(x) (the sublayer's factor 1 + a cancels): the kernel's (1 + a) J(h) at h = (1 + a) x vs the
  derived Jacobian at x with eps/(1 + a)^2, within (1 + a) ||B(h)||_F.

B is the kernel's backward bound (properties.bounds.tolerance) at the input the kernel received.
"""

from __future__ import annotations

import numpy as np
import torch

from core.capabilities import dtype_name
from proofs import oracles
from properties import norms, outcome
from properties.bounds import tolerance


def _measured_jacobian(kernel, row: torch.Tensor, eps: float) -> tuple[np.ndarray, float]:
    """(J of the kernel at ``row`` [1, d] from d VJPs, gamma = 1; the Frobenius norm of its element bounds)."""
    d = row.shape[-1]
    copies = row.expand(d, d).contiguous()
    identity = torch.eye(d, dtype=row.dtype, device=row.device)
    jacobian = norms.as_float64(norms.vjp(kernel, copies, None, None, eps, identity)["x"])
    slack = float(tolerance.of_matrix_norm(tolerance.backward(kernel, copies, None, eps, identity)["x"]))
    return jacobian, slack


def check_contraction(kernel, x: torch.Tensor, eps: float) -> None:
    """||J_kernel(x)||_2 = 1/sqrt(sigma^2 + eps), on the derived side of 1."""
    jacobian, slack = _measured_jacobian(kernel, x[:1], eps)
    measured = float(np.linalg.norm(jacobian, 2))
    derived = float(oracles.layernorm_spectral_norm(norms.as_float64(x[:1]), eps)[0])
    radicand = float(np.var(norms.as_float64(x[:1]))) + eps
    comparisons = [outcome.compare(measured, derived, slack, "||J||_2 vs 1/sqrt(sigma^2 + eps)")]
    if abs(derived - 1.0) > slack:
        contracts = radicand > 1.0
        side = "sigma^2 + eps > 1" if contracts else "sigma^2 + eps < 1"
        comparisons.append(outcome.compare(float((measured < 1.0) != contracts), 0.0, 0.0, f"contraction ({side})"))
    outcome.conclude(comparisons, "the kernel's Jacobian does not contract exactly when sigma^2 + eps > 1",
                     sigma2=radicand - eps, eps=eps, measured=measured, derived=derived, d=x.shape[-1],
                     dtype=dtype_name(x.dtype))


def check_post_ln_scaled_block(kernel, x: torch.Tensor, eps: float, a: float) -> None:
    """(1 + a) J_kernel((1 + a) x) = J_{eps/(1+a)^2}(x): the Post-LN block with W = aI, x the rounded input."""
    h = x[:1] * (1 + a)  # exact: a is chosen so that (1 + a) is a power of two
    jacobian, slack = _measured_jacobian(kernel, h, eps)
    derived = oracles.layernorm_jacobian(norms.as_float64(x[:1]), None, eps / (1 + a) ** 2)[0]
    comparison = outcome.compare(float(np.linalg.norm((1 + a) * jacobian - derived, 2)), 0.0, (1 + a) * slack,
                                 "||(1+a) J(h) - J_{eps/(1+a)^2}(x)||_2")
    outcome.conclude(comparison, "the Post-LN block's Jacobian is not the LN Jacobian with eps/(1+a)^2",
                     d=x.shape[-1], dtype=dtype_name(x.dtype))
