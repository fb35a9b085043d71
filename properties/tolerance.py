"""The one place that decides how far a kernel's result may be from the float64 reference.

Every bound is derived, none is chosen: the per-element bounds are those of the rounding-error
analysis in :mod:`proofs.error_model` (``numerics.error_model``), evaluated on the exact rounded
inputs the kernel received, with

- ``u_out``: the unit roundoff of each output's own dtype (:func:`operand_roundoffs`): y is rounded once to the
  output dtype (x's by torch's rule, or the kernel's declared ``output_dtype``), dx to x's, dweight to the
  weight's and dbias to the bias' (float32 parameters with 16-bit x: float32 dweight/dbias);
- ``u_acc``: the unit roundoff of the accumulation dtype: float32 for float16/bfloat16 storage
  (what every mixed-precision norm kernel does), the storage dtype otherwise, and for the backward
  of a kernel that declares ``backward_precision="storage"``;
- the width d and the row's condition number (:func:`condition_number`), both inside the bound;
- the kernel's declared reduction shape (``Kernel.reduction``, proofs.reduction: each statistic's sum bounded by
  the shape's depth instead of d - 1; none declared: a sum in any order);
- the bound model of the run (:func:`use_bound`, pytest ``--bound``): ``probabilistic`` (default: each sum's
  rounding error as a martingale, exceeded by a correct kernel with probability at most
  ``proofs.probabilistic.FALSE_ALARM`` per bound evaluation; worst case on structured rows) or
  ``worst-case`` (Higham's deterministic gamma_n, always holds).

Quantities derived from a kernel's elements are bounded from the element bounds by the triangle
inequality, never by a fudge factor: a weighted sum ``sum_i a_i y_i`` is off by at most
``sum_i |a_i| b_i`` (:func:`of_sum`), a matrix by at most the Frobenius norm of its element
bounds in 2-norm (:func:`of_matrix_norm`, since ||E||_2 <= ||E||_F <= ||B||_F when |E| <= B
elementwise). A correct kernel stays below its bound on every input; a ratio error/bound > 1 is
a failure (:mod:`properties.outcome`).
"""

from __future__ import annotations

import numpy as np
import torch

from core import trees
from core.capabilities import dtype_name
from core.registry import Kernel
from proofs import error_model, oracles
from properties.norms import as_float64, effective_weight, output_dtype

# float16/bfloat16 data is accumulated in float32; a kernel that declares backward_precision="storage"
# (core.registry.Kernel) has its backward checked with u_acc = u_storage instead.
_ACCUMULATION = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


_model = {"bound": error_model.DEFAULT_BOUND}


def use_bound(model: str) -> None:
    """Select the bound model of this process's checks: one of proofs.error_model.BOUNDS."""
    if model not in error_model.BOUNDS:
        raise ValueError(f"unknown bound {model!r}: expected one of {', '.join(error_model.BOUNDS)}")
    _model["bound"] = model


def bound_in_use() -> str:
    """The bound model the checks use (recorded in the results' environment and on every example)."""
    return _model["bound"]


def accumulation_dtype(storage: torch.dtype) -> torch.dtype:
    """The dtype sums are accumulated in: float32 for 16-bit storage, the storage dtype otherwise."""
    return _ACCUMULATION.get(storage, storage)


def unit_roundoffs(storage: torch.dtype) -> tuple[float, float]:
    """(u_acc, u_out) for data stored in ``storage``."""
    return (error_model.unit_roundoff(dtype_name(accumulation_dtype(storage))),
            error_model.unit_roundoff(dtype_name(storage)))


def operand_roundoffs(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None = None,
                      bias: torch.Tensor | None = None) -> dict[str, float]:
    """Unit roundoffs per operand, for parameters in x's dtype or another: ``acc`` (float32 whenever any operand is
    16-bit: x's accumulation dtype, which float32 or 16-bit parameters never lower), ``y`` (the output's dtype,
    properties.norms.output_dtype), ``x`` (dx, in x's dtype), ``weight`` and ``bias`` (dweight, dbias in their
    parameter's dtype; x's when the parameter is absent). Weight and bias enter the bound exactly as received."""
    u = error_model.unit_roundoff
    u_acc, u_x = unit_roundoffs(x.dtype)
    return {"acc": u_acc, "y": u(dtype_name(output_dtype(kernel, x, weight))), "x": u_x,
            "weight": u_x if weight is None else u(dtype_name(weight.dtype)),
            "bias": u_x if bias is None else u(dtype_name(bias.dtype))}


def declared_reduction(kernel: Kernel, x: torch.Tensor):
    """The kernel's declared reduction (``Kernel.reduction``) as far as it holds for x's device and dtype on this
    machine (core.trees.trusted): a declared exact tree only once it is verified bit for bit here."""
    return trees.trusted(kernel, x)


def condition_number(x: torch.Tensor, eps: float) -> np.ndarray:
    """Per-row condition number of the statistics (proofs.error_model), e.g. ~ |mean|/std for LayerNorm."""
    return np.asarray(error_model.condition_number(as_float64(x), eps))


