"""ln.jacobian / rms.jacobian: the kernel's VJPs for x, gamma (and beta) against the derived Jacobian;
ln.gradient_identities / rms.gradient_identities: the identities every correct backward satisfies.

With c = x - mean(x) (LayerNorm) or c = x (RMSNorm), s^2 = mean(c^2) + eps and dx = (1/s) P (gamma * dy),
P = I - 11^T/d - xhat xhat^T/d (LayerNorm) or I - xhat xhat^T/d (RMSNorm), xhat = c/s:
    LayerNorm:  sum_i dx_i = 0 (for any gamma, since 1^T P = 0)
    both:       c . dx = (eps / s^2) * c . (gamma * dy) / s
    both:       dgamma = sum over rows of dy * xhat (from x, not from the output)
    LayerNorm:  dbeta = sum over rows of dy

The two identities of dx are bounded from their cancellation (properties.bounds.tolerance.identities: the error of the
mean term and the per-element terms that cancel exactly are not counted), not by summing element bounds; under
declared conventions the elements' widening (properties.bounds.diagnosis) is added, summed.
"""

from __future__ import annotations

import numpy as np
import torch

from core import guard
from core.boundary import to_kernel
from core.capabilities import dtype_name
from properties import norms, outcome
from properties.bounds import diagnosis, models, tolerance
from properties.checks.contracts import fail_on_missing_gradient
from properties.checks.graph import check_recorded_graph
from properties.checks.modes import also_in_default_modes


@also_in_default_modes
def check_vjp(kernel, x: torch.Tensor, weight, eps: float, dy: torch.Tensor, bias=None,
              frozen: tuple[str, ...] = ()) -> None:
    """Each gradient the kernel returns is the oracle's, within the backward bound, elementwise; ``frozen``: the
    inputs that do not require grad in the call. An input that requires grad and gets none (of a kernel with a
    backward) fails."""
    try:
        got = norms.vjp(kernel, x, weight, bias, eps, dy, frozen=tuple(frozen))
    except guard.KernelFault as fault:
        fail_on_missing_gradient(kernel, fault, tuple(frozen), d=x.shape[-1], dtype=dtype_name(x.dtype))
        return
    expected, bounds, declared = models.expected_backward(kernel, x, weight, eps, dy)
    comparisons = [outcome.compare(got[name], expected[name], bounds[name], f"d{name}") for name in got]
    model = f" (checked against the declared {' and '.join(declared)} model)" if declared else ""
    outcome.conclude(comparisons, "the backward is not the derivative of the normalization" + model,
                     diagnose=diagnosis.of_backward(kernel, "jacobian", x, weight, eps, dy, got),
                     d=x.shape[-1], dtype=dtype_name(x.dtype), **models.declared_point(declared))


def check_vjp_in_float64(kernel, x: torch.Tensor, weight, eps: float, dy: torch.Tensor, bias=None) -> None:
    """float64 x, weight, bias and dy: dx, dweight, dbias in float64 within the float64 backward bound plus the float64
    oracle's own distance to the exact gradients (the same bound: the oracle's evaluation is one the model covers). A
    backward whose buffers or sums are float32 whatever x's dtype misses it by ~1e8 (patrick-kidger/equinox#723,
    pytorch/pytorch#141425)."""
    got = norms.vjp(kernel, x, weight, bias, eps, dy)
    expected, bounds, declared = models.expected_backward(kernel, x, weight, eps, dy)
    oracle = tolerance.backward(kernel, x, weight, eps, dy, bias=bias)
    comparisons = [outcome.compare(got[name], expected[name], bounds[name] + oracle[name], f"d{name}")
                   for name in got]
    outcome.conclude(comparisons, "float64 gradients must be computed in float64, not in a lower precision",
                     d=x.shape[-1], dtype=dtype_name(x.dtype), **models.declared_point(declared))


