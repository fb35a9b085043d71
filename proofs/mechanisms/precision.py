"""Mechanisms of precision: the right formula, computed or rounded where the correct model does not.

Interval models. The error model (:mod:`proofs.error_model`) linearizes around the exact statistics and gives
up (inf) once the variance's relative error rho_t reaches 1. Here the statistics' errors are carried as
intervals instead, every operation widening them by its rounding (fl(a op b) = (a op b)(1 + delta),
|delta| <= u, Higham ch. 2-4): the computed mean lies within E = gamma_{d+1} mean|x| of mu, the computed
t = var + eps in [t_lo, t_hi], so

    y_i in gamma_i [x_i - mu - E, x_i - mu + E] [1/sqrt(t_hi), 1/sqrt(t_lo)] (1 +- C_RSQRT u) + beta_i,

widened by the product, the weight, the shift and the store (monotone interval arithmetic, elementwise).

    one_pass_variance      var = E[x^2] - mu^2 (clamped at 0): |error| <= gamma_{d+1} E[x^2] + |mu_hat^2 - mu^2|
    storage_accumulation   two-pass, every sum and product in the storage dtype (u = u_storage), eps as given
                           or rounded to storage
    double_rounding        x_hat rounded to storage, then the weight multiply rounded again (Llama's casting):
                           y in [R(gamma R(p_lo)), R(gamma R(p_hi))], [p_lo, p_hi] the interval of the computed
                           x_hat, R the (monotone) rounding to storage; dgamma = sum dy R(x_hat)
    storage_statistics_backward  the backward with u_acc = u_storage (statistics saved, or partial gradients
                           added, in the storage dtype: torch's CPU layer_norm, autograd through two casts)
"""

from __future__ import annotations

from functools import cache

import numpy as np
import sympy as sp

from proofs import error_model, error_terms, oracles, probabilistic, simulate
from proofs.algebra import d, mu, row_sum, var, x
from proofs.derivation import Derivation, Equal, Fact
from proofs.mechanisms.base import (
    FLOAT_MAX,
    Case,
    Mechanism,
    Prediction,
    gradients,
    interval,
    replaced,
    round_to,
    row_statistics,
)
from proofs.probabilistic import gamma as gamma_n

LN, BOTH = frozenset({"ln"}), frozenset({"ln", "rms"})
FLOAT64_SLACK = 2.0**-50  # the float64 evaluation's own error, relative (a few ulps)


