"""Derived bounds of the fused residual add + norm kinds, composed from proofs.error_model as properties.tolerance.

A fused kernel returns residual_out = h = x + residual (rounded once to the residual dtype) and y = N(h), the
norm of the stored h (the contract, docs/validate-your-kernel.md). So:

- residual_out: h is one addition of two rounded inputs. In float32 (declared ``residual_dtype="float32"``, or
  float32 storage) it is the correctly rounded float32 sum, which IEEE float32 addition of the (exactly
  converted) inputs gives: bound 0, bit for bit. In a 16-bit storage dtype it may be rounded once from the exact
  sum or once more from the float32 sum: |h_kernel - (x + r)| <= ((1 + u_acc)(1 + u_out) - 1) |x + r|.
- y: the error-model forward bound of N at the stored h (u_out of y's dtype, u_acc float32 for 16-bit data; weight
  and bias enter exactly as received, in x's dtype or another: core.capabilities.PARAMETER_MIXES).
- the gradients: d = J_N(h)^T dy + dh, rounded to each input's dtype. A fused kernel forms it in the accumulation
  dtype; a composition (h = x + residual, then N(h), in plain torch) gets it from autograd, which adds the gradients
  reaching h from each of its uses (residual_out itself: dh; N's uses of h: the terms of N's backward) in h's dtype,
  a rounding after every partial sum, in an order the suite cannot know. Both are one model, a k-term sum
  (Higham Lemma 3.1, any order): the terms c_1..c_{k-1} of J^T dy (LayerNorm: r g', r c1, r xhat c2; RMSNorm:
  r g', r xhat c2; proofs.error_model.backward_terms), each computed within the error model's bound B of J^T dy
  (u_out = u_acc: B bounds |sum_j c^_j - J^T dy|) and rounded to h's dtype, plus dh, added in any order with
  k - 1 roundings of unit u_s = max(u_acc, u_h), u_h of h's dtype. With M >= sum_j |c^_j| (the terms' magnitude,
  error_model.backward_terms_magnitude: every partial sum of the c_j is at most M) and t = J^T dy + dh exact:
      |fl_s-sum(fl_h(c^_1), ..., fl_h(c^_{k-1}), dh) - t| <= B + u_h M + gamma_{k-1}(u_s) ((1 + u_h) M + |dh|) =: B_d
  (the storing of each term errs u_h |c^_j|, at most u_h M in all; the sum's error is gamma_{k-1} times the sum of
  its terms' magnitudes, which bounds every partial sum). Then one rounding to each input's dtype (u_o):
      |fl_o(d^) - t| <= B_d (1 + u_o) + u_o |t|.
  A fused kernel (one rounding of fl_acc(a^ + dh), k = 2, u_h = u_acc) and torch's unfused composition in 16-bit
  (fl_h(fl_h(J^T dy) + dh), two roundings at u_h, docs/findings.md [R1]) are special cases; so are compositions
  with float64 or float32 statistics, a float32 residual_out (dh added among N's float32 terms), and chunked
  (Chan-merged) statistics, whose chunks' terms are pieces of the same c_j (tests/corpus/composed.py).
  Dropout multiplies d by the scale s = 1/(1 - p): fused, fl_o(fl_acc(d fl_acc(s))); unfused (dropout applied to
  the branch in storage before the add, as torch's F.dropout is: its backward gets d rounded to the output dtype),
  fl_o(fl(fl_o(d) fl_o(s))). Four roundings at most, each within u_o >= u_acc:
      |dx - m t/(1 - p)| <= s B' (1 + u_o)^4 + ((1 + u_o)^4 - 1) s |t|,
  with B' the bound of d before its rounding to the output dtype. Every bound adds the float64 oracle's own
  error (2^-53 relative, of the same sums).
"""

from __future__ import annotations

import numpy as np
import torch

from core.boundary import HOST
from proofs import error_model, probabilistic
from properties.norms import as_float64
from properties.tolerance import bound_in_use, unit_roundoffs

U64 = 2.0**-53


