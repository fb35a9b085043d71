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
from properties.checks.bitwise import bit_difference
from properties.checks.contracts import changed_inputs, read_only
from properties.checks.forward import updated_in_place
from properties.checks.fused import conclude_residual_out, fresh_view


def example_of(x: torch.Tensor, weight, eps: float, scale, quant_dtype: torch.dtype, residual=None,
               bias=None) -> dict:
    """A quantized-output kind's arguments keyed by role (core.kinds)."""
    return {"x": x, "residual": residual, "weight": weight, "bias": bias, "eps": eps, "scale": scale,
            "quant_dtype": quant_dtype}


def _point(x: torch.Tensor, quant_dtype: torch.dtype, scale) -> dict:
    return {"d": x.shape[-1], "dtype": dtype_name(x.dtype), "format": dtype_name(quant_dtype),
            "scale": "dynamic" if scale is None else "static"}


def _outputs(kernel, x, weight, eps, scale, quant_dtype, residual, bias, allow_nonfinite: bool = False):
    """(q, scale, h) of the kernel (h: the norm's input, x or the returned residual_out); the scale's dtype and shape
    are checked here for every claim (float32; [..., 1] per row when dynamic), since every check reads it. The residual
    is passed as a copy in its own layout (a view stays a view: checks.fused.fresh_view). ``allow_nonfinite``: a NaN
    output is judged by the check (a view read past its bounds reads the buffer's NaN), not refused as a fault."""
    got = norms.call(kernel, example_of(x, weight, eps, scale, quant_dtype, fresh_view(residual), bias),
                     allow_nonfinite=allow_nonfinite)
    s = got["scale"]
    shape = (*x.shape[:-1], 1) if scale is None else tuple(scale.shape)
    if s.dtype != torch.float32 or tuple(s.shape) != shape:
        raise outcome.CheckFailure(f"the scale returned is {dtype_name(s.dtype)} {tuple(s.shape)}, not float32 "
                                   f"{shape} -- a dynamic scale is one float32 per row [..., 1]; a static one is "
                                   f"returned as given")
    return got["q"], s, got.get("residual_out", x)


def _intervals(kernel, x, weight, eps, scale, quant_dtype, residual, bias, allow_nonfinite: bool = False):
    q, s, h = _outputs(kernel, x, weight, eps, scale, quant_dtype, residual, bias, allow_nonfinite)
    fmt = bounds.format_of(quant_dtype)
    y = bounds.declared_y(kernel, h, x, weight, bias, eps)
    s64 = np.broadcast_to(norms.as_float64(s), y.exact.shape)
    v_low, v_high = bounds.scaled(kernel, y.low, y.high, s64)
    return q, s, fmt, y, s64, v_low, v_high


def check_values(kernel, x: torch.Tensor, weight, eps: float, scale, quant_dtype: torch.dtype,
                 residual=None, bias=None, allow_nonfinite: bool = False) -> None:
    """q = Q(y / s) at the kernel's own y (its interval) and returned s (x and the residual in any layout: strided
    views are normalized as their values; ``allow_nonfinite``: a NaN q fails here, not as a fault)."""
    q, _, fmt, y, _, v_low, v_high = _intervals(kernel, x, weight, eps, scale, quant_dtype, residual, bias,
                                                allow_nonfinite)
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
                 residual=None, bias=None, allow_nonfinite: bool = False) -> None:
    """A dynamic scale within its interval (amax of the declared y over fmax, floored; its inverse for "multiply");
    a static scale returned as given (``allow_nonfinite`` as :func:`check_values`)."""
    _, s, h = _outputs(kernel, x, weight, eps, scale, quant_dtype, residual, bias, allow_nonfinite)
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
                       residual=None, bias=None, allow_nonfinite: bool = False) -> None:
    """residual_out as add_rms.residual_out (properties.checks.fused.conclude_residual_out), x and the residual in
    any layout (``allow_nonfinite`` as :func:`check_values`)."""
    given = None if residual is None else residual.clone()
    got = norms.call(kernel, example_of(x, weight, eps, scale, quant_dtype, residual, bias),
                     allow_nonfinite=allow_nonfinite)
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
    changed = changed_inputs(before, inputs)
    outcome.exact(not changed, f"the kernel wrote into {', '.join(changed)}", "inputs must be read-only unless "
                  "declared", **_point(x, quant_dtype, scale))


def _rows(t: torch.Tensor) -> torch.Tensor:
    """t as rows [n, d'] (the leading dimensions flattened)."""
    return t.reshape(-1, t.shape[-1])


def _other_rows_unchanged(clean: dict, dirty: dict) -> list[str]:
    """The outputs whose rows 1.. differ in their bits between the two calls (NaN equal to NaN of the same bits)."""
    return [name for name, t in clean.items() if t.dim() and _rows(t).shape[0] > 1
            and bit_difference(_rows(t)[1:], _rows(dirty[name])[1:])[0]]


