"""What a kernel's result is checked against: the float64 oracle within properties.bounds.tolerance's bounds, or, for a
kernel that declares conventions (``Kernel.conventions``, ids of ``proofs.mechanisms.CONVENTIONS``), the union of
its conventions' derived models in their place (:func:`expected_forward`, :func:`expected_backward`), the correct
model kept wherever a convention's model does not apply. ``storage_statistics_backward`` is the same as
``backward_precision="storage"``, which properties.bounds.tolerance applies.
"""

from __future__ import annotations

import numpy as np
import torch

from core.capabilities import dtype_name
from core.registry import Kernel
from proofs.mechanisms import MECHANISMS, Case, Prediction
from proofs.mechanisms.base import union
from properties import norms
from properties.bounds import tolerance

# handled by properties.bounds.tolerance through Kernel.backward_precision (the same model: u_acc = u_storage)
_BY_TOLERANCE = frozenset({"storage_statistics_backward"})


def case_of(kernel: Kernel, x: torch.Tensor, weight, bias, eps: float, dy: torch.Tensor | None = None) -> Case:
    """The example as proofs.mechanisms takes it: float64 values, the effective weight, the dtypes' names."""
    return Case(kind=kernel.prefix, x=norms.as_float64(x), gamma=norms.effective_weight(kernel, weight),
                beta=norms.as_float64(bias) if kernel.record.has_bias else None, eps=eps,
                storage=dtype_name(x.dtype), accumulation=dtype_name(tolerance.accumulation_dtype(x.dtype)),
                dy=None if dy is None else norms.as_float64(dy), bound=tolerance.bound_in_use(),
                output=dtype_name(norms.output_dtype(kernel, x, weight)),
                weight_dtype="" if weight is None else dtype_name(weight.dtype))


def conventions_of(kernel: Kernel) -> tuple[str, ...]:
    return tuple(getattr(kernel, "conventions", ()))


def _declared(kernel: Kernel, direction: str) -> list:
    mechanisms = [MECHANISMS[c] for c in conventions_of(kernel) if c not in _BY_TOLERANCE]
    return [m for m in mechanisms if (m.forward if direction == "forward" else m.backward) is not None]


def expected_forward(kernel: Kernel, x, weight, bias, eps: float) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """(center, bound, conventions applied): the correct oracle and bound, or the declared conventions' model."""
    correct = norms.reference(kernel, x, weight, bias, eps), tolerance.forward(kernel, x, weight, bias, eps)
    declared = _declared(kernel, "forward")
    case = case_of(kernel, x, weight, bias, eps)
    predictions = [p for m in declared for p in m.forward(case)]
    if not predictions:
        return (*correct, ())
    model = _where_applicable(union(*predictions), Prediction({"y": correct[0]}, {"y": correct[1]}))
    return model.values["y"], model.bounds["y"], tuple(m.id for m in declared)


def _where_applicable(model: Prediction, correct: Prediction) -> Prediction:
    """The model, and the correct one on the elements where the model's bound is infinite (does not apply): a
    declared convention never turns an unchecked element into a pass."""
    values, bounds = {}, {}
    for name, center in model.values.items():
        usable = ~np.isinf(model.bounds[name])
        values[name] = np.where(usable, center, correct.values[name])
        bounds[name] = np.where(usable, model.bounds[name], correct.bounds[name])
    return Prediction(values, bounds)


def expected_backward(kernel: Kernel, x, weight, eps: float, dy) -> tuple[dict, dict, tuple[str, ...]]:
    """({name: center}, {name: bound}, conventions applied) of the gradients, as :func:`expected_forward`."""
    expected = norms.reference_vjp(kernel, x, weight, eps, dy)
    bounds = tolerance.backward(kernel, x, weight, eps, dy)
    declared = _declared(kernel, "backward")
    applied = tuple(c for c in conventions_of(kernel) if c in _BY_TOLERANCE)
    predictions = [p for m in declared for p in m.backward(case_of(kernel, x, weight, None, eps, dy))]
    if not predictions:
        return expected, bounds, applied
    correct = Prediction(expected, bounds)
    model = union(*([correct] if applied else []), *predictions)
    model = _where_applicable(model, correct)
    return model.values, model.bounds, applied + tuple(m.id for m in declared)


def identity_bounds(kernel: Kernel, x, weight, eps: float, dy) -> dict[str, np.ndarray]:
    """Bounds on |gradient - oracle gradient| for the identities' checks: properties.bounds.tolerance's, widened under
    declared conventions by |convention center - oracle| (the triangle inequality)."""
    if not _declared(kernel, "backward"):
        return tolerance.backward(kernel, x, weight, eps, dy)
    centers, bounds, _ = expected_backward(kernel, x, weight, eps, dy)
    oracle = norms.reference_vjp(kernel, x, weight, eps, dy)
    return {name: bounds[name] + np.abs(centers[name] - oracle[name]) for name in bounds}


def declared_point(declared: tuple[str, ...]) -> dict:
    """The evidence field saying which declared conventions' model an example was checked against (none: {})."""
    return {"conventions": list(declared)} if declared else {}
