"""Mechanisms of the backward: a term of the derived VJP dropped or replaced (what fused kernels get wrong).

With g' = gamma dy, s = sqrt(sigma^2 + eps) (LN) or sqrt(q + eps) (RMSNorm), xhat = (x - mu)/s or x/s:

    dx     = (g' - mean(g') - xhat mean(g' xhat)) / s        RMSNorm: (g' - xhat mean(g' xhat)) / s
    dgamma = sum over rows of dy xhat,   dbeta = sum over rows of dy

    backward_no_weight         g' = dy: the VJP of gamma = 1
    backward_weight_offset     g' = (gamma -+ 1) dy: a declared 1 + w offset left out of the backward (or an undeclared
                               one put in): dx moves by -+ the VJP of gamma = 1, dgamma and dbeta unchanged
    backward_no_mean_term      dx without -mean(g')/s: dx + mean(g')/s
    backward_no_variance_term  dx without the derivative of rstd: dx + xhat mean(g' xhat)/s
    dgamma_from_output         dgamma = sum dy y = gamma dgamma + dbeta (the stored, rounded y)
    dgamma_missing             dgamma = 0

Each model's center is the derived VJP with that change (a checked step below); its bound is the error
model's backward bound (the alternative computes a subset of the same terms, or the same terms of another
input), plus the roundings of what changed: the dropped term's (C_COMBINE roundings) and the store of the new
value; for dgamma from the output, the output's own rounding (|dy| times the forward bound) and the sum of
|dy y| over rows.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import sympy as sp

from proofs import error_terms, expressions
from proofs.algebra import (
    LN_AGGREGATES,
    RMS_AGGREGATES,
    beta,
    delta,
    dy,
    gamma,
    i,
    j,
    k,
    ms,
    mu,
    row_mean,
    row_sum,
    var,
    x,
)
from proofs.derivation import Derivation, Equal
from proofs.mechanisms.base import Case, Mechanism, Prediction, gradients, normalized, replaced, row_statistics
from proofs.probabilistic import gamma as gamma_n

LN, BOTH = frozenset({"ln"}), frozenset({"ln", "rms"})
AGGREGATES = {"ln": LN_AGGREGATES, "rms": RMS_AGGREGATES}


def _scale(kind: str) -> sp.Expr:
    return sp.sqrt((var if kind == "ln" else ms) + sp.Symbol("epsilon", nonnegative=True))


def _xhat(kind: str, index: sp.Symbol) -> sp.Expr:
    return ((x[index] - mu) if kind == "ln" else x[index]) / _scale(kind)


def _row_statistics(case: Case) -> tuple[np.ndarray, np.ndarray]:
    """(xhat, 1/s) in float64, the row axis kept for 1/s."""
    rows = row_statistics(case)
    inverse = 1 / np.sqrt(rows["spread"] + case.eps)
    return (case.x - rows["mean"]) * inverse, inverse


def _g(case: Case) -> np.ndarray:
    return case.dy if case.gamma is None else case.gamma * case.dy


# --- dx ---------------------------------------------------------------------------------------------------------


def _no_weight_derivation() -> Derivation:
    return Derivation(tuple(
        Equal(expressions.unit_weight(expressions.vjp_x(kind)),
              row_sum(dy[i] * expressions.unit_weight(expressions.jacobian(kind)), i),
              rf"{kind}: dropping $\gamma$ from $g' = \gamma\,dy$ gives the VJP of $\gamma = 1$; it differs from "
              r"the derived one wherever $\gamma \ne 1$", aggregates=AGGREGATES[kind])
        for kind in ("ln", "rms")))


def _no_weight(case: Case) -> list[Prediction]:
    if case.gamma is None or np.all(case.gamma == 1):
        return []
    unit = gradients(case, gamma=np.ones_like(case.gamma))
    return [replaced(gradients(case), x=(unit.values["x"], unit.bounds["x"]))]


def _weight_offset_derivation() -> Derivation:
    def shifted(expr: sp.Expr) -> sp.Expr:
        return expr.replace(lambda e: isinstance(e, sp.Indexed) and e.base == gamma, lambda e: e + 1)

    vjp = expressions.vjp_x
    return Derivation(tuple(
        Equal(shifted(vjp(kind)) - vjp(kind), expressions.unit_weight(vjp(kind)),
              rf"{kind}: dx is linear in $g' = \gamma\,dy$: an offset of 1 left out of (or put into) the backward's "
              r"$\gamma$ moves dx by $\mp$ the VJP of $\gamma = 1$, wherever $dy \ne 0$", aggregates=AGGREGATES[kind])
        for kind in ("ln", "rms")))


def _weight_offset(case: Case) -> list[Prediction]:
    """dx of the backward at gamma -+ 1 (dweight and dbias do not read gamma): the bound of the correct backward
    there (the same operations on another gamma)."""
    if case.gamma is None:
        return []
    correct = gradients(case)
    variants = ((-1.0, "the backward scales dy by w where the forward scaled by the declared 1 + w"),
                (1.0, "the backward scales dy by 1 + w, an offset that is not declared"))
    predictions = []
    for shift, detail in variants:
        moved = gradients(case, gamma=case.gamma + shift)
        predictions.append(replace(replaced(correct, detail, x=(moved.values["x"], moved.bounds["x"])),
                                   variant=f"{shift:+g}"))
    return predictions


def _no_mean_term_derivation() -> Derivation:
    g = gamma[k] * dy[k]
    without = (gamma[j] * dy[j] - _xhat("ln", j) * row_mean(g * _xhat("ln", k))) / _scale("ln")
    return Derivation((
        Equal(without, expressions.vjp_x("ln") + row_mean(g) / _scale("ln"),
              r"dx without $-\overline{g'}/s$ is the derived VJP plus $\overline{g'}/s$; its row sum is "
              r"$d\,\overline{g'}/s$ instead of 0", aggregates=LN_AGGREGATES),
    ))


def _shifted_dx(case: Case, shift: np.ndarray) -> list[Prediction]:
    """dx + shift: the correct bound (the remaining terms' roundings), the shift's own roundings (C_COMBINE) and
    the store of the new value."""
    correct = gradients(case)
    center = correct.values["x"] + shift
    bound = (correct.bounds["x"] + gamma_n(error_terms.C_COMBINE, case.u_acc) * np.abs(shift)
             + case.u_out * np.abs(center))
    return [replaced(correct, x=(center, bound))]



def _no_mean_term(case: Case) -> list[Prediction]:
    _, inverse = _row_statistics(case)
    return _shifted_dx(case, np.mean(_g(case), axis=-1, keepdims=True) * inverse)


def _no_variance_term_derivation() -> Derivation:
    steps = []
    for kind in ("ln", "rms"):
        g = gamma[k] * dy[k]
        mean_term = row_mean(g) if kind == "ln" else 0
        without = (gamma[j] * dy[j] - mean_term) / _scale(kind)
        variance_term = _xhat(kind, j) * row_mean(g * _xhat(kind, k)) / _scale(kind)
        steps.append(Equal(without, expressions.vjp_x(kind) + variance_term,
                           rf"{kind}: dx without the derivative of rstd is the derived VJP plus "
                           r"$\hat{x}_j\overline{g'\hat{x}}/s$", aggregates=AGGREGATES[kind]))
    return Derivation(tuple(steps))


def _no_variance_term(case: Case) -> list[Prediction]:
    xhat, inverse = _row_statistics(case)
    return _shifted_dx(case, xhat * np.mean(_g(case) * xhat, axis=-1, keepdims=True) * inverse)


# --- dgamma -----------------------------------------------------------------------------------------------------


def _dgamma_from_output_derivation() -> Derivation:
    return Derivation((
        Equal(dy[j] * expressions.output("ln").subs(i, j),
              gamma[j] * expressions.vjp_weight("ln") + dy[j] * beta[j],
              r"$dy_j\,y_j = \gamma_j\,\partial L/\partial\gamma_j + \partial L/\partial\beta_j$: right only for "
              r"$\gamma = 1$, $\beta = 0$", aggregates=LN_AGGREGATES),
    ))


def _dgamma_from_output(case: Case) -> list[Prediction]:
    if case.gamma is None:
        return []
    correct = gradients(case)
    forward = normalized(case)
    lead = tuple(range(case.x.ndim - 1))
    terms = case.dy * forward.values["y"]
    value = terms.sum(axis=lead)
    rows = int(np.prod(case.x.shape[:-1]))
    bound = (correct.bounds["weight"] + (np.abs(case.dy) * forward.bounds["y"]).sum(axis=lead)
             + gamma_n(rows, case.u_acc) * np.abs(terms).sum(axis=lead) + case.u_out * np.abs(value))
    return [replaced(correct, weight=(value, bound))]


def _dgamma_missing_derivation() -> Derivation:
    return Derivation(tuple(
        Equal(sp.diff(expressions.output(kind), gamma[j]).subs(j, i), delta(i, i) * _xhat(kind, i),
              rf"{kind}: $\partial y_i/\partial\gamma_i = \hat{{x}}_i$, so a zero dgamma is wrong wherever "
              r"$\sum_{\text{rows}} dy\,\hat{x} \ne 0$")
        for kind in ("ln", "rms")))


def _dgamma_missing(case: Case) -> list[Prediction]:
    if case.gamma is None:
        return []
    correct = gradients(case)
    zeros = np.zeros_like(correct.values["weight"])
    return [replaced(correct, weight=(zeros, zeros))]


MECHANISMS = (
    Mechanism("backward_no_weight", "the backward leaves gamma out of the upstream gradient (g' = dy)", BOTH,
              _no_weight_derivation, backward=_no_weight),
    Mechanism("backward_weight_offset", "the backward's gamma lacks the declared 1 + w offset (or has one that is "
              "not declared)", BOTH, _weight_offset_derivation, backward=_weight_offset),
    Mechanism("backward_no_mean_term", "the backward drops the mean term -mean(g')/s of dx", LN,
              _no_mean_term_derivation, backward=_no_mean_term),
    Mechanism("backward_no_variance_term", "the backward drops the derivative of rstd (the x_hat mean(g' x_hat) "
              "term of dx)", BOTH, _no_variance_term_derivation, backward=_no_variance_term),
    Mechanism("dgamma_from_output", "dgamma computed from the output y instead of x_hat", LN,
              _dgamma_from_output_derivation, backward=_dgamma_from_output),
    Mechanism("dgamma_missing", "dgamma never written (zeros)", BOTH, _dgamma_missing_derivation,
              backward=_dgamma_missing),
)
