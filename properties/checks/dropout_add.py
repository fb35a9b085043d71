"""The dropout part of fused dropout + add + LayerNorm kernels (kind dropout_add_layernorm): drop_add_ln.keep_rate,
.independence, .seeds, .variance_bias, .determinism, .gradient, .layout_invariance for 0 < p < 1
(proofs/claims/fused.py).

A fused kernel does not return its mask, but residual_out shows it: with 0 < |x_i| and |residual_i| <= |x_i|
(properties.draws.fused_strategies.masked_examples draws them so), element i was kept exactly when
residual_out_i != residual_i, in any dtype and along any rounding path (the derivation of drop_add_ln.keep_rate).
The statistical checks judge that mask with the tests of :mod:`properties.bounds.dropout_statistics`, as the dropout
kind's do (properties.checks.dropout): ``alpha`` is the false alarm the example may spend, its test's share of
``dropout_statistics.BUDGET["drop_add_ln.*"]``; the powers at the sizes the tests use are derived in
tests/test_dropout_add_statistics.py.
"""

from __future__ import annotations

import numpy as np
import torch

from core import guard
from core.capabilities import dtype_name
from properties import norms, outcome
from properties.bounds import dropout_statistics as statistics
from properties.bounds.dropout_statistics import Finding
from properties.checks import dropout as dropout_checks
from properties.checks.contracts import (
    check_empty_batch_of,
    fail_on_missing_gradient,
    inside_a_larger_buffer,
    strided,
)
from properties.checks.dropout import conclude, keep_rate_finding, seed_findings
from properties.checks.fused import (
    dropout_values_comparison,
    example_of,
    expected_gradients,
    forward_comparison,
    outputs,
)
from properties.norms import as_float64


def kept_mask(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float, p: float, seed: int,
              bias=None) -> np.ndarray:
    """The kernel's mask as int8 [rows, d]: residual_out != residual (exact under the drawn inputs)."""
    _, h = outputs(kernel, x, residual.clone(), weight, bias, eps, p, seed, allow_nonfinite=True)
    return mask_of(h, residual)


def mask_of(h: torch.Tensor, residual: torch.Tensor) -> np.ndarray:
    """The mask residual_out h shows, int8 [rows, d]: h != residual."""
    return (as_float64(h) != as_float64(residual)).reshape(-1, h.shape[-1]).astype(np.int8)


def check_keep_rate(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float, p: float, seed: int,
                    alpha: float, bias=None) -> None:
    """The kept count of the n elements is Binomial(n, 1-p): exact two-sided test at level alpha."""
    masks = kept_mask(kernel, x, residual, weight, eps, p, seed, bias)
    conclude([keep_rate_finding(masks, p, alpha)], "the branch's keep rate is not 1 - p", p=p, d=x.shape[-1],
             measured=float(masks.mean()), predicted=1.0 - p)


def check_independence(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float, p: float, seed: int,
                       alpha: float, bias=None) -> None:
    """Neighbouring bits, one column of two rows and the counts of two rows: those of independent bits."""
    masks = kept_mask(kernel, x, residual, weight, eps, p, seed, bias)
    conclude(statistics.independence_findings(masks, p, alpha),
              "the branch's mask bits are not independent (neighbours or rows share draws)", p=p, d=x.shape[-1])


def check_seeds(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float, p: float, seed: int,
                alpha: float, bias=None) -> None:
    """The masks of seed s and of each partner of properties.checks.dropout.seed_findings agree on Binomial(n,
    p^2 + (1-p)^2) elements."""
    conclude(seed_findings(lambda s: kept_mask(kernel, x, residual, weight, eps, p, s, bias), seed, p, alpha),
             "masks of different seeds are not independent (the seed is ignored or truncated)", p=p, d=x.shape[-1],
             seed=seed)


def check_determinism(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float, p: float, seed: int,
                      bias=None) -> None:
    """Calls with the same seed return the same y and residual_out, bit for bit: called again, on a copy of x and
    under another thread count (properties.checks.dropout.repeated_calls)."""
    calls = dropout_checks.repeated_calls(
        lambda t: outputs(kernel, t, residual.clone(), weight, bias, eps, p, seed, allow_nonfinite=True), x)
    differ = dropout_checks.determinism_differences(calls, ("y", "residual_out"))
    outcome.exact(not differ, f"seed {seed}, against the first call: {'; '.join(differ)}",
                  "dropout + add + norm must be a function of (x, residual, p, seed): not of the call, x's address or "
                  "the thread count", p=p, d=x.shape[-1], n=x.numel())