def forward(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
            eps: float, model: str | None = None) -> np.ndarray:
    """Per-element bound on |kernel(x) - oracle(x)|, shape of x (``model``: the run's, :func:`bound_in_use`)."""
    u = operand_roundoffs(kernel, x, weight, bias)
    beta = as_float64(bias) if kernel.kind == "layernorm" else None
    bound = error_model.forward_bound(as_float64(x), effective_weight(kernel, weight), beta, eps,
                                      u["acc"], u["y"], kernel.kind, model or bound_in_use(),
                                      declared=declared_reduction(kernel, x),
                                      flush_to_zero=kernel.flush_to_zero)
    return np.broadcast_to(np.asarray(bound, dtype=np.float64), x.shape)


def covered(kernel: Kernel, x: torch.Tensor, eps: float) -> bool:
    """Whether the forward bound is finite on every row of x (the error model applies: rho_t < 1)."""
    return error_model.forward_bound_finite(as_float64(x), eps, unit_roundoffs(x.dtype)[0], kernel.kind,
                                            bound_in_use(), declared=declared_reduction(kernel, x),
                                            flush_to_zero=kernel.flush_to_zero)


def backward(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None, eps: float,
             dy: torch.Tensor, model: str | None = None) -> dict[str, np.ndarray]:
    """Per-element bounds on the kernel's gradients: {"x": [..., d], "weight": [d], "bias": [d] (LayerNorm)};
    no "weight" entry without a weight. Each rounded to its own dtype (:func:`operand_roundoffs`; the bias is
    taken in the weight's dtype, as the strategies draw it)."""
    u = operand_roundoffs(kernel, x, weight, weight)
    u_acc = u["x"] if kernel.backward_precision == "storage" else u["acc"]
    bounds = error_model.backward_bound(as_float64(x), effective_weight(kernel, weight), eps, as_float64(dy),
                                        u_acc, u["x"], kernel.kind, model or bound_in_use(),
                                        u_weight=u["weight"], u_bias=u["bias"], declared=declared_reduction(kernel, x),
                                        flush_to_zero=kernel.flush_to_zero)
    named = dict(zip(("x", "weight", "bias"), bounds, strict=False))
    return {name: np.asarray(b, dtype=np.float64) for name, b in named.items() if b is not None}


def identities(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None, eps: float,
               dy: torch.Tensor, model: str | None = None) -> dict[str, np.ndarray]:
    """Per-row bounds on the gradient identities of the kernel's dx, from their cancellation
    (proofs.error_model.identity_bounds): {"c_dot": |c . dx - (eps/s^2) c . g'/s|, "sum": |sum_i dx_i| (LayerNorm)}."""
    u_acc, u_out = unit_roundoffs(x.dtype)
    if kernel.backward_precision == "storage":
        u_acc = u_out
    return error_model.identity_bounds(as_float64(x), effective_weight(kernel, weight), eps, as_float64(dy),
                                       u_acc, u_out, kernel.kind, model or bound_in_use(),
                                       declared=declared_reduction(kernel, x),
                                       flush_to_zero=kernel.flush_to_zero)


def backward_covered(kernel: Kernel, x: torch.Tensor, eps: float, model: str | None = None) -> bool:
    """Whether the backward bound is finite on every row of x (it does not depend on the weight's or the upstream
    gradient's finiteness: those only scale it)."""
    bounds = backward(kernel, x, None, eps, torch.ones_like(x), model)
    return all(bool(np.all(np.isfinite(b))) for b in bounds.values())


def of_sum(bounds: np.ndarray, coefficients: np.ndarray | float = 1.0, axis: int = -1) -> np.ndarray:
    """Bound on the error of sum_i a_i y_i when each y_i is off by at most b_i: sum_i |a_i| b_i
    (a zero coefficient contributes nothing, even where b_i is inf)."""
    coefficients = np.abs(coefficients)
    with np.errstate(invalid="ignore"):
        return np.sum(np.where(coefficients == 0, 0.0, coefficients * bounds), axis=axis)


def of_matrix_norm(bounds: np.ndarray) -> np.ndarray:
    """Bound on | ||A + E||_2 - ||A||_2 | <= ||E||_2 <= ||B||_F for |E| <= B elementwise (over the last two axes)."""
    return np.sqrt(np.sum(np.square(bounds), axis=(-2, -1)))


def spectral_norm_bound(kernel: Kernel, weight: torch.Tensor | None, eps: float) -> float:
    """max|gamma| / sqrt(eps), gamma the effective weight (proofs.oracles.spectral_norm_bound)."""
    return float(oracles.spectral_norm_bound(eps, effective_weight(kernel, weight)))


def dropout_scaling(x: torch.Tensor, p: float) -> np.ndarray:
    """Bound on |y - x/(1-p)| for a kept element y.

    y = fl(x * fl(1/(1-p))) stored: at most three roundings (the scale, the product, the store), each
    at worst in the storage dtype, so |y - x/(1-p)| <= ((1 + u_out)^3 - 1) |x/(1-p)|.
    """
    u_out = unit_roundoffs(x.dtype)[1]
    return ((1 + u_out) ** 3 - 1) * np.abs(as_float64(x) / (1.0 - p))
