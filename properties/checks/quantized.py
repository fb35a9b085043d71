"""Checks of the quantized-output kinds (layernorm_quant, rmsnorm_quant, add_rmsnorm_quant;
proofs/claims/quantization.py), against the intervals of properties.bounds.quantized:

- {ln_quant,rms_quant,add_rms_quant}.values: q in [Q(v_low), Q(v_high)] at the kernel's own scale (exact unless y's
  interval holds a rounding boundary of Q);
- .scales: dynamic, the returned per-row scale [..., 1] float32 within max(amax / fmax, minimum_scale) of the declared
  y's interval (its inverse for "multiply"); static, the given scale returned bit for bit;
- .saturation: every element whose v lies beyond the format's range is its largest (lowest) value;
- .dequantized: |q s - y*| within properties.bounds.quantized.dequantized_bound;
- add_rms_quant.residual_out: as add_rms.residual_out (properties.bounds.tolerance.residual_out);
- .inputs_unmodified: x, the residual (unless declared in place), weight, bias and a static scale are not written.
"""

from __future__ import annotations

import numpy as np
import torch

from core import guard
from core.capabilities import dtype_name
from properties import evidence, norms, outcome
from properties.bounds import quantized as bounds
from properties.checks.contracts import read_only
from properties.checks.forward import updated_in_place
from properties.checks.fused import conclude_residual_out


def example_of(x: torch.Tensor, weight, eps: float, scale, quant_dtype: torch.dtype, residual=None,
               bias=None) -> dict:
    """A quantized-output kind's arguments keyed by role (core.kinds)."""
    return {"x": x, "residual": residual, "weight": weight, "bias": bias, "eps": eps, "scale": scale,
            "quant_dtype": quant_dtype}


def _point(x: torch.Tensor, quant_dtype: torch.dtype, scale) -> dict:
    return {"d": x.shape[-1], "dtype": dtype_name(x.dtype), "format": dtype_name(quant_dtype),
            "scale": "dynamic" if scale is None else "static"}


def _outputs(kernel, x, weight, eps, scale, quant_dtype, residual, bias):
    """(q, scale, h) of the kernel (h: the norm's input, x or the returned residual_out); the scale's dtype and shape
    are checked here for every claim (float32; [..., 1] per row when dynamic), since every check reads it."""
    given = None if residual is None else residual.clone()
    got = norms.call(kernel, example_of(x, weight, eps, scale, quant_dtype, given, bias))
    s = got["scale"]
    shape = (*x.shape[:-1], 1) if scale is None else tuple(scale.shape)
    if s.dtype != torch.float32 or tuple(s.shape) != shape:
        raise outcome.CheckFailure(f"the scale returned is {dtype_name(s.dtype)} {tuple(s.shape)}, not float32 "
                                   f"{shape} -- a dynamic scale is one float32 per row [..., 1]; a static one is "
                                   f"returned as given")
    return got["q"], s, got.get("residual_out", x)


def _intervals(kernel, x, weight, eps, scale, quant_dtype, residual, bias):
    q, s, h = _outputs(kernel, x, weight, eps, scale, quant_dtype, residual, bias)
    fmt = bounds.format_of(quant_dtype)
    y = bounds.declared_y(kernel, h, x, weight, bias, eps)
    s64 = np.broadcast_to(norms.as_float64(s), y.exact.shape)
    v_low, v_high = bounds.scaled(kernel, y.low, y.high, s64)
    return q, s, fmt, y, s64, v_low, v_high


def check_values(kernel, x: torch.Tensor, weight, eps: float, scale, quant_dtype: torch.dtype,
                 residual=None, bias=None) -> None:
    """q = Q(y / s) at the kernel's own y (its interval) and returned s."""
    q, _, fmt, y, _, v_low, v_high = _intervals(kernel, x, weight, eps, scale, quant_dtype, residual, bias)
    q_low, q_high = bounds.quantized(kernel, fmt, v_low, v_high)
    outcome.conclude(_within(q.float(), q_low, q_high, np.isfinite(y.bound), "q"),
                     f"q is not the {fmt.name} rounding of y {'* s' if _multiplies(kernel) else '/ s'} (saturated) "
                     f"for any y within the norm's bound", **_point(x, quant_dtype, scale))