def check_fresh_outputs_at_edge_probabilities(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float,
                                              seed: int, bias=None) -> None:
    """At p = 0 and p = 1 (unless refused with an error, as drop_add_ln.values allows) neither y nor residual_out
    shares storage with x, the residual (unless declared in place), the weight or the bias: a short-circuit that
    returns an input (residual_out = the residual itself where every element is dropped; ATen's dropout ``return
    input`` at p = 0) hands the caller a tensor whose in-place update writes that input."""
    aliased = []
    for p in (0.0, 1.0):
        given = residual.clone()  # a declared in-place kernel writes it
        inputs = {"x": x, "weight": weight, "bias": bias, **({} if "residual" in kernel.in_place else
                                                              {"residual": given})}
        try:
            y, h = outputs(kernel, x, given, weight, bias, eps, p, seed, allow_nonfinite=True)
        except guard.KernelFault as fault:
            if p == 1.0 and fault.reason == "raised":
                continue
            raise
        aliased += [f"p = {p:g}: {what}" for what in dropout_checks.aliased_outputs({"y": y, "residual_out": h},
                                                                                    inputs)]
    outcome.exact(not aliased, "; ".join(aliased), "the outputs must be fresh tensors at p = 0 and p = 1",
                  d=x.shape[-1], dtype=dtype_name(x.dtype))


def check_no_row_repeats_another(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float, p: float,
                                 seed: int, alpha: float, bias=None) -> None:
    """No row's mask is another's at a lag of up to dropout_statistics.ROW_LAGS rows and any shift (row streams that
    overlap): dropout_statistics.lagged_rows_finding at level alpha."""
    finding = statistics.lagged_rows_finding(kept_mask(kernel, x, residual, weight, eps, p, seed, bias), p, alpha)
    if finding is None:
        raise ValueError(f"x of {x.shape[0]} row(s): no pair of rows to compare")
    conclude([finding], "a row's mask repeats (part of) another row's, shifted: per-row random streams overlap",
             p=p, d=x.shape[-1])


def check_gradient(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float, p: float, seed: int,
                   dy: torch.Tensor, dh: torch.Tensor, bias=None, frozen: tuple[str, ...] = (),
                   zeros: torch.Tensor | None = None) -> None:
    """dL/dx = m t/(1-p) with m the forward's mask (read from its residual_out) and t = J^T dy + dh at residual_out:
    0 exactly where it dropped; dL/dresidual = t; dweight, dbias LayerNorm's at residual_out
    (properties.bounds.tolerance.backward with the dropout scale). An element whose exact gradient is not
    representable in its dtype has no finite bound: counted unchecked, never passed. ``frozen``: the inputs that do
    not require grad in the call; an input that requires grad and gets none fails. x and the residual are
    differentiated in their layouts (norms.gradients). ``zeros`` (bool, x's shape): those elements of x set to
    exactly 0 in the differentiated call, the mask read from the same seed's call on x (whose elements are never 0):
    a backward that recovers the mask as residual_out != residual drops a kept zero's gradient
    (ROCm/tensorflow-upstream#1012)."""
    example = example_of(x, residual, weight, bias, eps, p, seed)
    if zeros is not None:
        h = outputs(kernel, x, residual.clone(), weight, bias, eps, p, seed, any_dtype=residual.dtype != x.dtype)[1]
        kept = as_float64(h) != as_float64(residual)
        example["x"] = x.masked_fill(zeros, 0)
    try:
        got, grads = norms.gradients(kernel, example, {"y": dy, "residual_out": dh}, frozen=tuple(frozen),
                                     any_dtype=residual.dtype != x.dtype)
    except guard.KernelFault as fault:
        fail_on_missing_gradient(kernel, fault, tuple(frozen), p=p, d=x.shape[-1], dtype=dtype_name(x.dtype))
        return
    h = got["residual_out"]
    if zeros is None:
        kept = as_float64(h) != as_float64(residual)
    expected, bounds = expected_gradients(kernel, example, dy, dh, h)
    expected["x"] = np.where(kept, expected["x"] * (1.0 / (1.0 - p) if p < 1 else 0.0), 0.0)
    bounds["x"] = np.where(kept, bounds["x"], 0.0)
    comparisons = []
    for name, g in grads.items():
        bound = np.where(np.abs(expected[name]) <= torch.finfo(g.dtype).max, bounds[name], np.inf)
        comparisons.append(outcome.compare(g, expected[name], bound, f"d{name}"))
    outcome.conclude(comparisons, "the backward does not drop the forward's mask and rescale by 1/(1-p), or does not "
                                  "pass J^T dy + dh to the residual", p=p, d=x.shape[-1], dtype=dtype_name(x.dtype))


def check_empty_batch(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float, p: float, seed: int,
                      dy: torch.Tensor, dh: torch.Tensor, bias=None) -> None:
    """x, the residual, dy and dh with no rows (properties.checks.contracts.check_empty_batch_of): empty y and
    residual_out, dweight = dbias = 0, no error."""
    check_empty_batch_of(kernel, example_of(x, residual, weight, bias, eps, p, seed), {"y": dy, "residual_out": dh})