def check_vjp_under_autocast(kernel, x: torch.Tensor, weight, eps: float, dy: torch.Tensor, bias=None,
                             autocast: torch.dtype = torch.bfloat16) -> None:
    """float32 x, weight, bias and dy with the forward and the backward under torch.autocast(x's device type,
    bfloat16), as a mixed-precision training step runs them (custom_bwd runs a Function's backward in its forward's
    autocast state): the gradients of a float32 y are the float32 inputs' within their float32 bound (a backward
    whose row sums go through an op autocast lists, a matmul, computes them in the lower precision and fails:
    pytorch#87979);
    those of a bfloat16 y (a kernel that casts its inputs) the gradients at the inputs and dy rounded to bfloat16,
    within that dtype's bound (the casts' own backward is exact)."""
    with torch.autocast(x.device.type, dtype=autocast):
        y = norms.forward(kernel, x, weight, bias, eps, any_dtype=True)
    if y.dtype not in (x.dtype, autocast):
        return  # the forward claim's failure (check_forward_under_autocast)
    upstream = to_kernel(dy.double(), y.dtype, dy.device)
    with torch.autocast(x.device.type, dtype=autocast):
        got = norms.vjp(kernel, x, weight, bias, eps, upstream, any_dtype=True)
    if y.dtype != x.dtype:
        x, weight, bias = (None if t is None else to_kernel(t.double(), autocast, t.device)
                           for t in (x, weight, bias))
    expected, bounds, declared = models.expected_backward(kernel, x, weight, eps, upstream)
    comparisons = [outcome.compare(got[name], expected[name], bounds[name], f"d{name}") for name in got]
    outcome.conclude(comparisons, f"under autocast the gradients are farther from those of the {dtype_name(y.dtype)} "
                     "inputs than rounding explains (a backward step computed in autocast's lower precision)",
                     d=x.shape[-1], dtype=dtype_name(x.dtype), **models.declared_point(declared))


def check_vjp_after_a_call_in_inference_mode(kernel, x: torch.Tensor, weight, eps: float, dy: torch.Tensor,
                                            bias=None) -> None:
    """A call under torch.inference_mode() (an evaluation, a serving warm-up) on the same inputs, then the gradients
    (:func:`check_vjp`): a kernel that caches a tensor made there (a ones weight, a cast, a workspace: inference
    tensors) cannot save it for a later backward (sgl-project/sglang#33470) and fails."""
    norms.forward(kernel, x, weight, bias, eps, allow_nonfinite=True, any_dtype=True, inference=True)
    check_vjp(kernel, x, weight, eps, dy, bias)


def check_backward_of_the_recorded_graph(kernel, x: torch.Tensor, weight, eps: float, dy: torch.Tensor,
                                        bias=None) -> None:
    """Inputs and y written in place after the forward, and a second backward of one graph
    (properties.checks.graph)."""
    example = {"x": x, "weight": weight, "bias": bias, "eps": eps}
    check_recorded_graph(kernel, lambda: example, {"y": dy}, tolerance.backward(kernel, x, weight, eps, dy),
                         d=x.shape[-1], dtype=dtype_name(x.dtype))


def check_gradient_identities(kernel, x: torch.Tensor, weight, eps: float, dy: torch.Tensor, bias=None) -> None:
    """sum(dx) = 0 (LayerNorm), c . dx = (eps/s^2) c . (gamma dy)/s, dgamma = sum of dy xhat, dbeta = sum of dy:
    each within its bound."""
    got = norms.vjp(kernel, x, weight, bias, eps, dy)
    bounds = models.identity_bounds(kernel, x, weight, eps, dy)
    x64, dy64 = norms.as_float64(x), norms.as_float64(dy)
    gamma = norms.effective_weight(kernel, weight)
    centred = x64 - x64.mean(-1, keepdims=True) if kernel.record.centred else x64
    s = np.sqrt(np.mean(centred**2, axis=-1) + eps)
    scaled_dy = dy64 if gamma is None else gamma * dy64
    dx = norms.as_float64(got["x"])
    structured = tolerance.identities(kernel, x, weight, eps, dy)
    widening = bounds["x"] - tolerance.backward(kernel, x, weight, eps, dy)["x"]  # 0 without declared conventions
    comparisons = [outcome.compare(np.sum(centred * dx, -1),
                                   eps / s**2 * np.sum(centred * scaled_dy, -1) / s,
                                   structured["c_dot"] + tolerance.of_sum(widening, centred), "c . dx")]
    rows = dy64.reshape(-1, dy64.shape[-1])
    if "weight" in got:
        xhat = (centred / s[..., None]).reshape(rows.shape)
        comparisons.append(outcome.compare(got["weight"], (rows * xhat).sum(0), bounds["weight"],
                                           "dgamma - sum of dy xhat"))
    if kernel.record.centred:
        comparisons.append(outcome.compare(dx.sum(-1), 0.0, structured["sum"] + tolerance.of_sum(widening),
                                           "sum of dx"))
        if "bias" in got:
            comparisons.append(outcome.compare(got["bias"], rows.sum(0), bounds["bias"], "dbias - sum of dy"))
    outcome.conclude(comparisons, "a gradient identity of the derivation does not hold for the kernel's backward",
                     diagnose=diagnosis.of_backward(kernel, "gradient_identities", x, weight, eps, dy, got),
                     d=x.shape[-1], dtype=dtype_name(x.dtype))
