"""Checks of the fused residual add + norm kinds (add_layernorm, add_rmsnorm, dropout_add_layernorm):

- {add_ln,add_rms}.forward: y = N(residual_out) within the error-model bound of N at residual_out;
- {add_ln,add_rms}.residual_out: residual_out has the declared dtype (float32 when declared, else the residual's)
  and is x + residual: bit for bit in float32, within one rounding (after one float32 rounding) in 16-bit storage;
  a kernel that declares an in-place residual update leaves residual_out in the residual tensor;
- {add_ln,add_rms}.jacobian: dL/dx = dL/dresidual = J_N(h)^T dy + dh and the norm's dweight/dbias at h, within
  the bounds of properties.bounds.tolerance (claim add_ln.jacobian);
- {add_ln,add_rms}.inputs_unmodified: x, residual (unless declared in place), weight, bias, dy, dh unchanged;
- {add_ln,add_rms}.row_independence / layout_invariance: as the norms' (properties.checks.contracts); the
  dropout + add kind's at p = 0 (check_noncontiguous) and its values and forward at the mask it drew
  (forward_comparison, dropout_values_comparison: properties.checks.dropout_add.check_layout_invariance).
"""

from __future__ import annotations

import numpy as np
import torch

from core import guard
from core.capabilities import discover, dtype_name
from core.kernel import STORAGE_BACKWARD
from core.registry import Kernel
from proofs import error_model
from properties import norms, outcome
from properties.bounds import models, tolerance
from properties.checks.contracts import (
    UPSTREAM,
    changed_inputs,
    check_dx_written_into_dy,
    check_empty_batch_of,
    conclude_upstream_layouts,
    fail_on_missing_gradient,
    gradients_in_both_layouts,
    read_only,
    rows_that_differ,
)
from properties.checks.forward import output_dtype_rule, updated_in_place
from properties.checks.graph import check_recorded_graph
from properties.checks.modes import also_in_default_modes


def example_of(x: torch.Tensor, residual: torch.Tensor, weight, bias, eps: float, p=None, seed=None) -> dict:
    """A fused kind's arguments keyed by role (core.kinds)."""
    return {"x": x, "residual": residual, "weight": weight, "bias": bias, "eps": eps, "p": p, "seed": seed}


def fresh(t: torch.Tensor | None) -> torch.Tensor | None:
    """A copy of a tensor the kernel may write into (a residual updated in place), None kept."""
    return None if t is None else t.clone()


def fresh_view(t: torch.Tensor | None) -> torch.Tensor | None:
    """:func:`fresh` in t's own layout: for a view (every other column of a wider buffer, a transpose), the same view
    of a copy of its base, so that a kernel writing into it writes through its strides."""
    return None if t is None else norms.copy_in_its_layout(t)


def outputs(kernel, x: torch.Tensor, residual: torch.Tensor, weight, bias, eps: float, p=None, seed=None,
            allow_nonfinite: bool = False, any_dtype: bool = False, recording: bool = False,
            inference: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, residual_out) of the kernel (properties.norms.call: a malformed return is a KernelFault; ``recording``: as
    in a training step; ``inference``: under torch.inference_mode())."""
    got = norms.call(kernel, example_of(x, residual, weight, bias, eps, p, seed), allow_nonfinite, any_dtype,
                     recording, inference)
    return got["y"], got["residual_out"]


def norm_view(kernel: Kernel, h: torch.Tensor, x: torch.Tensor) -> Kernel | None:
    """The kernel as a kernel of its norm's plain kind, whose declared conventions' models (properties.bounds.diagnosis)
    are evaluated at residual_out h; None when it declares no convention beyond the storage-precision backward (which
    properties.bounds.tolerance applies) or when h is not in y's dtype (the models round to one storage dtype)."""
    if h.dtype != x.dtype or not [c for c in kernel.conventions if c != STORAGE_BACKWARD]:
        return None
    return kernel.as_plain_norm()