def check_gradient_at_edge_probabilities(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float, seed: int,
                                         dy: torch.Tensor, dh: torch.Tensor, bias=None) -> None:
    """:func:`check_gradient` at p = 0 (every element kept, dL/dx = J^T dy + dh) and at p = 1 (every element dropped,
    dL/dx = 0 exactly: a backward scaling by 1/(1-p) where its forward special-cased p = 1 gives 0 * inf = NaN); a
    kernel that refuses p = 1 with an error (as its forward may: the edge claim of drop_add_ln.values) is checked at
    p = 0 only."""
    check_gradient(kernel, x, residual, weight, eps, 0.0, seed, dy, dh, bias)
    try:
        outputs(kernel, x, residual.clone(), weight, bias, eps, 1.0, seed)
    except guard.KernelFault as fault:
        if fault.reason == "raised":
            return
        raise
    check_gradient(kernel, x, residual, weight, eps, 1.0, seed, dy, dh, bias)


LAYOUTS = (*dropout_checks.LAYOUTS, "offset")
LAYOUT_FRACTION = 0.1  # drop_add_ln.layout_invariance's share of the profile's examples (three calls each)


def layout_views(x: torch.Tensor, residual: torch.Tensor, weight, bias, layout: str) -> tuple:
    """(x, residual, weight, bias) as non-contiguous views of the same values: x and the residual as
    contracts.strided's layouts (the transpose of a column-major copy, every other column of a wider buffer) or, for
    ``"offset"``, views into NaN-filled buffers with a storage offset and row stride d + 3, the weight and bias then
    every other element of such a buffer (contracts.inside_a_larger_buffer)."""
    if layout != "offset":
        return strided(x, layout), strided(residual, layout), weight, bias
    return (inside_a_larger_buffer(x), inside_a_larger_buffer(residual),
            *(t if t is None else inside_a_larger_buffer(t, "every other element") for t in (weight, bias)))


def check_layout_invariance(kernel, x: torch.Tensor, residual: torch.Tensor, weight, eps: float, p: float,
                            seed: int, alpha: float, bias=None) -> None:
    """0 < p < 1, the inputs as views of each of LAYOUTS (layout_views): the mask read from residual_out passes the
    keep-rate test and the independence tests (alpha / len(LAYOUTS) per layout, half of it for each), every
    residual_out element is the residual or residual + x/(1-p) within its rounding, and y = LN(residual_out) within
    the forward bound. The mask need not be the contiguous call's (a mask drawn by element index follows the
    layout), so it is not compared with it."""
    findings = []
    share = alpha / len(LAYOUTS)
    for layout in LAYOUTS:
        y, h = outputs(kernel, *layout_views(x, residual, weight, bias, layout), eps, p, seed)
        outcome.conclude([dropout_values_comparison(h, x, residual, p, f"{layout}: residual_out"),
                          forward_comparison(kernel, y, h, x, weight, bias, eps, f"{layout}: y")[0]],
                         "in a non-contiguous layout, residual_out is not residual + m x/(1-p) or y is not its norm "
                         "(strides or a storage offset ignored)", p=p, d=x.shape[-1], dtype=dtype_name(x.dtype))
        masks = mask_of(h, residual)
        findings += [finding.named(layout) for finding in (keep_rate_finding(masks, p, share / 2),
                                                           *statistics.independence_findings(masks, p, share / 2))]
    conclude(findings, "a non-contiguous input gets a mask that is not i.i.d. Bernoulli(1-p)", p=p, d=x.shape[-1])


REPLICA_COLUMNS = 4096  # replicas of a row laid side by side in rows of this width: few programs per call


def check_variance_bias(kernel, x: torch.Tensor, residual: torch.Tensor, eps: float, p: float, seed: int,
                        alpha: float) -> None:
    """Seed 003's bias for h = r + x m/(1-p) (claim drop_add_ln.variance_bias), one row x, r of d <= 16 elements
    (|r| <= |x|): R replicas laid side by side (rows of REPLICA_COLUMNS, so an interpreted kernel runs few programs),
    the mask of each read from residual_out, the mean over the replicas of Var(r + x m/(1-p)) against its exact law
    over all 2^d masks (dropout_statistics.VarianceBiasPlan with the residual): Bernstein at level alpha, R the least
    power of two with power >= 1 - 1e-6 against a fixed count per row, blocks of 2 and 4, one draw per row."""
    plan = statistics.VarianceBiasPlan(as_float64(x)[0], p, alpha, residual=as_float64(residual)[0])
    if not plan.feasible:
        raise ValueError(f"the variance-bias test cannot reach its power on this row within {plan.max_replicas} masks")
    d = x.shape[-1]
    width = min(REPLICA_COLUMNS // d * d, plan.replicas * d)
    rows = -(-plan.replicas * d // width)
    xs, rs = (t[0].repeat(width // d).expand(rows, width).contiguous() for t in (x, residual))
    masks = kept_mask(kernel, xs, rs, None, eps, p, seed).reshape(-1, d)[:plan.replicas]
    measured = plan.measured(masks)
    conclude([Finding(plan.acceptance(), measured)],
             "the variance of the norm's input is not Var(r + x) + p(d-1)/(d(1-p)) (var_x + mean_x^2): the mask is "
             "not i.i.d. Bernoulli(1-p)", p=p, d=d, measured=measured, predicted=plan.null[0])
