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
from core.boundary import HOST
from core.capabilities import dtype_name
from core.registry import Kernel
from proofs import batchnorm_oracles, error_model, oracles, probabilistic
from proofs import second_order as second_order_bounds
from proofs.error_terms import C_RSQRT
from properties import norms
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


def _norm_rows(kernel: Kernel, h: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
               num_groups: int | None) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(the norm's rows, gamma, beta) in float64: h over the last axis, or a grouped kind's [N, G, (C/G) S] view with
    its per-channel parameters spread over each group's elements (properties.norms.grouped, per_element)."""
    h64 = as_float64(h)
    gamma, beta = norms.gammas(kernel, weight, bias)
    return (norms.grouped(kernel, h64, num_groups), norms.per_element(kernel, gamma, h64.shape, num_groups),
            norms.per_element(kernel, beta, h64.shape, num_groups))


def forward(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
            eps: float, model: str | None = None, *, h: torch.Tensor | None = None,
            num_groups: int | None = None, output: torch.dtype | None = None) -> np.ndarray:
    """Per-element bound on |y - N(h)|, shape of h, for every norm kind: h the norm's input (x, or a fused kernel's
    residual_out), over the grouped view for a grouped kind (``num_groups``); y rounded to ``output``, the dtype the
    kernel returned it in where the contract allows more than one (a fused kernel's y in residual_out's float32 beside
    16-bit x: float32's accuracy, not x's), else the output dtype of the example's x and weight
    (:func:`operand_roundoffs`); the kernel's declared reduction as far as it holds on h's device and dtype, its
    flush-to-zero (``model``: the run's, :func:`bound_in_use`)."""
    h = x if h is None else h
    u = operand_roundoffs(kernel, x, weight, bias)
    if output is not None:
        u["y"] = error_model.unit_roundoff(dtype_name(output))
    rows, gamma, beta = _norm_rows(kernel, h, weight, bias, num_groups)
    bound = error_model.forward_bound(rows, gamma, beta, eps, u["acc"], u["y"], kernel.record.norm,
                                      model or bound_in_use(), declared=declared_reduction(kernel, h),
                                      flush_to_zero=kernel.flush_to_zero)
    if kernel.affine_precision == "storage":
        bound = bound + _storage_affine(rows, gamma, beta, eps, u["x"])
    return norms.ungrouped(kernel, np.broadcast_to(np.asarray(bound, dtype=np.float64), rows.shape), tuple(h.shape))


def oracle_forward(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                   eps: float, model: str | None = None) -> np.ndarray:
    """Per-element bound on the float64 oracle's own error |N64(x) - N(x)|: the error model's forward bound with every
    operation in float64 (u_acc = u_out = 2^-53; any order, so it holds for the oracle's two-pass evaluation).
    Negligible beside a 16-bit or float32 kernel's bound; as large as a float64 kernel's, so a float64 example's
    tolerance is the sum of both (the kernel's and the oracle's distances to the exact N(x))."""
    rows, gamma, beta = _norm_rows(kernel, x, weight, bias, None)
    u64 = error_model.unit_roundoff("float64")
    bound = error_model.forward_bound(rows, gamma, beta, eps, u64, u64, kernel.record.norm, model or bound_in_use())
    return np.broadcast_to(np.asarray(bound, dtype=np.float64), rows.shape)


def _storage_affine(rows: np.ndarray, gamma: np.ndarray | None, beta: np.ndarray | None, eps: float,
                    u_x: float) -> np.ndarray:
    """What the per-channel affine map y = x a + b adds to y's error when it is applied in x's dtype (a kernel's
    ``affine_precision="storage"``), per element of the rows: rstd and mean rounded to x's dtype, a = gamma rstd and
    b = beta - mean a rounded again, so |da| <= 2 u_x |a| and |db| <= u_x |beta| + 4 u_x |mean a| (to first order;
    the factor (1 + u_x)^2 covers the rest), and

        |x da + db| <= u_x (1 + u_x)^2 (2 |a| (|x| + 2 |mean|) + |beta|),

    with the exact statistics in place of the computed ones (their own error is the forward bound's)."""
    mean = rows.mean(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = (1.0 if gamma is None else np.abs(gamma)) / np.sqrt(rows.var(axis=-1, keepdims=True) + eps)
    offset = 0.0 if beta is None else np.abs(beta)
    return u_x * (1 + u_x) ** 2 * (2 * scale * (np.abs(rows) + 2 * np.abs(mean)) + offset)


def covered(kernel: Kernel, x: torch.Tensor, eps: float, *, num_groups: int | None = None) -> bool:
    """Whether the forward bound is finite on every row of x, the norm's input (the error model applies:
    rho_t < 1)."""
    rows = norms.grouped(kernel, as_float64(x), num_groups)
    return error_model.forward_bound_finite(rows, eps, unit_roundoffs(x.dtype)[0], kernel.record.norm,
                                            bound_in_use(), declared=declared_reduction(kernel, x),
                                            flush_to_zero=kernel.flush_to_zero)


def backward_accumulation(kernel: Kernel, storage: torch.dtype) -> float:
    """u_acc of the backward for data stored in ``storage``: the accumulation dtype's, or the storage dtype's for a
    kernel that declares ``backward_precision="storage"`` (statistics and sums kept in the storage dtype)."""
    u_acc, u_storage = unit_roundoffs(storage)
    return u_storage if kernel.backward_precision == "storage" else u_acc


def backward(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None, eps: float,
             dy: torch.Tensor, model: str | None = None, *, bias: torch.Tensor | None = None,
             h: torch.Tensor | None = None, dh: torch.Tensor | None = None, residual: torch.Tensor | None = None,
             p: float | None = None, num_groups: int | None = None) -> dict[str, np.ndarray]:
    """Per-element bounds on the kernel's gradients, for every norm kind, each rounded once to its own dtype
    (:func:`operand_roundoffs`; the bias taken in the weight's dtype, as the strategies draw it), u_acc by
    :func:`backward_accumulation`, the declared reduction and flush-to-zero as in :func:`forward`:

    - plain kinds: {"x": [..., d], "weight": [d], "bias": [d] (LayerNorm)} (proofs.error_model.backward_bound);
    - grouped kinds: dx per group, dweight and dbias per channel (:func:`_channel_sums`);
    - kinds with a residual, at residual_out h with dh the upstream gradient of residual_out: also "residual", the
      gradient of x and of the residual a k-term sum (:func:`_through_residual`), times the dropout scale
      1/(1 - p) for x when ``p`` is given (x dropped out: the check zeroes the dropped elements' bounds).

    No "weight" entry without a weight."""
    model = model or bound_in_use()
    if kernel.record.has_residual:
        return _through_residual(kernel, x, weight, bias, eps, dy, model, h, dh, residual, p)
    u = operand_roundoffs(kernel, x, weight, weight if bias is None else bias)
    u_acc = backward_accumulation(kernel, x.dtype)
    if kernel.record.scope != "row":
        return _grouped_backward(kernel, x, weight, bias, eps, dy, model, num_groups, u, u_acc)
    bounds = error_model.backward_bound(as_float64(x), effective_weight(kernel, weight), eps, as_float64(dy),
                                        u_acc, u["x"], kernel.record.norm, model,
                                        u_weight=u["weight"], u_bias=u["bias"], declared=declared_reduction(kernel, x),
                                        flush_to_zero=kernel.flush_to_zero)
    named = dict(zip(("x", "weight", "bias"), bounds, strict=False))
    return {name: np.asarray(b, dtype=np.float64) for name, b in named.items() if b is not None}


def _grouped_backward(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                      eps: float, dy: torch.Tensor, model: str, num_groups: int, u: dict[str, float], u_acc: float
                      ) -> dict[str, np.ndarray]:
    """The gradient bounds of a kind over a view of x [N, C, *] (properties.norms.grouped): dx within
    error_model.backward_bound of each row of the view (LayerNorm over its elements, per-element gamma); dweight_c =
    sum over (n, s) of dy xhat and dbias_c = sum of dy over the N S elements of channel c (LayerNorm over (C, *): of
    element (c, s), over the N samples), in any order: with f the forward bound of xhat (gamma = 1, beta = 0, no
    storage rounding) and g = gamma_{terms - 1},
        |dweight_c error| <= (1 + g) sum (|dy| f + u |dy xhat|) + g sum |dy xhat| + u_out |dweight_c|,
        |dbias_c error|   <= g sum |dy| + u_out |dbias_c|          (plus the oracle's 2^-53 relative),
    u_out of the parameter's own dtype, and the rounding's eta where the stored gradient underflows (:func:`_eta`)."""
    x64, dy64 = as_float64(x), as_float64(dy)
    rows, gamma, _ = _norm_rows(kernel, x, weight, None, num_groups)
    upstream = norms.grouped(kernel, dy64, num_groups)
    declared = declared_reduction(kernel, x)
    dx = norms.ungrouped(kernel, np.stack(
        [error_model.backward_bound(rows[:, g], None if gamma is None else gamma[g], eps, upstream[:, g], u_acc,
                                    u["x"], "ln", model, declared=declared, flush_to_zero=kernel.flush_to_zero)[0]
         for g in range(rows.shape[1])], axis=1), x64.shape)
    xhat_error = error_model.forward_bound(rows, None, None, eps, u_acc, u_acc, "ln", "worst-case")
    xhat = norms.reference(kernel, x, None, None, eps, num_groups)
    exact = norms.reference_vjp(kernel, x, weight, eps, dy, num_groups)
    terms = x64.shape[0] * (1 if kernel.record.scope == "sample" else int(np.prod(x64.shape[2:], dtype=np.int64)))
    g = terms * u_acc / (1 - terms * u_acc) if terms * u_acc < 1 else np.inf

    def summed(values: np.ndarray) -> np.ndarray:
        return norms.parameter_sums(kernel, values)

    products = np.abs(dy64 * xhat)
    bounds = {"x": dx}
    if weight is not None:
        dweight = ((1 + g) * summed(np.abs(dy64) * norms.ungrouped(kernel, xhat_error, x64.shape) + u_acc * products)
                   + g * summed(products))
        bounds["weight"] = dweight + (u["weight"] + U64) * np.abs(exact["weight"]) + _eta(kernel, weight.dtype)
    eta_bias = _eta(kernel, x.dtype if bias is None else bias.dtype)
    bounds["bias"] = g * summed(np.abs(dy64)) + (u["bias"] + U64) * np.abs(exact["bias"]) + eta_bias
    return bounds


U64 = 2.0**-53
def _eta(kernel: Kernel, dtype: torch.dtype) -> float:
    """The absolute error of one rounding to ``dtype`` whose result underflows (proofs.error_model.underflow: half
    the smallest subnormal, the smallest normal for a kernel that flushes to zero)."""
    return error_model.underflow(unit_roundoffs(dtype)[1], kernel.flush_to_zero)


# k of the k-term sum of dL/dh: the terms of N's backward combination (proofs.error_terms.backward_terms) and dh
ACCUMULATED_TERMS = {"ln": 4, "rms": 3}


def _through_residual(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                      eps: float, dy: torch.Tensor, model: str, h: torch.Tensor, dh: torch.Tensor,
                      residual: torch.Tensor, p: float | None) -> dict[str, np.ndarray]:
    """The gradient bounds of a kind with a residual (docs/ARCHITECTURE.md, fused bounds).

    d = J_N(h)^T dy + dh, rounded to each input's dtype. A fused kernel forms it in the accumulation dtype; a
    composition (h = x + residual, then N(h), in plain torch) gets it from autograd, which adds the gradients reaching
    h from each of its uses (residual_out itself: dh; N's uses of h: the terms of N's backward) in h's dtype, a
    rounding after every partial sum, in an order the suite cannot know. Both are one model, a k-term sum (Higham
    Lemma 3.1, any order): the terms c_1..c_{k-1} of J^T dy (LayerNorm: r g', r c1, r xhat c2; RMSNorm: r g',
    r xhat c2; proofs.error_terms.backward_terms), each computed within the error model's bound B of J^T dy
    (u_out = u_acc: B bounds |sum_j c^_j - J^T dy|) and rounded to h's dtype, plus dh, added in any order with
    k - 1 roundings of unit u_s = max(u_acc, u_h), u_h of h's dtype. With M >= sum_j |c^_j| (the terms' magnitude,
    error_model.backward_terms_magnitude: every partial sum of the c_j is at most M) and t = J^T dy + dh exact:
        |fl_s-sum(fl_h(c^_1), ..., fl_h(c^_{k-1}), dh) - t| <= B + u_h M + gamma_{k-1}(u_s) ((1 + u_h) M + |dh|) =: B_d
    (the storing of each term errs u_h |c^_j|, at most u_h M in all; the sum's error is gamma_{k-1} times the sum of
    its terms' magnitudes, which bounds every partial sum). Then one rounding to each input's dtype (u_o):
        |fl_o(d^) - t| <= B_d (1 + u_o) + u_o |t| + eta_o.
    Each rounding whose result underflows errs by eta (:func:`_eta`: half the smallest subnormal, the smallest normal
    under flush-to-zero) instead: 2 (k - 1) such roundings in h's dtype inside B_d, one to each input's dtype
    (a gradient below float16's smallest normal, 6.1e-5, is stored on the subnormal grid).
    A fused kernel (one rounding of fl_acc(a^ + dh), k = 2, u_h = u_acc) and torch's unfused composition in 16-bit
    (fl_h(fl_h(J^T dy) + dh), two roundings at u_h, docs/findings.md [R1]) are special cases; so are compositions
    with float64 or float32 statistics, a float32 residual_out (dh added among N's float32 terms), and chunked
    (Chan-merged) statistics, whose chunks' terms are pieces of the same c_j (tests/corpus/composed.py).
    Dropout multiplies d by the scale s = 1/(1 - p): fused, fl_o(fl_acc(d fl_acc(s))); unfused (dropout applied to
    the branch in storage before the add, as torch's F.dropout is: its backward gets d rounded to the output dtype),
    fl_o(fl(fl_o(d) fl_o(s))). Four roundings at most, each within u_o >= u_acc:
        |dx - m t/(1 - p)| <= s B' (1 + u_o)^4 + ((1 + u_o)^4 - 1) s |t| + 4 (1 + u_o)^3 eta_o,
    with B' the bound of d before its rounding to the output dtype. Every bound adds the float64 oracle's own
    error (2^-53 relative, of the same sums)."""
    norm = kernel.record.norm
    dh = dh.to(h.dtype)  # autograd's upstream gradient of residual_out is in its dtype
    h64, dy64, dh64 = as_float64(h), as_float64(dy), as_float64(dh)
    gamma = effective_weight(kernel, weight)
    u_acc = backward_accumulation(kernel, x.dtype)
    u = operand_roundoffs(kernel, x, weight, bias)
    declared = declared_reduction(kernel, h)
    # dweight and dbias are stored in their own dtypes (u_weight, u_bias), dx's k-term sum goes on at u_acc
    (accumulated, *parameters), terms = error_model.residual_backward_bounds(
        h64, gamma, eps, dy64, u_acc, norm, model, u_weight=u["weight"], u_bias=u["bias"], declared=declared,
        flush_to_zero=kernel.flush_to_zero)
    magnitude = np.abs(norms.reference_vjp(kernel, h, weight, eps, dy, dh=dh)["x"])
    u_h = unit_roundoffs(h.dtype)[1]
    k = ACCUMULATED_TERMS[norm]
    gamma_sum = probabilistic.gamma(k - 1, max(u_acc, u_h))
    before_rounding = (accumulated + u_h * terms + gamma_sum * ((1 + u_h) * terms + np.abs(dh64))
                       + 2 * (k - 1) * _eta(kernel, h.dtype))
    bounds = {}
    for name, given in (("x", x), ("residual", residual)):
        if given is None:
            continue
        u_o, eta_o = unit_roundoffs(given.dtype)[1], _eta(kernel, given.dtype)
        if name == "x" and p is not None:
            scale = 1.0 / (1.0 - p) if p < 1 else 0.0  # p = 1 drops every element: dL/dx is 0 exactly
            bounds[name] = (scale * before_rounding * (1 + u_o) ** 4 + ((1 + u_o) ** 4 - 1) * scale * magnitude
                            + U64 * scale * magnitude + 4 * (1 + u_o) ** 3 * eta_o)
        else:
            bounds[name] = before_rounding * (1 + u_o) + u_o * magnitude + U64 * magnitude + eta_o
    for name, bound in zip(("weight", "bias"), parameters, strict=False):
        if bound is not None and (weight if name == "weight" else bias) is not None:
            bounds[name] = np.asarray(bound, dtype=np.float64)
    return bounds


# roundings of a running-statistics update new = (1 - m) old + m b in the buffers' dtype, in any of its forms
# ((1 - m) old + m b, old + m (b - old), a lerp): the momentum's own rounding to that dtype, 1 - m, two products and a
# sum (or a difference, a product and a sum), each relative to at most |old| + m |b|
RUNNING_UPDATE_ROUNDINGS = 6
# roundings of eval-mode BatchNorm y = gamma (x - mu_R) rsqrt(var_R + eps) + beta, in any of its forms (as written,
# or the per-channel a = gamma rsqrt(var_R + eps), c = beta - a mu_R, y = a x + c): var_R + eps, the reciprocal
# square root (proofs.error_terms.C_RSQRT), the products with gamma and x - mu_R (or a mu_R and a x), the subtraction
# and the additions, each relative to at most |a| (|x| + |mu_R|) + |beta|
EVAL_ROUNDINGS = 5 + C_RSQRT


def running_statistics(kernel: Kernel, x: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor,
                       momentum: float, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel bounds on |new - exact| of a kernel's running (mean, var) after one training call on x, from the
    buffers before it (claims bn.running_statistics, in.running_statistics): with m the weight of the batch statistic
    (the declared momentum convention: m or 1 - m), b its exact value (BatchNorm: the channel's mean, or the declared
    variance, n/(n - 1) sigma^2 or sigma^2; InstanceNorm: the average over the N samples of each instance's mean and
    S/(S - 1) sigma^2), e_b the error of the kernel's statistic (proofs.error_model.statistics_bounds over each row of
    n elements, worst case: the forward's statistics; the unbiased factor's two roundings, and InstanceNorm's average
    of N terms, gamma_N relative to the average of the magnitudes, added), and u_R the buffers' unit roundoff,

        |new - exact| <= m e_b + gamma_k(u_R) (|old| + m |b|),   k = RUNNING_UPDATE_ROUNDINGS,

    plus the float64 oracle's 2^-52 relative. A second update in one call, the other convention, a biased variance
    where the unbiased one is declared (m sigma^2/(n - 1)) or a buffer left alone miss by far more."""
    rows = norms.grouped(kernel, as_float64(x), None)  # [A, C, n]: A = 1 (BatchNorm) or N samples (InstanceNorm)
    u_acc = unit_roundoffs(x.dtype)[0]
    e_mean, e_var = error_model.statistics_bounds(rows, eps, u_acc, declared=declared_reduction(kernel, x),
                                                  flush_to_zero=kernel.flush_to_zero)
    n, samples = rows.shape[-1], rows.shape[0]
    factor = n / (n - 1) if kernel.running_variance == "unbiased" else 1.0
    variance = factor * np.var(rows, axis=-1)
    if factor != 1.0:
        e_var = factor * e_var + probabilistic.gamma(2, u_acc) * (variance + factor * e_var)
    average = probabilistic.gamma(samples, u_acc) if samples > 1 else 0.0
    means = rows.mean(axis=-1)
    e_mean = e_mean.mean(axis=0) + average * np.abs(means).mean(axis=0)
    e_var = e_var.mean(axis=0) + average * variance.mean(axis=0)
    m = float(momentum) if kernel.momentum_convention == "torch" else 1.0 - float(momentum)
    update = probabilistic.gamma(RUNNING_UPDATE_ROUNDINGS, unit_roundoffs(running_mean.dtype)[1])
    bounds = []
    for old, statistic, error in ((running_mean, means.mean(axis=0), e_mean),
                                  (running_var, variance.mean(axis=0), e_var)):
        magnitude = np.abs(as_float64(old)) + m * np.abs(statistic)
        bounds.append(m * error + (update + 2.0**-52) * magnitude + _eta(kernel, old.dtype))
    return bounds[0], bounds[1]


def running_update_of_one_element(kernel: Kernel, x: torch.Tensor, running_mean: torch.Tensor,
                                  running_var: torch.Tensor, momentum: float
                                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(expected mean, its bound, lowest var, highest var) per channel after a training call on one element per
    channel (x [1, C] or [1, C, 1...]): the mean is the element, new = (1 - m) old + m x within the update's
    roundings gamma_k(u_R) (|old| + m |x|); the variance's unbiased factor n / (n - 1) is undefined at n = 1, so
    the buffer is either left alone or updated with the only variance there is, 0: new in [(1 - m) old, old], within
    gamma_k(u_R) |old| (never NaN: torch/nn#1271's sum / (n - 1) = 0 / 0)."""
    m = float(momentum) if kernel.momentum_convention == "torch" else 1.0 - float(momentum)
    update = probabilistic.gamma(RUNNING_UPDATE_ROUNDINGS, unit_roundoffs(running_mean.dtype)[1]) + 2.0**-52
    old_mean, old_var = as_float64(running_mean), as_float64(running_var)
    element = as_float64(x).reshape(x.shape[1])
    mean_bound = update * (np.abs(old_mean) + m * np.abs(element)) + _eta(kernel, running_mean.dtype)
    var_slack = update * np.abs(old_var) + _eta(kernel, running_var.dtype)
    return (1 - m) * old_mean + m * element, mean_bound, (1 - m) * old_var - var_slack, old_var + var_slack


def running_eval(kernel: Kernel, x: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor,
                 weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float) -> np.ndarray:
    """Per-element bound on |y - y_exact| of eval-mode BatchNorm or InstanceNorm, the per-channel affine map
    y = a (x - mu_R) + beta, a = gamma / sqrt(var_R + eps) (claims bn.eval, in.eval): each of its
    k = EVAL_ROUNDINGS operations in the accumulation dtype (u_acc) is relative to at most
    |a| (|x| + |mu_R|) + |beta|, and y is rounded once to its dtype (u_y),

        |y - y_exact| <= gamma_k(u_acc) (|a| (|x| + |mu_R|) + |beta|) (1 + u_y) + u_y |y_exact| + eta_y,

    plus the oracle's 2^-52 relative, and 2 u_x magnitude more where a and c are rounded to x's dtype
    (``affine_precision="storage"``); x, the buffers and the parameters enter exactly as received."""
    x64 = as_float64(x)
    shape = (1, -1) + (1,) * (x.dim() - 2)  # per channel, broadcast over x [N, C, *]
    gamma, beta = norms.gammas(kernel, weight, bias)
    scale = (np.ones(x.shape[1]) if gamma is None else np.abs(gamma)) / np.sqrt(as_float64(running_var) + eps)
    offset = np.zeros(x.shape[1]) if beta is None else np.abs(beta)
    u = operand_roundoffs(kernel, x, weight, bias)
    exact = batchnorm_oracles.batchnorm_eval(x64, as_float64(running_mean), as_float64(running_var), gamma, beta, eps)
    magnitude = (scale.reshape(shape) * (np.abs(x64) + np.abs(as_float64(running_mean)).reshape(shape))
                 + offset.reshape(shape))
    storage = 2 * u["x"] if kernel.affine_precision == "storage" else 0.0  # a and b rounded to x's dtype
    return ((probabilistic.gamma(EVAL_ROUNDINGS, u["acc"]) + storage) * magnitude * (1 + u["y"])
            + (u["y"] + 2.0**-52) * np.abs(exact) + _eta(kernel, output_dtype(kernel, x, weight)))


# roundings of each term of eval-mode BatchNorm's VJP (the running statistics constants), in any of its forms: dx =
# dy a with a = gamma rsqrt(var_R + eps) (var_R + eps, the reciprocal square root, the products with gamma and dy, in
# any order); a term dy xhat_R of dweight (x - mu_R and the product with dy besides those of a; or the channel's sum of
# dy (x - mu_R) times rsqrt(var_R + eps) once, as ATen's eval backward forms it: the same roundings, relative to the
# sum of the terms' magnitudes)
EVAL_BACKWARD_ROUNDINGS = {"x": 3 + C_RSQRT, "weight": 4 + C_RSQRT}


def running_eval_backward(kernel: Kernel, x: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor,
                          weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float, dy: torch.Tensor
                          ) -> dict[str, np.ndarray]:
    """Per-element bounds on the gradients of eval-mode BatchNorm or InstanceNorm (claims bn.jacobian, in.jacobian in
    eval mode), the VJP of the per-channel affine map y = a (x - mu_R) + beta, a = gamma / sqrt(var_R + eps), the
    running statistics constants (proofs.batchnorm_oracles.batchnorm_eval_vjp): with u the backward's accumulation
    roundoff (:func:`backward_accumulation`), k_x, k_w = EVAL_BACKWARD_ROUNDINGS, xhat_R = (x - mu_R) / sqrt(var_R +
    eps), g = gamma_n(u) for a channel's n = N S terms (as :func:`backward`'s parameter sums) and each gradient
    rounded once to its own dtype (:func:`operand_roundoffs`),

        |dx - dy a|          <= (gamma_{k_x}(u) + s) |dy a| (1 + u_x) + u_x |dx| + eta_x,
        |dweight_c - exact|  <= ((1 + g) (gamma_{k_w}(u) + s) + g) sum |dy xhat_R| + u_w |dweight_c| + eta_w,
        |dbias_c - exact|    <= g sum |dy| + u_b |dbias_c| + eta_b,

    s = u_x where the kernel declares ``affine_precision="storage"`` (a rounded to x's dtype), else 0; each plus the
    float64 oracle's 2^-53 relative. The terms of the training VJP through the batch's statistics (a backward that
    runs the training kernel's) are of the size of dy a itself, far beyond these."""
    x64, dy64 = as_float64(x), as_float64(dy)
    shape = (1, -1) + (1,) * (x.dim() - 2)  # per channel, broadcast over x [N, C, *]
    axes = (0, *range(2, x.dim()))  # a channel's N S elements
    gamma, _ = norms.gammas(kernel, weight, bias)
    with np.errstate(divide="ignore", invalid="ignore"):
        rstd = 1.0 / np.sqrt(as_float64(running_var) + eps)
    scale = (np.ones(x.shape[1]) if gamma is None else np.abs(gamma)) * rstd
    u = operand_roundoffs(kernel, x, weight, weight if bias is None else bias)
    u_acc = backward_accumulation(kernel, x.dtype)
    storage = u["x"] if kernel.affine_precision == "storage" else 0.0
    exact = dict(zip(("x", "weight", "bias"), batchnorm_oracles.batchnorm_eval_vjp(
        x64, as_float64(running_mean), as_float64(running_var), gamma, eps, dy64), strict=True))
    terms = x.numel() // x.shape[1] if x.shape[1] else 0
    g = probabilistic.gamma(terms, u_acc)
    bounds = {"x": ((probabilistic.gamma(EVAL_BACKWARD_ROUNDINGS["x"], u_acc) + storage)
                    * np.abs(dy64) * scale.reshape(shape) * (1 + u["x"])
                    + (u["x"] + U64) * np.abs(exact["x"]) + _eta(kernel, x.dtype))}
    if weight is not None:
        products = np.sum(np.abs(dy64 * (x64 - as_float64(running_mean).reshape(shape)) * rstd.reshape(shape)),
                          axis=axes)
        bounds["weight"] = (((1 + g) * (probabilistic.gamma(EVAL_BACKWARD_ROUNDINGS["weight"], u_acc) + storage) + g)
                            * products + (u["weight"] + U64) * np.abs(exact["weight"]) + _eta(kernel, weight.dtype))
    bounds["bias"] = (g * np.sum(np.abs(dy64), axis=axes) + (u["bias"] + U64) * np.abs(exact["bias"])
                      + _eta(kernel, x.dtype if bias is None else bias.dtype))
    return bounds


def second_order(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None, eps: float, dy: torch.Tensor,
                 upstream: dict[str, torch.Tensor | None], model: str | None = None) -> dict[str, np.ndarray]:
    """Per-element bounds on the gradient of a plain norm kernel's gradient (proofs.second_order.second_order_bound):
    {"dy": [..., d], "x": [..., d], "weight": [d]}, each stored in its input's dtype (dy's, x's, the weight's), u_acc
    by :func:`backward_accumulation`, the declared reduction and flush-to-zero as in :func:`backward`; ``upstream``
    the upstream gradients {"x": u, "weight": a, "bias": c} (None: not in S). With 16-bit x, two more roundings on a
    path in x's precision (proofs.second_order.STORAGE_ROUNDINGS: intermediate gradients a backward kernel writes in
    x's dtype, as ours writes J_n u, kernels.functional._NormBackward)."""
    u = error_model.unit_roundoff
    u_out = {"dy": u(dtype_name(dy.dtype)), "x": u(dtype_name(x.dtype)),
             "weight": u(dtype_name((weight if weight is not None else x).dtype))}
    values = {name: None if t is None else as_float64(t) for name, t in upstream.items()}
    return second_order_bounds.second_order_bound(
        as_float64(x), effective_weight(kernel, weight), eps, as_float64(dy), values["x"], values.get("weight"),
        values.get("bias"), backward_accumulation(kernel, x.dtype), u_out, kernel.record.norm, model or bound_in_use(),
        u_storage=u_out["x"] if x.element_size() == 2 else 0.0, declared=declared_reduction(kernel, x),
        flush_to_zero=kernel.flush_to_zero)


def backward_covered(kernel: Kernel, x: torch.Tensor, eps: float, model: str | None = None) -> bool:
    """Whether a plain kind's backward bound is finite on every row of x (it does not depend on the weight's or the
    upstream gradient's finiteness: those only scale it)."""
    bounds = backward(kernel, x, None, eps, torch.ones_like(x), model)
    return all(bool(np.all(np.isfinite(b))) for b in bounds.values())


def identities(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None, eps: float,
               dy: torch.Tensor, model: str | None = None) -> dict[str, np.ndarray]:
    """Per-row bounds on the gradient identities of the kernel's dx, from their cancellation
    (proofs.error_model.identity_bounds): {"c_dot": |c . dx - (eps/s^2) c . g'/s|, "sum": |sum_i dx_i| (LayerNorm)}."""
    return error_model.identity_bounds(as_float64(x), effective_weight(kernel, weight), eps, as_float64(dy),
                                       backward_accumulation(kernel, x.dtype), unit_roundoffs(x.dtype)[1],
                                       kernel.record.norm, model or bound_in_use(),
                                       declared=declared_reduction(kernel, x),
                                       flush_to_zero=kernel.flush_to_zero)


def residual_sum(x: torch.Tensor, residual: torch.Tensor | None, residual_dtype: torch.dtype) -> torch.Tensor:
    """x + residual rounded once to ``residual_dtype`` (the sum of the exactly converted inputs, on x's device); x
    itself in that dtype without a residual (a first layer's call)."""
    h = x.to(residual_dtype)
    return h if residual is None else h + residual.to(residual_dtype)


def residual_out(x: torch.Tensor, residual: torch.Tensor | None, residual_dtype: torch.dtype
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(expected h in float64, per-element bound on |h_kernel - expected|) for a residual_out of ``residual_dtype``,
    h = x + residual rounded once (x alone without a residual: exact): in float32 the IEEE float32 sum of the inputs
    converted exactly to float32 (the correctly rounded sum: bound 0, bit for bit); in a 16-bit dtype the exact sum,
    rounded once more from the float32 sum at most: |h_kernel - (x + r)| <= ((1 + u_acc)(1 + u_out) - 1) |x + r|."""
    if residual is None:
        expected = as_float64(x)
        return expected, np.zeros_like(expected)
    if residual_dtype == torch.float32 or residual_dtype == torch.float64:
        wide = torch.float64 if residual_dtype == torch.float64 else torch.float32
        expected = as_float64(x.to(HOST, wide) + residual.to(HOST, wide))
        return expected, np.zeros_like(expected)
    exact = as_float64(x) + as_float64(residual)
    u_acc, u_out = unit_roundoffs(residual_dtype)
    return exact, ((1 + u_acc) * (1 + u_out) - 1) * np.abs(exact)


def dropout_residual_out(x: torch.Tensor, residual: torch.Tensor, p: float, dtype: torch.dtype) -> np.ndarray:
    """Bound on |h - (r + m x/(1-p))| for h = fl(r + b) stored in ``dtype``, b the dropped-out branch: computed in
    the accumulation dtype (the scale, the product, the add: three roundings) or by an unfused dropout in x's dtype
    (:func:`dropout_scaling`'s three roundings: the scale 1/(1-p) held in x's dtype, as torch's F.dropout's mask
    tensor holds it, the product, the store), then one rounding to residual_out's dtype, of terms at most
    |r| + |x|/(1-p)."""
    u_acc, u_out = unit_roundoffs(dtype)
    u_x = unit_roundoffs(x.dtype)[1]
    return (((1 + u_acc) ** 3 * (1 + u_x) ** 3 * (1 + u_out) - 1)
            * (np.abs(as_float64(residual)) + np.abs(as_float64(x)) / (1 - p)))


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