def _widened(lo: np.ndarray, hi: np.ndarray, rel: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[lo, hi] with each end moved outwards by rel times its magnitude (one rounding of relative size rel)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return lo - rel * np.abs(lo), hi + rel * np.abs(hi)


def _times(lo: np.ndarray, hi: np.ndarray, factor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The interval [lo, hi] times a number (any sign), elementwise."""
    with np.errstate(invalid="ignore", over="ignore"):
        a, b = lo * factor, hi * factor
    return np.minimum(a, b), np.maximum(a, b)


def _sum_error(case: Case, terms: np.ndarray, u: float, roundings: int) -> np.ndarray:
    """Relative error factor of a row sum of ``terms`` (axis kept), relative to sum|terms|, with ``roundings`` more
    roundings of each term or of the result: the error model's sum factor (proofs.probabilistic.sum_factor:
    the probabilistic bound where it applies, gamma_{d-1} otherwise or for the worst-case model)."""
    lam = probabilistic.lam(2 * int(np.prod(case.x.shape[:-1]))) if case.bound == "probabilistic" else None
    with np.errstate(all="ignore"):
        return (1 + probabilistic.sum_factor(terms, u, lam)) * (1 + u) ** roundings - 1


def _mean_error(case: Case, u: float) -> np.ndarray:
    """Bound on |mu_hat - mu| per row (axis kept): the sum of x and the division; 0 for RMSNorm."""
    if case.kind == "rms":
        return np.zeros((*case.x.shape[:-1], 1))
    return _sum_error(case, case.x, u, 1) * row_statistics(case)["mean_abs"]


def _two_pass_t(case: Case, u: float, eps_values: tuple[float, ...], welford: bool) -> tuple[np.ndarray, ...]:
    """(E, t_lo, t_hi) of a two-pass (or, with ``welford``, Welford) computation with roundoff u: the error model's
    pieces as an interval. sum (x - mu_hat)^2 = d sigma^2 + d e^2, |e| <= E; each term rounded 3 times
    (subtraction, square), the sum, the division; Welford adds 2 gamma_{d+1} kappa s^2 (proofs.error_model)."""
    q = row_statistics(case)
    width = case.x.shape[-1]
    mean_error = _mean_error(case, u)
    relative = _sum_error(case, (case.x - q["mean"]) ** 2, u, 4)
    welford = (2 * gamma_n(width + 1, u) * np.sqrt(q["mean_square"] * (q["spread"] + case.eps))
               if case.kind == "ln" and welford else 0.0)
    low = np.maximum(q["spread"] * (1 - relative) - welford, 0.0)
    high = (q["spread"] + mean_error**2) * (1 + relative) + welford
    return mean_error, (low + min(eps_values)) * (1 - u), (high + max(eps_values)) * (1 + u)


def _normalized(case: Case, u: float, mean_error, t_lo, t_hi) -> tuple[np.ndarray, np.ndarray]:
    """The interval of the computed x_hat = fl(fl(x - mu_hat) fl(1/sqrt(t)))."""
    centred = case.x - row_statistics(case)["mean"]
    a_lo, a_hi = _widened(centred - mean_error, centred + mean_error, u)
    rsqrt = gamma_n(error_terms.C_RSQRT, u)
    with np.errstate(divide="ignore", invalid="ignore"):
        r_lo = (1 - rsqrt) / np.sqrt(t_hi)
        r_hi = np.where(t_lo > 0, (1 + rsqrt) / np.sqrt(np.maximum(t_lo, 0.0)), np.inf)
        ends = np.stack(np.broadcast_arrays(a_lo * r_lo, a_lo * r_hi, a_hi * r_lo, a_hi * r_hi))
    ends = np.where(np.isnan(ends), np.inf, ends)
    return _widened(ends.min(axis=0), ends.max(axis=0), u)


def _affine(case: Case, lo, hi, u: float) -> Prediction:
    """gamma [lo, hi] + beta, each operation rounded with u (the weight's own C_WEIGHT), then stored."""
    if case.gamma is not None:
        lo, hi = _widened(*_times(lo, hi, case.gamma), gamma_n(1 + error_terms.C_WEIGHT, u))
    if case.beta is not None:
        lo, hi = _widened(lo + case.beta, hi + case.beta, u)
    lo, hi = _widened(lo, hi, case.u_out + FLOAT64_SLACK)
    center, half = interval(lo, hi)
    return Prediction({"y": center}, {"y": np.where(np.isfinite(half), half, np.inf)})


def _overflows(case: Case, mean_error: np.ndarray) -> np.ndarray:
    """Rows whose two-pass sums (of |x|, of (x - mu_hat)^2) may exceed half the storage dtype's largest value (the
    other half for the sums' own errors): the model does not apply there."""
    q = row_statistics(case)
    total = case.x.shape[-1] * np.maximum(q["mean_abs"], q["spread"] + mean_error**2)
    return total >= FLOAT_MAX[case.storage] / 2


# --- one-pass variance ------------------------------------------------------------------------------------------


def _one_pass(case: Case) -> list[Prediction]:
    u = case.u_acc
    q = row_statistics(case)
    mean_error = _mean_error(case, u)
    squares = _sum_error(case, case.x**2, u, 2)
    nearest = np.maximum(np.abs(q["mean"]) - mean_error, 0.0) ** 2 * (1 - u)
    farthest = (np.abs(q["mean"]) + mean_error) ** 2 * (1 + u)
    low, high = _widened(q["mean_square"] * (1 - squares) - farthest, q["mean_square"] * (1 + squares) - nearest, u)
    t_lo = (np.maximum(low, 0.0) + case.eps) * (1 - u)
    t_hi = (np.maximum(high, 0.0) + case.eps) * (1 + u)
    return [_affine(case, *_normalized(case, u, mean_error, t_lo, t_hi), u)]


def _one_pass_derivation() -> Derivation:
    d1, d2 = sp.symbols("delta_1 delta_2", real=True)
    e = sp.Symbol("e", real=True)
    return Derivation((
        Equal((var + mu**2) * (1 + d2) - mu**2 * (1 + d1) ** 2 - var, (var + mu**2) * d2 - 2 * mu**2 * d1
              - mu**2 * d1**2, r"one pass: $\widehat{E[x^2]} - \hat\mu^2 - \sigma^2$ with relative errors $\delta_2$ "
              r"($|\delta_2| \le \gamma_{d+1}$) of $E[x^2]$ and $\delta_1$ of $\mu$: an absolute error "
              r"$\sim \gamma_{d+1}(\mu^2 + \sigma^2)$, i.e. $\kappa^2$ times $s^2$, where two passes err by "
              r"$\sim\kappa$"),
        Equal(row_sum((x[sp.Symbol("k", integer=True, positive=True)] - (mu + e)) ** 2), d * var + d * e**2,
              r"(two passes, for contrast: the mean's error only adds $d e^2$)"),
        Fact(r"|y_{\text{one-pass}} - c| \le b \text{ (the interval model), float32, } |\mu|/\sigma \le 10^4",
             "simulated one-pass LayerNorms (sequential and pairwise sums, eps 1e-12..1e-2) lie within the model "
             "on every element, and outside the correct bound somewhere",
             lambda: _simulation_fits(_one_pass, simulate.layernorm_one_pass, np.float32, "float32")),
    ))


# --- storage accumulation ---------------------------------------------------------------------------------------


def _storage_accumulation(case: Case) -> list[Prediction]:
    u = case.u_out
    if u == case.u_acc:
        return []
    mean_error, t_lo, t_hi = _two_pass_t(case, u, (case.eps, float(round_to(case.eps, case.storage))), welford=False)
    prediction = _affine(case, *_normalized(case, u, mean_error, t_lo, t_hi), u)
    bound = np.where(_overflows(case, mean_error), np.inf, prediction.bounds["y"])
    return [Prediction(prediction.values, {"y": bound})]


def _storage_accumulation_derivation() -> Derivation:
    return Derivation((
        Fact(r"|y_{\text{fp16 two-pass}} - c| \le b \text{ (the interval model with } u = u_{fp16})",
             "simulated two-pass LayerNorms and RMSNorms accumulating in float16 (sequential and pairwise) lie "
             "within the model on every element, and outside the correct (float32-accumulation) bound somewhere",
             lambda: _simulation_fits(_storage_accumulation, _float16_two_pass, np.float16, "float16")),
    ))


def _float16_two_pass(row, eps, out, order):
    return simulate.layernorm_two_pass(row, eps, acc=np.float16, out=out, order=order)


# --- double rounding (Llama's casting) ----------------------------------------------------------------------------


def _rounded_normalized(case: Case, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """[R(p_lo), R(p_hi)]: the computed x_hat (accumulation roundoff) rounded to ``dtype``."""
    mean_error, t_lo, t_hi = _two_pass_t(case, case.u_acc, (case.eps,), welford=True)
    lo, hi = _normalized(case, case.u_acc, mean_error, t_lo, t_hi)
    return round_to(lo, dtype), round_to(hi, dtype)


def _rounding_variants(case: Case) -> list[tuple[str, str]]:
    """(the dtype x_hat is rounded to, the dtype the product is rounded to) of a double-rounding kernel: the storage
    dtype twice, or none where that is the accumulation dtype (the cast rounds nothing). With weights in another
    dtype the output has its own (case.output, the kernel's output-dtype rule): x_hat is rounded to the narrower
    of x's and the output's dtype (Llama: a float16 x_hat times a float32 weight, stored in float32; T5: x_hat cast
    to a 16-bit weight's dtype), or, where the output is the wider, kept in it (T5 with float32 weights) -- both
    variants, as implementations differ; the product is rounded to the output's dtype."""
    out = case.output or case.storage
    if out == case.storage:
        return [] if case.u_out == case.u_acc else [(out, out)]
    narrower = max((case.storage, out), key=error_model.unit_roundoff)
    return list(dict.fromkeys([(narrower, out), (out, out)]))


def _double_rounding(case: Case) -> list[Prediction]:
    predictions = []
    for first, out in _rounding_variants(case):
        lo, hi = _rounded_normalized(case, first)
        if case.gamma is not None:  # the product in the storage dtype (or in float32, then rounded: the widening)
            lo, hi = _widened(*_times(lo, hi, case.gamma), case.u_acc)
            lo, hi = round_to(lo, out), round_to(hi, out)
        if case.beta is not None:
            lo, hi = _widened(lo + case.beta, hi + case.beta, case.u_acc)
            lo, hi = round_to(lo, out), round_to(hi, out)
        lo, hi = _widened(lo, hi, FLOAT64_SLACK)
        center, half = interval(lo, hi)
        predictions.append(Prediction({"y": center}, {"y": np.where(np.isfinite(half), half, np.inf)}))
    return predictions


def _double_rounding_backward(case: Case) -> list[Prediction]:
    """dgamma = sum over rows of dy R(x_hat) (each product rounded to storage, summed in the accumulation dtype,
    stored); dx from g' = gamma dy exact or rounded to storage (either, as implementations differ). With weights in
    another dtype, R and the storage are the dtype of each of :func:`_rounding_variants`' x_hat roundings."""
    if case.gamma is None:
        return []
    return [_double_rounding_gradients(case, first) for first in dict.fromkeys(f for f, _ in _rounding_variants(case))]


def _double_rounding_gradients(case: Case, storage: str) -> Prediction:
    u_out = error_model.unit_roundoff(storage)
    exact = gradients(case)
    rounded_upstream = gradients(case, gamma=np.ones_like(case.gamma), dy=round_to(case.gamma * case.dy, storage))
    lo, hi = _rounded_normalized(case, storage)
    terms_lo, terms_hi = _widened(*_times(lo, hi, case.dy), u_out)
    rows = int(np.prod(case.x.shape[:-1]))
    lead = tuple(range(case.x.ndim - 1))
    magnitude = np.maximum(np.abs(terms_lo), np.abs(terms_hi)).sum(axis=lead)
    sum_error = gamma_n(max(rows - 1, 0), case.u_acc) * magnitude
    low, high = _widened(terms_lo.sum(axis=lead) - sum_error, terms_hi.sum(axis=lead) + sum_error, u_out)
    both = [exact.values["x"] - exact.bounds["x"], exact.values["x"] + exact.bounds["x"],
            rounded_upstream.values["x"] - rounded_upstream.bounds["x"],
            rounded_upstream.values["x"] + rounded_upstream.bounds["x"]]
    return replaced(exact, x=interval(np.minimum(both[0], both[2]), np.maximum(both[1], both[3])),
                    weight=interval(low, high))


def _double_rounding_derivation() -> Derivation:
    w, h, d1, d2 = sp.symbols(r"\gamma_i \hat{x}_i delta_1 delta_2", real=True)
    u = sp.Symbol("u", positive=True)
    return Derivation((
        Equal(w * h * (1 + d1) * (1 + d2) - w * h, w * h * (d1 + d2 + d1 * d2),
              r"$\mathrm{fl}(\gamma\,\mathrm{R}(\hat{x})) - \gamma\hat{x}$ with two roundings $\delta_1$ (to storage) "
              r"and $\delta_2$ (the product): up to $(2u + u^2)|\gamma\hat{x}|$, twice the one rounding a "
              r"correct kernel makes"),
        Equal((1 + u) ** 2 - 1, 2 * u + u**2, r"the worst case of two roundings, relative"),
        Fact(r"x = (1.541016, -0.293457),\ \gamma = (1.770508, 0.853516),\ \epsilon = 10^{-5}\ (\text{fp16}):\ "
             r"\mathrm{R}(\gamma_1\mathrm{R}(\hat{x}_1)) = 2.4609375 \ne \mathrm{R}(\gamma_1\hat{x}_1) = 2.4589844",
             "the witness of docs/findings.md [A]: two roundings land two fp16 ulps from the exact 2.45966",
             _double_rounding_witness),
        Fact(r"|\mathrm{R}(\gamma\,\mathrm{R}(\hat{x}_{\text{fp32}})) - c| \le b",
             "a numpy simulation of the Llama casting (float32 statistics, x_hat cast to float16, the weight "
             "multiply in float16) lies within the model on every element",
             _llama_simulation_fits),
    ))


def _double_rounding_witness() -> bool:
    row = np.array([1.541016, -0.293457], dtype=np.float16).astype(np.float64)
    weight = np.array([1.770508, 0.853516], dtype=np.float16).astype(np.float64)
    xhat = oracles.rmsnorm(row, None, 1e-5)
    twice = round_to(weight * round_to(xhat, "float16"), "float16")[0]
    once = round_to(weight * xhat, "float16")[0]
    return twice == 2.4609375 and once == np.float16(2.4589844)


def _llama(row: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    r32 = row.astype(np.float32)
    rstd = np.float32(1) / np.sqrt(np.mean(r32 * r32, axis=-1, keepdims=True) + np.float32(eps))
    return (weight.astype(np.float16) * (r32 * rstd).astype(np.float16)).astype(np.float64)


def _llama_simulation_fits() -> bool:
    rng = np.random.default_rng(5)
    for width in (2, 7, 64, 1000):
        row = simulate.adversarial_rows(rng, 4, width, 0.0, np.float16)
        weight = (1 + 0.5 * rng.standard_normal(width)).astype(np.float16).astype(np.float64)
        case = Case("rms", row, weight, None, 1e-5, "float16", "float32")
        (prediction,) = _double_rounding(case)
        if np.any(np.abs(_llama(row, weight, 1e-5) - prediction.values["y"]) > prediction.bounds["y"]):
            return False
    return True


# --- backward in storage precision --------------------------------------------------------------------------------


def _storage_backward(case: Case) -> list[Prediction]:
    if case.u_out == case.u_acc:
        return []
    return [gradients(case, u_acc=case.u_out)]


def _storage_backward_derivation() -> Derivation:
    c_, r_, d1, d2 = sp.symbols("c_j r delta_1 delta_2", real=True)
    return Derivation((
        Equal((c_ + mu - mu * (1 + d1)) * r_ * (1 + d2) - c_ * r_, c_ * r_ * d2 - mu * r_ * d1 * (1 + d2),
              r"$\hat{x}$ rebuilt from a mean and an rstd stored with relative errors $\delta_1$, $\delta_2$ "
              r"($|\delta| \le u_{out}$): off by $|\hat{x}_j| u_{out} + |\mu| r\,u_{out}$, the error model's "
              r"$\Xi_j$ with $u_{acc} = u_{out}$; the backward bound of claim numerics.error\_model at that "
              r"roundoff bounds dx"),
        Fact(r"|dx_{\text{fp16 statistics}} - c| \le b",
             "a float16 simulation of r (g - mean(g) - xhat mean(g xhat)) lies within the storage-precision bound "
             "and outside the float32-accumulation bound somewhere",
             _storage_backward_simulation_fits),
    ))


def _storage_backward_simulation_fits() -> bool:
    rng = np.random.default_rng(7)
    outside_correct = False
    for width in (2, 3, 64):
        row = simulate.adversarial_rows(rng, 4, width, 1.0, np.float16)
        upstream = rng.standard_normal(row.shape).astype(np.float16).astype(np.float64)
        got = simulate.layernorm_backward(row, upstream, 1e-5, acc=np.float16).astype(np.float64)
        case = Case("ln", row, None, None, 1e-5, "float16", "float32", dy=upstream)
        (model,) = _storage_backward(case)
        if np.any(np.abs(got - model.values["x"]) > model.bounds["x"]):
            return False
        correct = gradients(case)
        outside_correct |= bool(np.any(np.abs(got - correct.values["x"]) > correct.bounds["x"]))
    return outside_correct


# --- simulations the Facts run ----------------------------------------------------------------------------------


@cache
def _simulation_fits(model, simulated, storage, name: str) -> bool:
    """Every simulated element within the model (LN, and RMSNorm where the simulation has one), and some element
    outside the correct bound (the model is needed)."""
    rng = np.random.default_rng(11)
    outside_correct = False
    for width in (2, 8, 64, 1000):
        for shift in (0.0, 10.0, 1e2, 1e4):
            for eps in (1e-12, 1e-5, 1e-2):
                row = simulate.adversarial_rows(rng, 3, width, shift, storage)
                case = Case("ln", row, None, None, eps, name, "float32")
                for order in ("sequential", "pairwise"):
                    with np.errstate(all="ignore"):  # float16 sums overflow: the model's bound is inf there
                        got = simulated(row, eps, out=storage, order=order).astype(np.float64)
                    (prediction,) = model(case)
                    bound = prediction.bounds["y"]
                    inside = np.abs(got - prediction.values["y"]) <= bound
                    if not np.all(inside | ~np.isfinite(bound)):
                        return False
                    correct = error_model.forward_bound(row, None, None, eps, case.u_acc, case.u_out, "ln")
                    outside_correct |= bool(np.any(np.abs(got - oracles.layernorm(row, None, None, eps)) > correct))
    return outside_correct


MECHANISMS = (
    Mechanism("one_pass_variance", "the one-pass variance E[x^2] - E[x]^2, which cancels on rows with a large mean",
              LN, _one_pass_derivation, _one_pass),
    Mechanism("storage_accumulation", "statistics accumulated in {storage} instead of float32", BOTH,
              _storage_accumulation_derivation, _storage_accumulation, convention=True),
    Mechanism("double_rounding", "x_hat rounded to {storage} before the weight multiply", BOTH,
              _double_rounding_derivation, _double_rounding, _double_rounding_backward, convention=True),
    Mechanism("storage_statistics_backward", "the backward computed from statistics or partial gradients kept in "
              "{storage}", BOTH, _storage_backward_derivation, backward=_storage_backward, convention=True),
)