def check_values_after_an_in_place_update(kernel, x: torch.Tensor, weight, eps: float, scale, quant_dtype: torch.dtype,
                                          residual=None, bias=None, new_weight=None, new_bias=None,
                                          new_scale=None) -> None:
    """A second call after weight, bias and a static scale were overwritten in place (a weight reload; a delayed-
    scaling recipe's scale update) quantizes with the new values (:func:`check_values`): a kernel caching a converted
    copy or the reciprocal of the scale by the tensor keeps the old ones."""
    updated = updated_in_place(kernel, example_of(x, weight, eps, scale, quant_dtype, residual, bias),
                               {"weight": new_weight, "bias": new_bias, "scale": new_scale})
    check_values(kernel, **updated)


def check_empty_batch(kernel, x: torch.Tensor, weight, eps: float, scale, quant_dtype: torch.dtype, residual=None,
                      bias=None) -> None:
    """x (and the residual) with no rows, [0, d] or [2, 0, d]: q and residual_out of x's shape, a dynamic scale of
    [..., 0, 1] (checked by every claim's call), no error (a mixture-of-experts layer routing no token to an expert
    quantizes its empty input so; a whole-tensor amax of nothing raises)."""
    point = _point(x, quant_dtype, scale)
    try:
        q, _, h = _outputs(kernel, x, weight, eps, scale, quant_dtype, residual, bias)
    except guard.KernelFault as fault:
        if fault.reason != "raised":
            raise
        outcome.exact(False, f"on x of shape {tuple(x.shape)}: {fault}", "an empty batch is a legal input", **point)
        return
    wrong = [f"{name} has shape {tuple(t.shape)}, not x's {tuple(x.shape)}" for name, t in (("q", q), ("h", h))
             if t.shape != x.shape]
    outcome.exact(not wrong, "; ".join(wrong), "an empty batch must give empty outputs", **point)


def _within(got, low: np.ndarray, high: np.ndarray, bounded: np.ndarray, what: str) -> outcome.Comparison:
    """got against the interval [low, high] as a comparison with its midpoint (error/bound <= 1 exactly inside; 0 at a
    single value); where the norm's bound is not finite (``bounded`` False) the element is unchecked, never a pass."""
    return outcome.compare(got, (low + high) / 2, np.where(bounded, (high - low) / 2, np.inf), what)


def _multiplies(kernel) -> bool:
    return kernel.quantization.scale_convention == "multiply"


def check_scales(kernel, x: torch.Tensor, weight, eps: float, scale, quant_dtype: torch.dtype,
                 residual=None, bias=None) -> None:
    """A dynamic scale within its interval (amax of the declared y over fmax, floored; its inverse for "multiply");
    a static scale returned as given."""
    _, s, h = _outputs(kernel, x, weight, eps, scale, quant_dtype, residual, bias)
    if scale is not None:
        outcome.exact(torch.equal(s, scale), "the static scale returned is not the scale given",
                      "a static scale is returned as given", **_point(x, quant_dtype, scale))
        return
    fmt = bounds.format_of(quant_dtype)
    y = bounds.declared_y(kernel, h, x, weight, bias, eps)
    low, high = bounds.dynamic_scale(kernel, fmt, y)
    what = "fmax / amax" if _multiplies(kernel) else "amax / fmax"
    outcome.conclude(_within(s, low, high, np.isfinite(y.bound).all(-1, keepdims=True), "scale"),
                     f"the dynamic scale is not {what} of the declared y ({kernel.quantization.quantizes}), "
                     f"floored at {kernel.quantization.minimum_scale:g}", **_point(x, quant_dtype, scale))


