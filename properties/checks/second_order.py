"""ln.second_order / rms.second_order: the gradient of the kernel's gradient is the second derivative of the norm.

For upstream gradients (u, a, c) of the kernel's (dx, dweight, dbias) at upstream gradient dy, the gradient of
S = sum_rows <u, dx> + <a, dweight> + <c, dbias> with respect to dy, x and the weight, through autograd
(properties.norms.second_order), against the float64 oracle of the derived closed form
(proofs.second_order.second_order), each element within the bound of a kernel evaluating that closed form's monomials
(proofs.second_order.second_order_bound, through properties.bounds.tolerance.second_order). A second derivative the
backward's graph does not reach (statistics saved detached) is compared as zeros.
"""

from __future__ import annotations

import numpy as np
import torch

from core.capabilities import dtype_name
from proofs import error_model
from proofs import second_order as derived
from properties import norms, outcome
from properties.bounds import tolerance


def check_second_order(kernel, x: torch.Tensor, weight, eps: float, dy: torch.Tensor, u: torch.Tensor, a=None,
                       c=None, bias=None) -> None:
    """dS/d dy, dS/dx and dS/dweight of the kernel are the oracle's, within their bounds, elementwise; ``a`` and
    ``c`` (the upstream gradients of dweight and dbias) None where the kernel takes no weight or bias."""
    example = {"x": x, "weight": weight, "bias": bias, "eps": eps}
    upstream = {"x": u, "weight": a, "bias": c}
    got = norms.second_order(kernel, example, dy, upstream)
    as64 = {name: None if t is None else norms.as_float64(t) for name, t in upstream.items()}
    expected = derived.second_order(norms.as_float64(x), norms.effective_weight(kernel, weight), eps,
                                    norms.as_float64(dy), as64["x"], as64["weight"], as64["bias"], kernel.record.norm)
    bounds = tolerance.second_order(kernel, x, weight, eps, dy, upstream)
    comparisons = [outcome.compare(got[name], expected[name], bounds[name], f"dS/d{name}") for name in got]
    outcome.conclude(comparisons, "the gradient of the kernel's gradient is not the second derivative of the "
                     "normalization", d=x.shape[-1], dtype=dtype_name(x.dtype))


def check_fused_second_order(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float, dy: torch.Tensor,
                             dh: torch.Tensor, u: torch.Tensor, path: str, a=None, c=None, bias=None) -> None:
    """add_ln/add_rms.second_order: S = <u, d path> + <a, dweight> + <c, dbias>, ``path`` "x" or "residual" (the other
    path's upstream left out, so that S sums the plain kind's terms only): dS/d dy and dS/dweight the norm's at
    h = residual_out (the kernel's), dS/dx and dS/dresidual both the norm's dS/dh, dS/d dh = u (dx and dresidual
    each carry dh), each within the plain kind's bound at h (u's dtype's rounding for dS/d dh)."""
    example = {"x": x, "residual": residual, "weight": weight, "bias": bias, "eps": eps}
    h = norms.call(kernel, {**example, "residual": residual.clone()})["residual_out"]  # a copy: it may be written
    got = norms.second_order(kernel, example, {"y": dy, "residual_out": dh}, {path: u, "weight": a, "bias": c})
    u64 = norms.as_float64(u)
    expected = derived.second_order(norms.as_float64(h), norms.effective_weight(kernel, weight), eps,
                                    norms.as_float64(dy), u64, None if a is None else norms.as_float64(a),
                                    None if c is None else norms.as_float64(c), kernel.record.norm)
    bounds = tolerance.second_order(kernel, h, weight, eps, dy, {"x": u, "weight": a, "bias": c})
    expected.update(residual=expected["x"], dh=u64)
    bounds.update(residual=bounds["x"], dh=error_model.unit_roundoff(dtype_name(dh.dtype)) * np.abs(u64))
    comparisons = [outcome.compare(got[name], expected[name], bounds[name], f"dS/d{name}") for name in got]
    outcome.conclude(comparisons, "the gradient of the kernel's gradient is not the second derivative of the norm "
                     f"at residual_out (S through d{path})", d=x.shape[-1], dtype=dtype_name(x.dtype))