def residual_out(x: torch.Tensor, residual: torch.Tensor, residual_dtype: torch.dtype
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(expected h in float64, per-element bound on |h_kernel - expected|) for a residual_out of ``residual_dtype``.

    float32: the IEEE float32 sum of the inputs converted exactly to float32 (bound 0). 16-bit: the exact sum,
    within one storage rounding after one float32 rounding.
    """
    if residual_dtype == torch.float32 or residual_dtype == torch.float64:
        wide = torch.float64 if residual_dtype == torch.float64 else torch.float32
        expected = as_float64(x.to(HOST, wide) + residual.to(HOST, wide))
        return expected, np.zeros_like(expected)
    exact = as_float64(x) + as_float64(residual)
    u_acc, u_out = unit_roundoffs(residual_dtype)
    return exact, ((1 + u_acc) * (1 + u_out) - 1) * np.abs(exact)


def forward(h: np.ndarray, gamma: np.ndarray | None, beta: np.ndarray | None, eps: float, kind: str,
            out_dtype: torch.dtype) -> np.ndarray:
    """Per-element bound on |y - N(h)| for y stored in ``out_dtype`` (proofs.error_model.forward_bound)."""
    u_acc, u_out = unit_roundoffs(out_dtype)
    return np.asarray(error_model.forward_bound(h, gamma, beta, eps, u_acc, u_out, kind, bound_in_use()))


# k of the k-term sum of dL/dh: the terms of N's backward combination (proofs.error_model.backward_terms) and dh
ACCUMULATED_TERMS = {"layernorm": 4, "rmsnorm": 3}


def backward(h: np.ndarray, gamma: np.ndarray | None, eps: float, dy: np.ndarray, through: np.ndarray,
             kind: str, dtypes: dict[str, torch.dtype], dropout_scale: float | None = None,
             backward_precision: str = "float32", *, dh: np.ndarray, h_dtype: torch.dtype) -> dict[str, np.ndarray]:
    """Per-element bounds on the gradients named in ``dtypes`` ("x", "residual", "weight", "bias": each gradient's
    dtype, in which it is rounded once: dweight and dbias in the parameters' own, float32 beside 16-bit x):
    ``through`` is the exact d = J^T dy + dh, ``dh`` the upstream gradient of residual_out, ``h_dtype`` residual_out's
    dtype, in which autograd adds dL/dh's terms (the module docstring's k-term sum); ``dropout_scale`` = 1/(1 - p)
    when x was dropped out; ``backward_precision="storage"`` (core.kernel.Kernel): the backward accumulates in the
    storage dtype."""
    storage = dtypes.get("x", torch.float32)
    u_acc, u_storage = unit_roundoffs(storage)
    if backward_precision == "storage":
        u_acc = u_storage
    model = bound_in_use()
    accumulated = error_model.backward_bound(h, gamma, eps, dy, u_acc, u_acc, kind, model)[0]
    u_weight, u_bias = (unit_roundoffs(dtypes[name])[1] if name in dtypes else None for name in ("weight", "bias"))
    parameters = error_model.backward_bound(h, gamma, eps, dy, u_acc, u_storage, kind, model, u_weight=u_weight,
                                            u_bias=u_bias)[1:]
    magnitude = np.abs(through)
    before_rounding = _accumulated_sum(accumulated, h, gamma, eps, dy, dh, kind, u_acc, h_dtype, model)
    bounds = {}
    for name in ("x", "residual"):
        if name not in dtypes:
            continue
        u_o = unit_roundoffs(dtypes[name])[1]
        if name == "x" and dropout_scale is not None:
            scale = dropout_scale
            bound = (scale * before_rounding * (1 + u_o) ** 4 + ((1 + u_o) ** 4 - 1) * scale * magnitude
                     + U64 * scale * magnitude)
        else:
            bound = before_rounding * (1 + u_o) + u_o * magnitude + U64 * magnitude
        bounds[name] = bound
    for name, bound in zip(("weight", "bias"), parameters, strict=False):
        if name in dtypes and bound is not None:
            bounds[name] = np.asarray(bound, dtype=np.float64)
    return bounds


def _accumulated_sum(accumulated: np.ndarray, h: np.ndarray, gamma: np.ndarray | None, eps: float, dy: np.ndarray,
                     dh: np.ndarray, kind: str, u_acc: float, h_dtype: torch.dtype, model: str) -> np.ndarray:
    """B_d of the module docstring: dL/dh as a k-term sum in any order, B + u_h M + gamma_{k-1}(u_s)((1 + u_h) M
    + |dh|), B = ``accumulated`` (J^T dy's bound before any rounding to storage)."""
    u_h = unit_roundoffs(h_dtype)[1]
    u_sum = max(u_acc, u_h)
    terms = error_model.backward_terms_magnitude(h, gamma, eps, dy, u_acc, kind, model)
    gamma_sum = probabilistic.gamma(ACCUMULATED_TERMS[kind] - 1, u_sum)
    return accumulated + u_h * terms + gamma_sum * ((1 + u_h) * terms + np.abs(dh))