@also_in_default_modes
def check_forward(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float, bias=None, p=None,
                  seed=None, recording: bool = False, inference: bool = False) -> None:
    """|y - N(residual_out)| <= the forward bound of N at residual_out, elementwise; for a kernel that declares
    conventions, the norm's declared model at residual_out (properties.bounds.models.expected_forward).
    ``recording``: the kernel called as in a training step, ``inference``: under torch.inference_mode()
    (properties.norms.call)."""
    y, h = outputs(kernel, x, fresh(residual), weight, bias, eps, p, seed, recording=recording,
                   inference=inference)
    conclude_forward(kernel, y, h, x, residual, weight, bias, eps,
                     "y is not the normalization of the residual_out the kernel returned")


def conclude_forward(kernel, y: torch.Tensor, h: torch.Tensor, x: torch.Tensor, residual: torch.Tensor | None, weight,
                     bias, eps: float, meaning: str) -> None:
    """|y - N(h)| within the forward bound (:func:`forward_comparison`), concluded with ``meaning`` and the declared
    model named."""
    comparison, declared = forward_comparison(kernel, y, h, x, weight, bias, eps, residual=residual)
    model = f" (the declared {' and '.join(declared)} model)" if declared else ""
    outcome.conclude(comparison, meaning + model, d=x.shape[-1], dtype=dtype_name(x.dtype),
                     **models.declared_point(declared))


def check_forward_beside_a_float32_residual(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float,
                                            bias=None) -> None:
    """A float32 residual stream beside 16-bit x: y in x's dtype (the output-dtype rule's) or in residual_out's
    (torch's promotion of x + residual, then the norm of that), |y - N(residual_out)| within the forward bound."""
    y, h = outputs(kernel, x, fresh(residual), weight, bias, eps, any_dtype=True)
    allowed = (norms.output_dtype(kernel, x, weight), h.dtype)
    outcome.exact(y.dtype in allowed, f"y is {dtype_name(y.dtype)} beside {dtype_name(x.dtype)} x and a "
                  f"{dtype_name(residual.dtype)} residual", f"y must be in x's dtype or residual_out's "
                  f"({' or '.join(sorted({dtype_name(t) for t in allowed}))})")
    conclude_forward(kernel, y, h, x, residual, weight, bias, eps,
                     "y is not the normalization of the residual_out the kernel returned beside a float32 residual")