def check_nonfinite_row(kernel, x: torch.Tensor, poisoned: torch.Tensor, weight, eps: float, scale,
                        quant_dtype: torch.dtype, residual=None, bias=None) -> None:
    """``poisoned`` is x with a NaN or +-inf in row 0. Then h's row 0 (x, or x + residual) is non-finite there, and so
    is y: the row's statistics are NaN or infinite (LayerNorm: inf - mean(inf); RMSNorm: inf * rsqrt(inf) = inf 0),
    y = NaN at every non-finite element of h (and, for a NaN, everywhere in the row), under IEEE arithmetic. The
    contract (the model of *.values and *.scales, proofs/claims/quantization.py, with NaN propagated as torch's amax,
    clamp and FP8 conversion do):

    - rows 1.. of q, of a dynamic scale and of residual_out have the bits of the call on x (NaN stays in its row);
    - row 0 shows the NaN: with a dynamic scale, the row's scale is NaN (amax = max |y_i| of a row with a NaN, the
      IEEE maximum that propagates NaN), or q is not finite (FP8: NaN; e5m2 also +-inf) at every non-finite element
      of h (Q(NaN) = NaN: a kernel whose amax drops NaN but whose conversion keeps it is accepted); with a static FP8
      scale, q is not finite there.

    The failure is a row that comes back finite with a finite scale: a clamp written fmaxf(-M, fminf(v, M)) and an
    amax reduced with fmaxf (both drop NaN: vLLM's scaled_fp8_conversion, FlashInfer's RMSNormQuantKernel) give
    q = +fmax where y is NaN and the floor as the scale, and the next GEMM runs on saturated garbage. INT8 has no
    NaN: a static INT8 scale cannot show it (those draws check the other rows only; the tests draw none)."""
    point = _point(x, quant_dtype, scale)
    inputs = example_of(x, weight, eps, scale, quant_dtype, residual, bias)
    clean = norms.call(kernel, {**inputs, "residual": fresh_view(residual)}, allow_nonfinite=True)
    dirty = norms.call(kernel, {**inputs, "x": poisoned, "residual": fresh_view(residual)}, allow_nonfinite=True)
    moved = _other_rows_unchanged({k: v for k, v in clean.items() if k != "scale" or scale is None}, dirty)
    outcome.exact(not moved, f"a non-finite value in row 0 of x changed rows 1.. of {', '.join(moved)}",
                  "NaN/inf must stay within their row", **point)
    h0 = _rows(dirty.get("residual_out", poisoned))[0]
    where = ~torch.isfinite(h0.float())
    q0, s0 = _rows(dirty["q"])[0].float(), _rows(dirty["scale"])[0]
    q_shows = quant_dtype.is_floating_point and bool((~torch.isfinite(q0[where])).all())
    s_shows = scale is None and bool(torch.isnan(s0).any())
    column = int(where.nonzero()[0]) if bool(where.any()) else 0
    given = f"a dynamic scale of {float(s0[0]):g}" if scale is None else "a static scale"
    outcome.exact(q_shows or s_shows, f"row 0 of h holds {float(h0[column])} at column {column}, but q there is "
                  f"{float(q0[column]):g} with {given}", "a NaN/inf row must not come back as finite q with a finite "
                  "scale (the NaN hidden by a NaN-dropping clamp or amax)", **point)


def check_outputs_fresh(kernel, x: torch.Tensor, other: torch.Tensor, weight, eps: float, scale,
                        quant_dtype: torch.dtype, residual=None, bias=None, inference: bool = False) -> None:
    """A second call on ``other`` (another x; ``inference``: both under torch.inference_mode(), a serving stack's
    call) leaves the first call's q, dynamic scale and residual_out bit for bit as they were: no output is a
    buffer the kernel keeps and writes again (a persistent or CUDA-graph output buffer behind a functional
    signature). A static scale is returned as given (the caller's own tensor): not an output the kernel owns."""
    def call(values: torch.Tensor) -> dict[str, torch.Tensor]:
        return norms.call(kernel, example_of(values, weight, eps, scale, quant_dtype, fresh_view(residual), bias),
                          allow_nonfinite=True, inference=inference)

    first = {name: t for name, t in call(x).items() if name != "scale" or scale is None}
    kept = {name: t.clone() for name, t in first.items()}
    call(other)
    changed = [name for name, t in first.items() if bit_difference(t, kept[name])[0]]
    mode = "under inference_mode" if inference else "with grad mode on"
    outcome.exact(not changed, f"a second call {mode} changed the first call's {', '.join(changed)}",
                  "outputs must be fresh tensors (a reused output buffer is overwritten by the next call)",
                  **_point(x, quant_dtype, scale))
