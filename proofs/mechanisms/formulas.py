"""Mechanisms that compute another function: each is the correct normalization at transformed parameters.

Every bug formula here is shown (by a checked step) to equal the correct LN/RMSNorm output at another
gamma', beta', eps' or kind, so its float64 value is the oracle's at those parameters and its bound is the
error model's bound of that computation (:func:`proofs.mechanisms.base.normalized`):

    eps_outside_root   gamma (x - mu)/(sigma + eps) + beta      = LN at eps' = 2 sigma eps + eps^2
    unbiased_variance  sigma^2 d/(d - 1)                         = LN at gamma sqrt((d-1)/d), eps (d-1)/d
    fixed_eps          a constant c instead of the eps argument  = LN at eps' = c (c = 0: no eps), c fitted
    max_variance_eps   1/sqrt(max(sigma^2, eps))                 = LN at eps' = max(eps - sigma^2, 0)
    weight_offset      scale w where 1 + w is declared, or back  = LN at gamma' = gamma -+ 1
    sum_not_mean       1/sqrt(sum x^2 + eps) (RMSNorm)           = RMS at gamma/sqrt(d), eps/d
    extra_centering    an RMSNorm that subtracts the mean        = LN without shift
    no_centering       a LayerNorm that does not                 = RMS + beta (one more addition)
    padded_lanes       a power-of-two block's padded lanes counted as zeros in the statistics
                                                                 = LN at eps' = v' + eps - sigma^2, beta' (below)
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import sympy as sp

from proofs import expressions, oracles
from proofs.algebra import (
    LN_AGGREGATES,
    MEAN_DEF,
    MS_DEF,
    RMS_AGGREGATES,
    beta,
    d,
    eps,
    gamma,
    i,
    k,
    ms,
    mu,
    row_sum,
    var,
    x,
)
from proofs.derivation import Derivation, Equal
from proofs.mechanisms import fitting
from proofs.mechanisms.base import (
    Case,
    Fit,
    Mechanism,
    Parameter,
    Prediction,
    correct_backward,
    gradients,
    normalized,
    replaced,
    round_to,
    row_statistics,
)

LN, RMS, BOTH = frozenset({"ln"}), frozenset({"rms"}), frozenset({"ln", "rms"})
EPS_DOMAIN = (0.0, 1.0)  # a constant a kernel hard-codes; a fit beyond 1 is the rows' scale moving, not an eps
FIT_ROWS = 64  # the backward fit uses the first rows' dx; the model at the fit is checked on every row and gradient
EPS_GRID = np.geomspace(1e-10, 1e4, 113)  # the backward search's eps, times max(sigma^2, eps) (0 added)

sigma = sp.Symbol("sigma", nonnegative=True)  # sqrt(sigma^2), or sqrt(q) for RMSNorm
c = sp.Symbol("c", nonnegative=True)  # a constant eps
block = sp.Symbol("B", integer=True, positive=True)  # the power-of-two block width, B >= d


def _output(kind: str) -> sp.Expr:
    return expressions.output(kind)


def _row_statistics(case: Case) -> tuple[np.ndarray, np.ndarray]:
    """(mean, spread) per row, leading axes only (base.row_statistics without the row axis)."""
    rows = row_statistics(case)
    return rows["mean"][..., 0], rows["spread"][..., 0]


def _ones(case: Case) -> np.ndarray:
    return np.ones(case.x.shape[-1]) if case.gamma is None else case.gamma


# --- eps outside the root ---------------------------------------------------------------------------------------


def _eps_outside_root_derivation() -> Derivation:
    eps_prime = 2 * sigma * eps + eps**2
    bug = {"ln": gamma[i] * (x[i] - mu) / (sigma + eps) + beta[i], "rms": gamma[i] * x[i] / (sigma + eps)}
    scale = {"ln": var, "rms": ms}
    return Derivation((
        Equal((sigma + eps) ** 2, sigma**2 + eps_prime, r"$(\sigma + \epsilon)^2 = \sigma^2 + \epsilon'$, "
              r"$\epsilon' = 2\sigma\epsilon + \epsilon^2$ ($\sigma = \sqrt{\sigma^2}$, or $\sqrt{q}$ for RMSNorm)"),
        *(Equal(bug[kind], _output(kind).subs(scale[kind] + eps, sp.factor(sigma**2 + eps_prime)),
                rf"{kind}: with both roots nonnegative the kernel computes the correct function at $\epsilon'$, "
                r"off by $\approx \epsilon/\sigma$ relative for $\sigma^2 \gg \epsilon$",
                given={scale[kind]: sigma**2})
          for kind in ("ln", "rms")),
    ))


def _eps_outside_root(case: Case) -> list[Prediction]:
    _, spread = _row_statistics(case)
    root = np.sqrt(spread)
    return [normalized(case, eps=2 * root * case.eps + case.eps**2)]


# --- unbiased variance ------------------------------------------------------------------------------------------


def _unbiased_derivation() -> Derivation:
    n = sp.Symbol("n", integer=True, positive=True)  # d = n + 1 >= 2
    bug = gamma[i] * (x[i] - mu) / sp.sqrt(d * var / (d - 1) + eps) + beta[i]
    scaled = _output("ln").subs({gamma[i]: gamma[i] * sp.sqrt((d - 1) / d), eps: eps * (d - 1) / d})
    return Derivation((
        Equal(row_sum((x[k] - mu) ** 2) / (d - 1), d * var / (d - 1), r"the sample variance divides $d\sigma^2$ "
              r"by $d - 1$", aggregates=LN_AGGREGATES),
        Equal(bug.subs(d, n + 1), scaled.subs(d, n + 1),
              r"$d \ge 2$: the output is $\mathrm{LN}$ at $\gamma\sqrt{(d-1)/d}$ and $\epsilon(d-1)/d$: off by "
              r"$\approx 1/(2d)$ relative"),
    ))


def _unbiased_variance(case: Case) -> list[Prediction]:
    width = case.x.shape[-1]
    if width < 2:
        return []
    shrink = (width - 1) / width
    return [normalized(case, gamma=_ones(case) * np.sqrt(shrink), eps=case.eps * shrink)]


# --- fixed eps --------------------------------------------------------------------------------------------------


def _fixed_eps_derivation() -> Derivation:
    return Derivation(tuple(
        Equal(sp.diff(_output(kind), eps), -(_output(kind) - (beta[i] if kind == "ln" else 0)) / (2 * (
            (var if kind == "ln" else ms) + eps)),
              rf"{kind}: a kernel using a constant $c$ computes the function at $\epsilon = c$; to first order its "
              r"output moves by $-\frac{\gamma\hat{x}}{2 s^2}(c - \epsilon)$, beyond the bound where "
              r"$|c - \epsilon|$ is comparable to $s^2 u$")
        for kind in ("ln", "rms")))


def _eps_words(case: Case) -> fitting.Describe:
    def words(value: float, low: float, high: float) -> str:
        if value == 0:
            fitted = f"at most {high:.2g}"
        else:
            digits = next((n for n in range(3, 7) if f"{low:.{n}g}" != f"{high:.{n}g}"), 7)
            fitted = f"at least {low:.3g}" if high >= EPS_DOMAIN[1] else f"{low:.{digits}g} to {high:.{digits}g} fit"
        return f"eps ≈ {value:.3g} used instead of {case.eps:g}, fitted: {fitted}"

    return words


UNRESOLVED = "no output depends on eps (x at the row mean, or a zero weight)"


def _fixed_eps_fit(case: Case, got: dict[str, np.ndarray]) -> Fit:
    """The constant eps* from the output, element by element.

    y = gamma (x - mu)/sqrt(s^2 + eps*) + beta (s^2 = sigma^2, or q and mu = 0 for RMSNorm) gives, where
    gamma (x - mu) != 0, eps* = (gamma (x - mu)/(y - beta))^2 - s^2; y within B of the model's value puts eps* in
    [(gamma (x - mu)/(|y - beta| + B))^2, (gamma (x - mu)/(|y - beta| - B))^2] - s^2 (no upper end where
    |y - beta| <= B). An element resolves eps* to within about 4 (s^2 + eps*) B/|y - beta|: eps* is identifiable
    only where that is small against |eps* - eps| (eps* moves y by about eps*/(2 (s^2 + eps*)) relative, so a
    constant negligible against s^2 u is not). The median is over the best-resolved elements; B is the model's
    bound at a rough first estimate (:func:`_rough_eps`: the correct model's bound can be far too small for the
    kernel's outputs, e.g. rows with sigma^2 << eps that a kernel without eps normalizes to 1). An output farther
    than B from beta on the side opposite gamma (x - mu) rules any eps out.
    """
    y = got.get("y")
    if y is None:
        return Fit(None, detail="no output")
    return _eps_from_output(case, y, normalized(case, eps=_rough_eps(case, y)).bounds["y"])


def _eps_terms(case: Case, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(gamma (x - mu), y - beta, s^2) elementwise: the model says (y - beta) sqrt(s^2 + eps*) = gamma (x - mu)."""
    rows = row_statistics(case)
    offset = y - (0.0 if case.beta is None else case.beta)
    return _ones(case) * (case.x - rows["mean"]), offset, np.broadcast_to(rows["spread"], np.shape(y))


def _rough_eps(case: Case, y: np.ndarray) -> float:
    """The median of (gamma (x - mu)/(y - beta))^2 - s^2 over the elements farthest from their row's mean (the
    upper half of |gamma (x - mu)|), within EPS_DOMAIN; the argument where no element gives one."""
    signed, offset, spread = _eps_terms(case, y)
    numerator = np.abs(signed)
    with np.errstate(all="ignore"):
        usable = (numerator > 0) & (offset != 0) & np.isfinite(offset)
        if not usable.any():
            return case.eps
        far = usable & (numerator >= np.median(numerator[usable]))
        estimate = np.median(((numerator / offset) ** 2 - spread)[far])
    return float(np.clip(estimate, *EPS_DOMAIN)) if np.isfinite(estimate) else case.eps


def _eps_from_output(case: Case, y: np.ndarray, bound: np.ndarray) -> Fit:
    signed, offset, spread = _eps_terms(case, y)
    numerator = np.abs(signed)
    bound = np.broadcast_to(bound, np.shape(y))
    with np.errstate(all="ignore"):
        constraining = (numerator > 0) & np.isfinite(offset) & np.isfinite(bound) & np.isfinite(numerator)
        two_sided = constraining & (np.abs(offset) > bound)
        if np.any(two_sided & (np.sign(signed) != np.sign(offset))):
            return Fit(None, detail="an output on the wrong side of the bias for any eps")
        low = (numerator / (np.abs(offset) + bound)) ** 2 - spread
        high = np.where(two_sided, (numerator / (np.abs(offset) - bound)) ** 2 - spread, np.inf)
        estimate = np.where(two_sided, (numerator / offset) ** 2 - spread, np.nan)
    return fitting.from_constraints(estimate[constraining], low[constraining], high[constraining], argument=case.eps,
                                    domain=EPS_DOMAIN, describe=_eps_words(case), unresolved=UNRESOLVED)


def _fixed_eps_backward_fit(case: Case, got: dict[str, np.ndarray]) -> Fit:
    """The constant eps* from dx of the first FIT_ROWS rows, by search (dx is not solvable for eps in closed form:
    a cubic in s per element): the eps whose VJP's worst |dx - center|/B over those rows is least (B the correct
    model's bound plus the store rounding of the kernel's dx, a weight: the model's own bound is checked after).
    Identifiable under the forward's condition (eps* not negligible against sigma^2 or q); the model
    at the fit is then checked on every row, dweight and dbias included."""
    dx = got.get("x")
    if dx is None or case.dy is None:
        return Fit(None, detail="no dx")
    rows = min(FIT_ROWS, int(np.prod(case.x.shape[:-1])))
    x, dy = case.x.reshape(-1, case.x.shape[-1])[:rows], case.dy.reshape(-1, case.x.shape[-1])[:rows]
    bound = np.broadcast_to(correct_backward(case).bounds["x"] + case.u_out * np.abs(dx), dx.shape)
    bound = bound.reshape(-1, dx.shape[-1])[:rows]
    dx = dx.reshape(-1, dx.shape[-1])[:rows]
    vjp = oracles.layernorm_vjp if case.kind == "ln" else oracles.rmsnorm_vjp

    def worst(eps_value: float) -> float:
        with np.errstate(all="ignore"):
            ratio = np.abs(dx - vjp(x, case.gamma, eps_value, dy)[0]) / bound
        return float(np.max(ratio)) if np.all(np.isfinite(ratio)) else np.inf

    scale = max(float(row_statistics(case)["spread"].max()), case.eps, np.finfo(np.float64).tiny)
    grid = np.concatenate(([0.0], EPS_GRID * scale))
    return fitting.by_search(worst, grid[grid <= EPS_DOMAIN[1]], argument=case.eps, domain=EPS_DOMAIN,
                             describe=_eps_words(case), unresolved=UNRESOLVED)


FIXED_EPS = Parameter(
    "eps", {"forward": _fixed_eps_fit, "backward": _fixed_eps_backward_fit},
    {"forward": lambda case, fit: normalized(case, eps=fit.value),
     "backward": lambda case, fit: gradients(replace(case, eps=fit.value))})


# --- max(sigma^2, eps) ------------------------------------------------------------------------------------------


def _max_variance_derivation() -> Derivation:
    t = sp.Symbol("t", nonnegative=True)
    eps_prime = sp.Max(eps - var, 0)
    return Derivation((
        Equal(sp.Max(var, eps).subs(eps, var + t), (var + eps_prime).subs(eps, var + t),
              r"$\epsilon = \sigma^2 + t \ge \sigma^2$: $\max(\sigma^2, \epsilon) = \sigma^2 + \epsilon'$, "
              r"$\epsilon' = \max(\epsilon - \sigma^2, 0)$"),
        Equal(sp.Max(var, eps).subs(var, eps + t), (var + eps_prime).subs(var, eps + t),
              r"$\sigma^2 = \epsilon + t \ge \epsilon$: the same; so the kernel computes the function at "
              r"$\epsilon'$, right only where one term dwarfs the other"),
    ))


def _max_variance_eps(case: Case) -> list[Prediction]:
    _, spread = _row_statistics(case)
    return [normalized(case, eps=np.maximum(case.eps - spread, 0.0))]


# --- weight offset ----------------------------------------------------------------------------------------------


def _weight_offset_derivation() -> Derivation:
    return Derivation(tuple(
        Equal(_output(kind).subs(gamma[i], gamma[i] + 1) - _output(kind), _output(kind).subs(
            {gamma[i]: 1, beta[i]: 0}),
              rf"{kind}: an offset of 1 missing or extra moves the output by $\pm\hat{{x}}_i$, "
              r"far beyond the bound wherever $\hat{x} \ne 0$")
        for kind in ("ln", "rms")))


def _weight_offset(case: Case) -> list[Prediction]:
    if case.gamma is None:
        return []
    variants = ((-1.0, "the declared 1 + w offset is missing: scales by w"),
                (1.0, "scales by 1 + w, an offset that is not declared"))
    return [replace(normalized(case, gamma=case.gamma + shift), detail=detail, variant=f"{shift:+g}")
            for shift, detail in variants]


def _offset_in_weight_dtype_derivation() -> Derivation:
    rounding = sp.IndexedBase("delta", real=True)
    return Derivation(tuple(
        Equal(_output(kind).subs(gamma[i], gamma[i] * (1 + rounding[i])) - _output(kind),
              rounding[i] * gamma[i] * _output(kind).subs({gamma[i]: 1, beta[i]: 0}),
              rf"{kind}: $1 + w$ rounded to a 16-bit weight's dtype is $\gamma_i (1 + \delta_i)$, "
              r"$|\delta_i| \le u_{16}$: the output moves by $\delta_i \gamma_i \hat{x}_i$, an error of the weight's "
              r"precision, beyond the bound where x and the output are float32")
        for kind in ("ln", "rms")))


def _rounded_offset(case: Case) -> np.ndarray | None:
    """gamma = 1 + w rounded to the weight's 16-bit dtype; None where that rounding changes nothing (no offset:
    gamma = w is already in that dtype) or the weight is not 16-bit."""
    if case.gamma is None or case.weight_dtype not in ("float16", "bfloat16"):
        return None
    rounded = round_to(case.gamma, case.weight_dtype)
    return None if np.array_equal(rounded, case.gamma) else rounded


def _offset_in_weight_dtype(case: Case) -> list[Prediction]:
    """The correct forward model at the rounded 1 + w."""
    rounded = _rounded_offset(case)
    if rounded is None:
        return []
    return [replace(normalized(case, gamma=rounded), detail=f"1 + w rounded to {case.weight_dtype}")]


def _offset_in_weight_dtype_backward(case: Case) -> list[Prediction]:
    """dx of the correct backward model at the rounded 1 + w (autograd differentiates the rounded scale as given);
    dweight and dbias do not read gamma."""
    rounded = _rounded_offset(case)
    if rounded is None:
        return []
    moved = gradients(case, gamma=rounded)
    return [replaced(correct_backward(case), f"1 + w rounded to {case.weight_dtype}",
                     x=(moved.values["x"], moved.bounds["x"]))]


# --- sum instead of mean of squares -----------------------------------------------------------------------------


def _sum_not_mean_derivation() -> Derivation:
    bug = gamma[i] * x[i] / sp.sqrt(row_sum(x[k] ** 2) + eps)
    return Derivation((
        Equal(bug, _output("rms").subs({gamma[i]: gamma[i] / sp.sqrt(d), eps: eps / d}),
              r"$\sum_k x_k^2 = d q$: the output is RMS at $\gamma/\sqrt{d}$ and $\epsilon/d$, "
              r"too small by $\sqrt{d}$", aggregates=RMS_AGGREGATES),
    ))


def _sum_not_mean(case: Case) -> list[Prediction]:
    width = case.x.shape[-1]
    if width < 2:
        return []
    return [normalized(case, gamma=_ones(case) / np.sqrt(width), eps=case.eps / width)]


# --- centring mismatches ----------------------------------------------------------------------------------------


def _extra_centering_derivation() -> Derivation:
    centred = expressions.RMS_DEFINITION.subs(MS_DEF, var).subs(x[i], x[i] - mu)
    return Derivation((
        Equal(centred, _output("ln") - beta[i], r"an RMSNorm of the centred row $x - \mu$ (mean square "
              r"$\sigma^2$) is LayerNorm without shift; it differs from RMSNorm by the mean $\mu$"),
    ))


def _extra_centering(case: Case) -> list[Prediction]:
    return [normalized(case, kind="ln")]


def _no_centering_derivation() -> Derivation:
    return Derivation((
        Equal(expressions.LN_DEFINITION.subs(MEAN_DEF, 0), expressions.RMS_DEFINITION + beta[i],
              r"LayerNorm with the mean taken as 0 is RMSNorm plus $\beta$ (one more rounded addition)",
              aggregates=RMS_AGGREGATES),
    ))


def _no_centering(case: Case) -> list[Prediction]:
    rms = normalized(replace(case, kind="rms", beta=None))
    shift = np.zeros(case.x.shape[-1]) if case.beta is None else case.beta
    one_more = (1 + case.u_acc) * (1 + case.u_out) - 1  # the addition of beta, rounded, then stored
    y = rms.values["y"] + shift
    return [Prediction({"y": y}, {"y": rms.bounds["y"] + one_more * (np.abs(rms.values["y"]) + np.abs(shift))})]


# --- padded lanes -----------------------------------------------------------------------------------------------


def _padded_derivation() -> Derivation:
    m_prime = d * mu / block
    v_prime = (d * var + d * (mu - m_prime) ** 2 + (block - d) * m_prime**2) / block
    s_prime = sp.sqrt(v_prime + eps)
    bug = gamma[i] * (x[i] - m_prime) / s_prime + beta[i]
    return Derivation((
        Equal(row_sum(x[k]) / block, m_prime, r"the mean over $B$ lanes, $d$ of them data: $\mu' = d\mu/B$",
              aggregates=LN_AGGREGATES),
        Equal((row_sum((x[k] - m_prime) ** 2) + (block - d) * m_prime**2) / block, v_prime,
              r"the padded lanes hold $0 - \mu'$: $v' = (d\sigma^2 + d(\mu - \mu')^2 + (B - d)\mu'^2)/B$",
              aggregates=LN_AGGREGATES),
        Equal(bug, _output("ln").subs({eps: v_prime + eps - var, beta[i]: beta[i] + gamma[i] * (mu - m_prime)
                                      / s_prime}, simultaneous=True),
              r"the output is LN at $\epsilon' = v' + \epsilon - \sigma^2$ and $\beta' = \beta + \gamma(\mu - \mu')"
              r"/\sqrt{v' + \epsilon}$; equal to LN when $B = d$"),
    ))


def _padded_lanes(case: Case) -> list[Prediction]:
    width = case.x.shape[-1]
    lanes = 1 << (width - 1).bit_length()
    if lanes == width:
        return []
    mean, spread = _row_statistics(case)
    m_prime = width * mean / lanes
    v_prime = (width * spread + width * (mean - m_prime) ** 2 + (lanes - width) * m_prime**2) / lanes
    shift = np.zeros(width) if case.beta is None else case.beta
    beta_prime = shift + _ones(case) * ((mean - m_prime) / np.sqrt(v_prime + case.eps))[..., None]
    return [replace(normalized(case, beta=beta_prime, eps=v_prime + case.eps - spread),
                    detail=f"a block of {lanes} lanes for d = {width}")]


MECHANISMS = (
    Mechanism("eps_outside_root", "eps added outside the square root: 1/(sigma + eps)", BOTH,
              _eps_outside_root_derivation, _eps_outside_root),
    Mechanism("unbiased_variance", "the unbiased (d - 1) variance instead of the population variance", LN,
              _unbiased_derivation, _unbiased_variance),
    Mechanism("fixed_eps", "the eps argument ignored", BOTH, _fixed_eps_derivation, parameter=FIXED_EPS),
    Mechanism("max_variance_eps", "max(sigma^2, eps) instead of sigma^2 + eps", BOTH, _max_variance_derivation,
              _max_variance_eps),
    Mechanism("weight_offset", "the weight offset (Gemma's 1 + w) wrong", BOTH, _weight_offset_derivation,
              _weight_offset),
    Mechanism("offset_in_weight_dtype", "the weight offset's 1 + w added in the weight's 16-bit dtype", BOTH,
              _offset_in_weight_dtype_derivation, _offset_in_weight_dtype, _offset_in_weight_dtype_backward),
    Mechanism("sum_not_mean", "the sum of squares instead of their mean", RMS, _sum_not_mean_derivation,
              _sum_not_mean),
    Mechanism("extra_centering", "an RMSNorm that subtracts the row mean (LayerNorm statistics)", RMS,
              _extra_centering_derivation, _extra_centering),
    Mechanism("no_centering", "a LayerNorm that does not subtract the row mean (RMSNorm plus bias)", LN,
              _no_centering_derivation, _no_centering),
    Mechanism("padded_lanes", "padded lanes of a power-of-two block counted in the statistics", LN,
              _padded_derivation, _padded_lanes),
)