def check_saturation(kernel, x: torch.Tensor, weight, eps: float, scale, quant_dtype: torch.dtype,
                     residual=None, bias=None) -> None:
    """Every element whose v lies wholly beyond the format's range is saturated: +fmax above, the lowest below."""
    q, _, fmt, _, _, v_low, v_high = _intervals(kernel, x, weight, eps, scale, quant_dtype, residual, bias)
    lowest = bounds.quantized(kernel, fmt, np.array(-np.inf), np.array(-np.inf))[0]
    above, below = v_low > fmt.fmax, v_high < lowest - 1
    beyond = above | below
    if not np.any(beyond):  # the saturation draws make some; an example without is shown, never evidence
        evidence.record(ratio=None, unchecked=1, **_point(x, quant_dtype, scale))
        return
    expected = np.where(above, fmt.fmax, lowest)
    got = norms.as_float64(q.float())
    wrong = beyond & (got != expected)
    first = tuple(int(i) for i in np.argwhere(wrong)[0]) if np.any(wrong) else ()
    outcome.exact(not first, f"q at {first} is {got[first] if first else 0:g}, not the saturated "
                  f"{expected[first] if first else 0:g} ({int(wrong.sum())} of {int(beyond.sum())} elements beyond "
                  f"the range of {fmt.name})", "q must saturate at the format's largest (lowest) value",
                  **_point(x, quant_dtype, scale))


def check_dequantized(kernel, x: torch.Tensor, weight, eps: float, scale, quant_dtype: torch.dtype,
                      residual=None, bias=None) -> None:
    """|q s - y*| (q / s for "multiply") within the derived bound."""
    q, _, fmt, y, s64, v_low, v_high = _intervals(kernel, x, weight, eps, scale, quant_dtype, residual, bias)
    q64 = norms.as_float64(q.float())
    dequantized = q64 / s64 if _multiplies(kernel) else q64 * s64
    bound = bounds.dequantized_bound(kernel, fmt, y, s64, v_low, v_high)
    outcome.conclude(outcome.compare(dequantized, y.exact, bound, "dequantized q"),
                     "the dequantized output is farther from N(h) than the norm's bound plus half a quantum",
                     **_point(x, quant_dtype, scale))


def check_residual_out(kernel, x: torch.Tensor, weight, eps: float, scale, quant_dtype: torch.dtype,
                       residual=None, bias=None) -> None:
    """residual_out as add_rms.residual_out (properties.checks.fused.conclude_residual_out)."""
    given = None if residual is None else residual.clone()
    got = norms.call(kernel, example_of(x, weight, eps, scale, quant_dtype, residual, bias))
    conclude_residual_out(kernel, got["residual_out"], x, given, residual, **_point(x, quant_dtype, scale))


def check_inputs_unmodified(kernel, x: torch.Tensor, weight, eps: float, scale, quant_dtype: torch.dtype,
                            residual=None, bias=None, inference: bool = False) -> None:
    """x, the residual (unless the kernel declares an in-place residual update), weight, bias and a static scale are
    bit for bit the same after the call (``inference``: under torch.inference_mode(), a serving stack's call, where
    a kernel writing its normalized output into x as scratch is tempting)."""
    inputs = {"x": x, "weight": weight, "bias": bias, "scale": scale}
    if "residual" not in kernel.in_place:
        inputs["residual"] = residual
    before = read_only(kernel, inputs)
    norms.call(kernel, example_of(x, weight, eps, scale, quant_dtype, residual, bias), allow_nonfinite=True,
               any_dtype=True, inference=inference)
    changed = [name for name, copy in before.items() if not torch.equal(copy, inputs[name])]
    outcome.exact(not changed, f"the kernel wrote into {', '.join(changed)}", "inputs must be read-only unless "
                  "declared", **_point(x, quant_dtype, scale))
