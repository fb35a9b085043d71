"""ln.spectral_norm / rms.spectral_norm: ||dy/dx||_2 of the kernel, measured from its backward, against the
derived value and the bound max|gamma| / sqrt(eps).

Small d: the whole Jacobian from d VJPs (one call on d copies of the row with the identity as upstream
gradient; row i of the result is e_i^T J), then an exact SVD in float64. Its distance to the derived
Jacobian is at most ||B||_F for the element bounds B of the backward (properties.bounds.tolerance.of_matrix_norm).

Large d (matrix-free): power iteration on J^T J with VJPs (J^T w) and JVPs by double VJP
(J v = d/du <J^T u, v>), with per-feature gamma (d = 4096) or gamma = 1; the derived value is exact in both:
||diag(gamma) P|| / s by Lanczos on the derived VJPs (proofs.oracles.weighted_spectral_norm), 1/s for
gamma = 1 (d >= 3), and max|gamma|/sqrt(eps) stays the stated bound. For a unit v with a = J v, b = J^T a,
theta = |a|^2 and r = |b - theta v|, some eigenvalue of J^T J lies within r of theta (symmetric
residual bound), so |sqrt(theta) - sigma| <= r / sqrt(theta) once the iteration has found the top
eigenspace; |a| itself is off by at most the 2-norm of its element bounds.
"""

from __future__ import annotations

import numpy as np
import torch

from core import boundary, guard
from core.capabilities import dtype_name
from core.results import SERIES
from proofs import oracles
from properties import norms, outcome
from properties.bounds import tolerance

POWER_ITERATIONS = 30


def _row_statistics(kernel, x: torch.Tensor) -> float:
    """sigma^2 (LayerNorm) or mean(x^2) (RMSNorm) of the first row, in float64."""
    row = norms.as_float64(x)[0]
    return float(np.var(row) if kernel.record.centred else np.mean(row**2))


def check_spectral_norm(kernel, x: torch.Tensor, weight, eps: float, bias=None) -> None:
    """||J_kernel||_2 (exact SVD) is the derived ||J||_2 within ||B||_F, and at most max|gamma|/sqrt(eps) + ||B||_F."""
    d = x.shape[-1]
    copies = x[:1].expand(d, d).contiguous()
    identity = torch.eye(d, dtype=x.dtype, device=x.device)
    jacobian = norms.as_float64(norms.vjp(kernel, copies, weight, bias, eps, identity)["x"])
    slack = float(tolerance.of_matrix_norm(tolerance.backward(kernel, copies, weight, eps, identity)["x"]))
    measured = float(np.linalg.norm(jacobian, 2))
    if weight is None:
        derived = float(norms.reference_spectral_norm(kernel, x[:1], eps)[0])
    else:
        derived = float(np.linalg.norm(norms.reference_jacobian(kernel, x[:1], weight, eps)[0], 2))
    bound = float(tolerance.spectral_norm_bound(kernel, weight, eps))
    comparisons = [outcome.compare(measured, derived, slack, "||J||_2 vs the derived value"),
                   outcome.compare(max(measured - bound, 0.0), 0.0, slack, "||J||_2 above max|gamma|/sqrt(eps)")]
    outcome.conclude(comparisons, "the kernel's Jacobian does not have the derived spectral norm",
                     **SERIES["spectral"].point(sigma2=_row_statistics(kernel, x), eps=eps, measured=measured,
                                                derived=derived, bound=bound), d=d, dtype=dtype_name(x.dtype))


def _power_iteration(kernel, x: torch.Tensor, weight, eps: float, start: torch.Tensor) -> torch.Tensor:
    """[|a|, theta, r, |J^T a|] after POWER_ITERATIONS steps on J^T J from ``start`` (module docstring)."""
    leaf = x.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        y = norms.forward(kernel, leaf, weight, None, eps)
        probe = torch.zeros_like(y, requires_grad=True)
        (transposed,) = torch.autograd.grad(y, leaf, probe, create_graph=True)

        def jvp(v: torch.Tensor) -> torch.Tensor:
            return torch.autograd.grad(transposed, probe, v, retain_graph=True)[0]

        def vjp(w: torch.Tensor) -> torch.Tensor:
            return torch.autograd.grad(y, leaf, w, retain_graph=True)[0]

        v = start / start.norm()
        for _ in range(POWER_ITERATIONS):
            b = vjp(jvp(v))
            v = b / b.norm()
        a = jvp(v)
        b = vjp(a)
    theta = a.double().norm() ** 2
    residual = (b.double() - theta * v.double()).norm()
    return torch.stack([a.double().norm(), theta, residual, b.double().norm()]).to(x.dtype), a, v


def check_matrix_free_spectral_norm(kernel, x: torch.Tensor, eps: float, start: torch.Tensor,
                                    weight: torch.Tensor | None = None) -> None:
    """The power-iteration estimate of ||J_kernel||_2 is the exact derived value within its certified slack, and at
    most max|gamma|/sqrt(eps) within it. With per-feature gamma the iteration starts from the derived top right
    singular vector plus a tenth of the drawn start: the residual bound certifies the eigenvalue the iteration
    found, which is the top one only once the start's share of the top eigenspace has grown, and near-equal top
    singular values (a gap of 5% grows it 4x in 30 steps) leave a drawn start near a lower one; a wrong kernel
    still moves it (its norm along the derived direction differs, or the drawn share grows towards its top)."""
    gamma = norms.effective_weight(kernel, weight)
    if gamma is None:
        derived = float(norms.reference_spectral_norm(kernel, x, eps)[0])
    else:
        derived, direction = oracles.weighted_top_singular(norms.as_float64(x)[0], gamma, eps,
                                                           kernel.record.norm)
        drawn = start.double() / start.double().norm()
        direction = boundary.to_kernel(direction.reshape(start.shape), torch.float64, start.device)
        start = (direction + 0.1 * drawn).to(start.dtype)
    values, a, v = guard.limited(kernel, lambda: _power_iteration(kernel, x, weight, eps, start))
    norm_a, theta, residual, _ = (float(t) for t in values.double())
    rounding = float(np.linalg.norm(tolerance.backward(kernel, x, weight, eps, v.detach())["x"]))
    rounding_b = float(np.linalg.norm(tolerance.backward(kernel, x, weight, eps, a.detach())["x"]))
    slack = rounding + (residual + rounding_b) / max(np.sqrt(theta), np.finfo(float).tiny)
    bound = float(tolerance.spectral_norm_bound(kernel, weight, eps))
    comparisons = [outcome.compare(norm_a, derived, slack, "power-iteration ||J||_2 vs the derived value"),
                   outcome.compare(max(norm_a - bound, 0.0), 0.0, slack, "||J||_2 above max|gamma|/sqrt(eps)")]
    outcome.conclude(comparisons, "the kernel's Jacobian does not have the derived spectral norm",
                     **SERIES["spectral"].point(sigma2=_row_statistics(kernel, x), eps=eps, measured=norm_a,
                                                derived=derived, bound=bound), d=x.shape[-1], dtype=dtype_name(x.dtype))