def normalized(kernel, h: torch.Tensor, x: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
    """What y normalizes: the kernel's residual_out h, or for a kernel that declares ``normalizes="float32_sum"`` the
    float32 sum x + residual (properties.bounds.tolerance.residual_sum) that h was rounded from."""
    if kernel.normalizes == "float32_sum":
        return tolerance.residual_sum(x, residual, torch.float32)
    return h


def forward_comparison(kernel, y: torch.Tensor, h: torch.Tensor, x: torch.Tensor, weight, bias, eps: float,
                       what: str = "y", residual: torch.Tensor | None = None
                       ) -> tuple[outcome.Comparison, tuple[str, ...]]:
    """y vs N(h) at the kernel's residual_out h (at the float32 sum of x and ``residual`` where the kernel declares
    ``normalizes="float32_sum"``), within the forward bound of N there (the declared conventions' model for a kernel
    that declares them); and the conventions applied."""
    h = normalized(kernel, h, x, residual)
    view = norm_view(kernel, h, x)
    if view is None:
        expected = norms.reference(kernel, h, weight, bias, eps)
        bound = tolerance.forward(kernel, x, weight, bias, eps, h=h, output=y.dtype)
        declared = ()
    else:
        expected, bound, declared = models.expected_forward(view, h, weight, bias, eps)
    return outcome.compare(y, expected, bound, what), declared


check_forward_with_parameter_dtypes = output_dtype_rule(check_forward, "check_forward_with_parameter_dtypes")


def check_residual_out(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float, bias=None) -> None:
    """residual_out: the declared dtype, x + residual within its rounding; the declared in-place update."""
    given = fresh(residual)
    _, h = outputs(kernel, x, residual, weight, bias, eps, any_dtype=True)  # y's dtype is the forward claims'
    conclude_residual_out(kernel, h, x, given, residual, d=x.shape[-1], dtype=dtype_name(x.dtype))


def conclude_residual_out(kernel, h: torch.Tensor, x: torch.Tensor, given: torch.Tensor | None,
                          residual: torch.Tensor | None, **point) -> None:
    """The kernel's residual_out h (from x and the residual ``given``, a copy taken before the call; ``residual`` the
    tensor passed) in the declared dtype, x + residual within its rounding, and held by the residual tensor where the
    kernel declares an in-place update, the residual tensor unchanged where it does not (every kind with a residual).
    """
    declared = norms.residual_dtype(kernel, given, x)
    outcome.exact(h.dtype == declared and h.shape == x.shape,
                  f"residual_out is {dtype_name(h.dtype)} {tuple(h.shape)}, declared {dtype_name(declared)} "
                  f"{tuple(x.shape)}", "residual_out must keep the declared dtype (float32 when declared)")
    if "residual" in kernel.in_place and residual is not None:
        outcome.exact(torch.equal(residual.to(h.dtype), h), "the residual tensor does not hold residual_out after "
                      "the call", "the kernel declares an in-place residual update")
    elif residual is not None and given is not None:
        outcome.exact(torch.equal(residual, given), "the residual tensor was written by the call",
                      "a kernel that declares no in-place residual update leaves the residual as given")
    expected, bound = tolerance.residual_out(x, given, declared)
    outcome.conclude(outcome.compare(h, expected, bound, "residual_out"),
                     "residual_out is not x + residual rounded once to its declared dtype", **point)


def expected_gradients(kernel, example: dict, dy: torch.Tensor, dh: torch.Tensor, h: torch.Tensor
                       ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """({input: expected gradient}, {input: bound}) at h (the kernel's residual_out, or :func:`normalized`'s sum):
    d = J^T dy + dh for x and the
    residual (properties.norms.reference_vjp), the norm's dweight and dbias at h, within properties.bounds.tolerance's
    bounds (the dropout scale on x's for the dropout + add kind, whose check applies the mask)."""
    dh = dh.to(h.dtype)
    expected = norms.reference_vjp(kernel, h, example["weight"], example["eps"], dy, dh=dh)
    bounds = tolerance.backward(kernel, example["x"], example["weight"], example["eps"], dy, bias=example["bias"],
                                h=h, dh=dh, residual=example["residual"], p=example.get("p"))
    return expected, bounds


@also_in_default_modes
def check_vjp(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float, dy: torch.Tensor,
              dh: torch.Tensor, bias=None, frozen: tuple[str, ...] = (), any_dtype: bool = False) -> None:
    """Every gradient vs the derived VJP at the kernel's residual_out (at the float32 sum for a kernel that declares
    ``normalizes="float32_sum"``: the derivative of the function it computes): d = J^T dy + dh for x and residual.
    ``frozen``: the inputs that do not require grad in the call; an input that requires grad and gets none fails.
    ``any_dtype``: y's dtype not judged here (beside a float32 residual: x's or residual_out's, the forward claim's)."""
    example = example_of(x, residual, weight, bias, eps)
    try:
        got, grads = norms.gradients(kernel, example, {"y": dy, "residual_out": dh}, frozen=tuple(frozen),
                                     any_dtype=any_dtype)
    except guard.KernelFault as fault:
        fail_on_missing_gradient(kernel, fault, tuple(frozen), d=x.shape[-1], dtype=dtype_name(x.dtype))
        return
    h = normalized(kernel, got["residual_out"], x, residual)
    expected, bounds = expected_gradients(kernel, example, dy, dh, h)
    declared = _declared_backward(kernel, h, x, weight, eps, dy, expected, bounds)
    comparisons = [outcome.compare(g, expected[name], bounds[name], f"d{name}") for name, g in grads.items()]
    model = f" (the declared {' and '.join(declared)} model)" if declared else ""
    outcome.conclude(comparisons, "the backward is not J^T dy + dh at residual_out (a gradient dropped or wrong)"
                     + model, d=x.shape[-1], dtype=dtype_name(x.dtype), **models.declared_point(declared))


def check_forward_in_float64(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float,
                             bias=None) -> None:
    """float64 x, residual, weight and bias: residual_out the float64 sum (one rounding), y N(residual_out) within the
    float64 forward bound plus the float64 oracle's own (tolerance.oracle_forward): a kernel normalizing in float32
    whatever x's dtype (vLLM's forward_native, x.to(torch.float32)) misses it by ~1e8."""
    y, h = outputs(kernel, x, fresh(residual), weight, bias, eps)
    total = norms.as_float64(x) + norms.as_float64(residual)
    bound = tolerance.forward(kernel, x, weight, bias, eps, h=h, output=y.dtype)
    oracle = tolerance.oracle_forward(kernel, h, weight, bias, eps)
    comparisons = [outcome.compare(h, total, error_model.unit_roundoff("float64") * np.abs(total), "residual_out"),
                   outcome.compare(y, norms.reference(kernel, h, weight, bias, eps), bound + oracle, "y")]
    outcome.conclude(comparisons, "float64 inputs must be added and normalized in float64, not in a lower precision",
                     d=x.shape[-1], dtype=dtype_name(x.dtype))


def check_vjp_in_float64(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float, dy: torch.Tensor,
                         dh: torch.Tensor, bias=None) -> None:
    """float64 inputs and upstream gradients: every gradient vs the derived VJP at residual_out within twice its
    float64 bound (the kernel's and the float64 oracle's, the same model)."""
    example = example_of(x, residual, weight, bias, eps)
    got, grads = norms.gradients(kernel, example, {"y": dy, "residual_out": dh})
    expected, bounds = expected_gradients(kernel, example, dy, dh, got["residual_out"])
    comparisons = [outcome.compare(g, expected[name], 2 * bounds[name], f"d{name}") for name, g in grads.items()]
    outcome.conclude(comparisons, "float64 gradients must be computed in float64, not in a lower precision",
                     d=x.shape[-1], dtype=dtype_name(x.dtype))


def check_vjp_after_a_call_in_inference_mode(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float,
                                            dy: torch.Tensor, dh: torch.Tensor, bias=None) -> None:
    """A call under torch.inference_mode() on the same inputs first, then the gradients (:func:`check_vjp`): a kernel
    caching a tensor made there (inference tensors) cannot save it for the backward (sgl-project/sglang#33470)."""
    outputs(kernel, x, fresh(residual), weight, bias, eps, allow_nonfinite=True, any_dtype=True, inference=True)
    check_vjp(kernel, x, residual, weight, eps, dy, dh, bias)


def check_noncontiguous_upstream(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float,
                                dy: torch.Tensor, dh: torch.Tensor, bias=None) -> None:
    """dy and dh non-contiguous views (properties.checks.contracts.strided): every gradient is the contiguous
    upstream gradients' within twice its bound (the jacobian claim's, at the contiguous call's residual_out)."""
    example = example_of(x, residual, weight, bias, eps)
    upstream = {"y": dy, "residual_out": dh}
    got, laid_out, contiguous = gradients_in_both_layouts(kernel, example, upstream)
    conclude_upstream_layouts(kernel, upstream, laid_out, contiguous,
                              gradient_bounds(kernel, example, dy, dh, got["residual_out"]), d=x.shape[-1],
                              dtype=dtype_name(x.dtype))


def forward_after_an_in_place_update(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float,
                                     new_weight: torch.Tensor, bias=None, new_bias=None, p=None, seed=None,
                                     inference: bool = False) -> None:
    """A second call after weight and bias were overwritten in place (properties.checks.forward.updated_in_place)
    gives the norm of its residual_out at the new values (:func:`check_forward`); ``inference``: both calls under
    torch.inference_mode()."""
    updated = updated_in_place(kernel, example_of(x, residual, weight, bias, eps, p, seed),
                               {"weight": new_weight, "bias": new_bias}, inference=inference)
    check_forward(kernel, x, fresh(residual), updated["weight"], eps, updated["bias"], p, seed, inference=inference)


check_forward_after_an_in_place_update = output_dtype_rule(forward_after_an_in_place_update,
                                                           "check_forward_after_an_in_place_update")


def check_backward_of_the_recorded_graph(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float,
                                        dy: torch.Tensor, dh: torch.Tensor, bias=None, p=None, seed=None) -> None:
    """Inputs, y and residual_out written in place after the forward (the residual stream updated in place by the
    next layer), and a second backward of one graph (properties.checks.graph), within the gradient claim's bounds;
    the dropout + add kind's with its ``p`` and ``seed``."""
    example = example_of(x, residual, weight, bias, eps, p, seed)
    h = norms.call(kernel, {**example, "residual": fresh(residual)}, allow_nonfinite=True)["residual_out"]
    check_recorded_graph(kernel, lambda: example, {"y": dy, "residual_out": dh},
                         gradient_bounds(kernel, example, dy, dh, h), d=x.shape[-1], dtype=dtype_name(x.dtype))


def gradient_bounds(kernel, example: dict, dy: torch.Tensor, dh: torch.Tensor, residual_out: torch.Tensor
                    ) -> dict[str, np.ndarray]:
    """The jacobian claim's bound of each gradient (:func:`expected_gradients`, widened by the declared backward
    model), at the kernel's ``residual_out``."""
    x, residual = example["x"], example["residual"]
    h = normalized(kernel, residual_out, x, residual)
    expected, bounds = expected_gradients(kernel, example, dy, dh, h)
    _declared_backward(kernel, h, x, example["weight"], example["eps"], dy, expected, bounds)
    return bounds


def check_empty_batch(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float, dy: torch.Tensor,
                      dh: torch.Tensor, bias=None) -> None:
    """x, the residual, dy and dh with no rows (properties.checks.contracts.check_empty_batch_of)."""
    check_empty_batch_of(kernel, example_of(x, residual, weight, bias, eps), {"y": dy, "residual_out": dh})


def _declared_backward(kernel, h: torch.Tensor, x: torch.Tensor, weight, eps: float, dy: torch.Tensor,
                       expected: dict, bounds: dict) -> tuple[str, ...]:
    """Under declared conventions (:func:`norm_view`), in place: the weight (and bias) gradients are the norm's
    declared model at residual_out; the gradient of x and of the residual, J^T dy (the norm's, modelled) + dh
    rounded once, keeps its center and bound widened by the model's distance from the oracle plus the model's
    bound (properties.bounds.models.identity_bounds), times (1 + u_acc)(1 + u_out) <= 2. The conventions applied."""
    view = norm_view(kernel, h, x)
    if view is None:
        return ()
    centers, model_bounds, declared = models.expected_backward(view, h, weight, eps, dy)
    widening = 2 * models.identity_bounds(view, h, weight, eps, dy)["x"]
    for name in ("x", "residual"):
        if name in bounds:
            bounds[name] = bounds[name] + widening
    rows = int(np.prod(h.shape[:-1]))
    for name in ("weight", "bias"):
        if name in expected and name in centers:
            # the model widens each rounding relatively; a product or the stored sum that underflows errs by up to
            # half the smallest subnormal instead (proofs.error_model's eta): rows + 1 such roundings at most
            finfo = torch.finfo(x.dtype)
            expected[name], bounds[name] = centers[name], model_bounds[name] + (rows + 1) * finfo.tiny * finfo.eps / 2
    return declared


def check_inputs_unmodified(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float, dy: torch.Tensor,
                            dh: torch.Tensor, bias=None, p=None, seed=None, inference: bool = False) -> None:
    """x, residual (unless declared in place), weight, bias, dy (unless declared in place: then it holds dx) and dh
    are bit for bit the same after the call (p and seed: the dropout + add kind's); ``inference``: the forward alone,
    under torch.inference_mode() (a serving stack's path)."""
    inputs = {"x": x, "weight": weight, "bias": bias, UPSTREAM: dy, "upstream gradient of residual_out": dh}
    if "residual" not in kernel.in_place:
        inputs["residual"] = residual
    before = read_only(kernel, inputs)
    example = example_of(x, residual, weight, bias, eps, p, seed)
    if discover(kernel).backward and not inference:
        _, grads = norms.gradients(kernel, example, {"y": dy, "residual_out": dh}, same_tensors=True,
                                   allow_nonfinite=True, any_dtype=True)
        check_dx_written_into_dy(kernel, dy, grads["x"], x)
    else:
        norms.call(kernel, example, allow_nonfinite=True, any_dtype=True, inference=inference)
    changed = changed_inputs(before, inputs)
    outcome.exact(not changed, f"the kernel wrote into {', '.join(changed)}",
                  "inputs must be read-only unless declared", d=x.shape[-1], dtype=dtype_name(x.dtype))


def check_changing_one_row(kernel, x: torch.Tensor, changed: torch.Tensor, residual: torch.Tensor, weight,
                           eps: float, bias=None, p=None, seed=None) -> None:
    """``changed`` differs from x in row 0 only: rows 1.. of y and residual_out are identical (with dropout, the
    same seed: a mask drawn by position, not by value)."""
    before = outputs(kernel, x, fresh(residual), weight, bias, eps, p, seed, allow_nonfinite=True, any_dtype=True)
    after = outputs(kernel, changed, fresh(residual), weight, bias, eps, p, seed, allow_nonfinite=True,
                    any_dtype=True)
    moved = sorted({int(r) + 1 for a, b in zip(before, after, strict=True) for r in rows_that_differ(a[1:], b[1:])})
    outcome.exact(not moved, f"changing row 0 of x changed rows {moved[:8]} of y or residual_out",
                  "the statistics mix rows", d=x.shape[-1], dtype=dtype_name(x.dtype))


def check_noncontiguous(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float, bias=None, p=None,
                        seed=None, dy: torch.Tensor | None = None, dh: torch.Tensor | None = None) -> None:
    """Strided x and residual (and possibly weight and bias) give the contiguous call's residual_out and y within
    twice their bounds (p and seed: the dropout + add kind's, at p = 0 where dropout is the identity): y's bound in
    the output-dtype rule's dtype (weight and bias may be in another dtype than x), y's dtype itself not judged (the
    forward claim's business), as in properties.checks.contracts. A kernel declaring an in-place residual update
    must leave residual_out in the strided residual it was given. With ``dy`` and ``dh`` (contiguous upstream
    gradients, a kernel with a backward) each gradient through the strided inputs is the contiguous inputs' within
    twice the jacobian claim's bound (a backward writing dx into ``empty_like(x)`` as if contiguous fails; not for a
    kernel that updates the residual in place, whose gradients the graph claims check)."""
    passed = fresh_view(residual)
    y, h = outputs(kernel, x, passed, weight, bias, eps, p, seed, allow_nonfinite=True, any_dtype=True)
    if "residual" in kernel.in_place and passed is not None:
        outcome.exact(torch.equal(passed.to(h.dtype), h), "the strided residual tensor does not hold residual_out "
                      "after the call", "the kernel declares an in-place residual update, through any strides")
    weight, bias = (t if t is None else t.contiguous() for t in (weight, bias))
    contiguous = None if residual is None else residual.contiguous()
    y0, h0 = outputs(kernel, x.contiguous(), contiguous, weight, bias, eps, p, seed,
                     allow_nonfinite=True, any_dtype=True)
    bound = tolerance.forward(kernel, x, weight, bias, eps, h=normalized(kernel, h0, x, contiguous))
    _, h_bound = tolerance.residual_out(x, residual, h0.dtype)
    comparisons = [outcome.compare(y, y0, 2 * bound, "strided vs contiguous: y"),
                   outcome.compare(h, h0, 2 * np.asarray(h_bound), "strided vs contiguous: residual_out")]
    if dy is not None and discover(kernel).backward and "residual" not in kernel.in_place:
        upstream = {"y": dy, "residual_out": dh}
        _, laid_out = norms.gradients(kernel, example_of(x, residual, weight, bias, eps, p, seed), upstream,
                                      allow_nonfinite=True, any_dtype=True)
        dense_example = example_of(x.contiguous(), contiguous, weight, bias, eps, p, seed)
        _, dense = norms.gradients(kernel, dense_example, upstream, allow_nonfinite=True, any_dtype=True)
        bounds = gradient_bounds(kernel, dense_example, dy, dh, h0)
        comparisons += [outcome.compare(g, dense[name], 2 * bounds[name], f"strided vs contiguous: d{name}")
                        for name, g in laid_out.items()]
    outcome.conclude(comparisons, "the kernel reads x, the residual, weight or bias (or writes a gradient) as if they "
                     "were contiguous (strides or a storage offset ignored)", d=x.shape[-1], dtype=dtype_name(x.dtype))


def check_dropout_values(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float, p: float, seed: int,
                         bias=None, inference: bool = False) -> None:
    """Every residual_out element is the residual (dropped) or residual + x/(1-p) (kept), within its rounding;
    ``inference``: called under torch.inference_mode() (p is the caller's there too: no eval mode is implied)."""
    _, h = outputs(kernel, x, fresh(residual), weight, bias, eps, p, seed, inference=inference)
    outcome.conclude(dropout_values_comparison(h, x, residual, p),
                     "an element of residual_out is neither the residual nor residual + x/(1-p)",
                     p=p, d=x.shape[-1], dtype=dtype_name(x.dtype))


def check_edge_probabilities(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float, seed: int,
                             bias=None) -> None:
    """p = 0 keeps every element: residual_out is residual + x within its rounding (a kernel reading p = 0 as
    "unset" and dropping with a default p fails); p = 1 drops every element: residual_out is the residual exactly,
    or the call is refused with an error (x/(1-p) is x/0: never NaN, never a value)."""
    _, h = outputs(kernel, x, fresh(residual), weight, bias, eps, 0.0, seed)
    comparisons = [outcome.compare(norms.as_float64(h), norms.as_float64(residual) + norms.as_float64(x),
                                   tolerance.dropout_residual_out(x, residual, 0.0, h.dtype),
                                   "residual_out at p = 0 vs residual + x")]
    try:
        _, dropped = outputs(kernel, x, fresh(residual), weight, bias, eps, 1.0, seed)
    except guard.KernelFault as fault:
        if fault.reason != "raised":
            raise
    else:
        r64 = norms.as_float64(residual)
        comparisons.append(outcome.compare(norms.as_float64(dropped), r64, np.zeros_like(r64),
                                           "residual_out at p = 1 vs the residual (exactly)"))
    outcome.conclude(comparisons, "p = 0 must keep every element and p = 1 drop every one", d=x.shape[-1],
                     dtype=dtype_name(x.dtype))


def dropout_values_comparison(h: torch.Tensor, x: torch.Tensor, residual: torch.Tensor, p: float,
                              what: str = "residual_out") -> outcome.Comparison:
    """residual_out h, element by element, vs the nearer of the residual and residual + x/(1-p), within its
    rounding (properties.bounds.tolerance.dropout_residual_out)."""
    h64, r64 = norms.as_float64(h), norms.as_float64(residual)
    kept = r64 + norms.as_float64(x) / (1 - p)
    nearest = np.where(np.abs(h64 - r64) <= np.abs(h64 - kept), r64, kept)
    return outcome.compare(h64, nearest, tolerance.dropout_residual_out(x, residual, p, h.dtype),
                           f"{what} vs residual or residual + x/(1-p)")
