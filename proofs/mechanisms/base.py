"""The record of a mechanism and what its float64 evaluators return.

A :class:`Case` is one example as a kernel received it (float64 copies of the already-rounded inputs, the
effective weight gamma = offset + weight, the storage and accumulation dtypes). A mechanism's evaluator
returns :class:`Prediction` s, one per variant (e.g. weight_offset's missing or extra 1): per quantity a
center and a per-element bound, with the claim that a kernel following the mechanism satisfies
``|kernel - center| <= bound`` elementwise. Quantities: ``"y"`` (forward), ``"x"``, ``"weight"``, ``"bias"``
(the gradients; weight and bias summed over rows). An infinite bound explains nothing.

A mechanism with a free parameter (``fixed_eps``'s constant; BatchNorm's applied momentum) declares a
:class:`Parameter` instead of candidates: a fitting rule estimates the value from the evidence (the example and
the kernel's outputs) as a :class:`Fit`, and the model at that value is then checked against every output like
any other prediction (proofs.mechanisms.fitting, properties.bounds.diagnosis).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from proofs import error_model, oracles
from proofs.derivation import Derivation

# The largest finite value of each storage dtype (a sum beyond it overflows to inf).
FLOAT_MAX = {"float64": 1.7976931348623157e308, "float32": 3.4028234663852886e38, "float16": 65504.0,
             "bfloat16": 3.3895313892515355e38}
# Significand bits (with the implicit one) and the smallest normal exponent of bfloat16 (numpy has none).
_BFLOAT16 = (8, -126)


def round_to(values: np.ndarray, dtype: str) -> np.ndarray:
    """Round float64 values to ``dtype`` (nearest, ties to even) and back to float64: R(v), monotone in v."""
    values = np.asarray(values, dtype=np.float64)
    if dtype in ("float64", "float32", "float16"):
        with np.errstate(over="ignore"):
            return values.astype(dtype).astype(np.float64)
    if dtype != "bfloat16":
        raise ValueError(f"unknown dtype {dtype!r}")
    bits, min_exponent = _BFLOAT16
    with np.errstate(invalid="ignore", over="ignore"):
        _, exponent = np.frexp(values)
        quantum = np.ldexp(1.0, np.maximum(exponent, min_exponent + 1) - bits)
        rounded = np.rint(values / quantum) * quantum
    return np.where(np.abs(rounded) > FLOAT_MAX["bfloat16"], np.copysign(np.inf, values), rounded)


@dataclass(frozen=True)
class Case:
    """One example: float64 values of what the kernel received, and its dtypes (names such as "float16")."""

    kind: str  # "ln" or "rms"
    x: np.ndarray
    gamma: np.ndarray | None  # effective weight offset + weight; None: scale 1
    beta: np.ndarray | None  # LayerNorm's shift; None: 0
    eps: float
    storage: str
    accumulation: str
    dy: np.ndarray | None = None  # upstream gradient (backward)
    bound: str = error_model.DEFAULT_BOUND  # the error model's bound: "probabilistic" or "worst-case"
    output: str = ""  # the output's dtype where it is not the storage's (weights in another dtype: the kernel's rule)
    weight_dtype: str = ""  # the weight's dtype as the kernel received it ("" without a weight)

    @property
    def u_acc(self) -> float:
        return error_model.unit_roundoff(self.accumulation)

    @property
    def u_out(self) -> float:
        return error_model.unit_roundoff(self.storage)



@dataclass(frozen=True)
class Fit:
    """A free parameter as the evidence determines it (:class:`Parameter`).

    ``value``: the estimate; ``low``..``high``: the values the evidence allows (every element's constraint met,
    to first order in its bound); ``detail``: the estimate in words ("eps ~ 0.0003 (fitted: 0.000299 to
    0.000301)"). ``identifiable`` False: this evidence cannot tell the parameter's value (``detail`` says why, e.g.
    eps negligible against every row's variance), and the diagnosis says so instead of naming a value. ``value``
    None with ``identifiable`` True: the evidence rules the mechanism out (no admissible value fits, e.g. only a
    negative eps would)."""

    value: float | None
    low: float = -math.inf
    high: float = math.inf
    detail: str = ""
    identifiable: bool = True


@dataclass(frozen=True)
class Prediction:
    """Per quantity a center and a per-element bound; ``detail`` describes the variant ("the declared 1 + w offset
    is missing"), ``variant`` identifies it across cases (the same offset or block); ``fit``: the fitted value
    it was evaluated at (a mechanism with a :class:`Parameter`), which a probe reuses instead of refitting."""

    values: dict[str, np.ndarray]
    bounds: dict[str, np.ndarray]
    detail: str = ""
    variant: str = ""
    fit: Fit | None = None


@dataclass(frozen=True)
class Parameter:
    """A free parameter of a mechanism, fitted from the evidence instead of tried from a list of candidates.

    ``fits[direction](case, got) -> Fit`` estimates it from the example (``case``) and the kernel's outputs
    (``got``: {"y"} forward, {"x", "weight", "bias"} backward); ``models[direction](case, fit) -> Prediction``
    is the mechanism's model at the fitted value (center and derived bound, as any prediction), with
    ``fit.detail`` for its detail. A direction missing from ``fits`` is not modelled.

    A fit explains nothing by itself: the diagnosis checks the model at the fitted value against every output
    within its bound (one value, fitted from many elements, must meet every element's constraint), and on the
    probes (other rows, another eps) at the same value, not refitted: evidence the fit never saw. A fitting rule
    states its identifiability condition and returns ``Fit(None, identifiable=False, detail=why)`` where the
    evidence does not determine the value, rather than a value that would name the mechanism wrongly.

    Example (BatchNorm's running mean updated with momentum m*: new = (1 - m*) old + m* batch_mean; the
    momentum fit is :func:`proofs.mechanisms.fitting.fit_momentum`; ``case.running_mean``, ``batch_mean`` and
    ``update_bound`` stand for what a BatchNorm case and its error model will provide, not in :class:`Case` yet)::

        def _fit(case, got):
            return fitting.fit_momentum(case.running_mean, got["running_mean"], batch_mean(case))

        def _model(case, fit):
            center = (1 - fit.value) * case.running_mean + fit.value * batch_mean(case)
            return Prediction({"running_mean": center}, {"running_mean": update_bound(case, fit.value)})

        Mechanism("inverted_momentum", "the momentum applied as 1 - m", BN, _derivation,
                  parameter=Parameter("momentum", {"forward": _fit}, {"forward": _model}))
    """

    name: str
    fits: Mapping[str, Callable[[Case, dict[str, np.ndarray]], Fit]]
    models: Mapping[str, Callable[[Case, Fit], Prediction]]

    def fit(self, case: Case, direction: str, got: dict[str, np.ndarray]) -> Fit | None:
        """The fit on this evidence (None: the direction is not modelled)."""
        rule = self.fits.get(direction)
        return None if rule is None else rule(case, got)

    def at(self, case: Case, direction: str, fit: Fit) -> list[Prediction]:
        """The model at an identified fit's value, on this case (a probe's, or the example's)."""
        if fit.value is None or direction not in self.models:
            return []
        return [replace(self.models[direction](case, fit), detail=fit.detail, variant=self.name, fit=fit)]


@dataclass(frozen=True)
class Mechanism:
    """A derived alternative model of a kernel, with a stable id.

    ``title`` says what the kernel does instead, one line, ``{storage}`` standing for the storage dtype;
    ``derive()`` returns the checked steps showing how the model differs from the correct one;
    ``forward``/``backward`` evaluate it on a case (an empty list: not applicable to this case).
    ``parameter``: a free parameter fitted from the evidence (:class:`Parameter`), for a mechanism whose model
    depends on a value the kernel chose (use :meth:`predictions`, which fits it, rather than ``forward``).
    ``convention``: real libraries follow it deliberately, so a kernel may declare it
    (``Kernel(..., conventions=(id,))``) and is then checked against this model; a convention has no free
    parameter (a declaration cannot depend on the outputs it is checked against).
    """

    id: str
    title: str
    kinds: frozenset[str]
    derive: Callable[[], Derivation] = field(repr=False, compare=False)
    forward: Callable[[Case], list[Prediction]] | None = field(default=None, repr=False, compare=False)
    backward: Callable[[Case], list[Prediction]] | None = field(default=None, repr=False, compare=False)
    convention: bool = False
    parameter: Parameter | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.convention and self.parameter is not None:
            raise ValueError(f"{self.id}: a declarable convention cannot have a fitted parameter")

    def applies(self, direction: str) -> bool:
        """Whether the mechanism models this direction ("forward" or "backward")."""
        if self.parameter is not None:
            return direction in self.parameter.fits
        return (self.forward if direction == "forward" else self.backward) is not None

    def predictions(self, case: Case, direction: str, got: dict[str, np.ndarray] | None = None) -> list[Prediction]:
        """Its predictions on the case: one per variant, or, with a free parameter, the model at the value fitted
        to the kernel's outputs ``got`` (none where the fit is not identifiable or is ruled out)."""
        if self.parameter is not None:
            fit = self.parameter.fit(case, direction, got or {})
            return [] if fit is None else self.parameter.at(case, direction, fit)
        evaluate = self.forward if direction == "forward" else self.backward
        return [] if evaluate is None else evaluate(case)

    def again(self, case: Case, direction: str, prediction: Prediction) -> list[Prediction]:
        """The same variant as ``prediction`` on another case (a probe): a fitted value reused, not refitted."""
        if self.parameter is not None and prediction.fit is not None:
            return self.parameter.at(case, direction, prediction.fit)
        return [p for p in self.predictions(case, direction) if p.variant == prediction.variant]

    def describe(self, storage: str, detail: str = "") -> str:
        """``title`` for this storage dtype, with the variant's detail."""
        text = self.title.format(storage=storage)
        return f"{text} ({detail})" if detail else text


def row_statistics(case: Case) -> dict[str, np.ndarray]:
    """Per row, the row axis kept, in float64: the mean (0 for RMSNorm), the spread mean((x - mean)^2) (sigma^2, or
    q for RMSNorm), mean|x|, mean(x^2)."""
    row = case.x
    mean = row.mean(axis=-1, keepdims=True) if case.kind == "ln" else np.zeros((*row.shape[:-1], 1))
    return {"mean": mean, "spread": np.mean((row - mean) ** 2, axis=-1, keepdims=True),
            "mean_abs": np.mean(np.abs(row), axis=-1, keepdims=True),
            "mean_square": np.mean(row**2, axis=-1, keepdims=True)}


# --- the correct model, and the same computation at other parameters ---------------------------------------------


def normalized(case: Case, gamma=None, beta=None, eps=None, kind: str | None = None) -> Prediction:
    """The correct forward model at (possibly other) parameters: the oracle and the error-model bound.

    Every value mechanism of :mod:`proofs.mechanisms.formulas` is this at transformed parameters (derived there),
    so its bound is the error model's bound of that computation.
    """
    kind = kind or case.kind
    gamma = case.gamma if gamma is None else gamma
    beta = case.beta if beta is None else beta
    eps = case.eps if eps is None else eps
    y = oracles.layernorm(case.x, gamma, beta, eps) if kind == "ln" else oracles.rmsnorm(case.x, gamma, eps)
    bound = error_model.forward_bound(case.x, gamma, beta if kind == "ln" else None, eps, case.u_acc, case.u_out,
                                      kind, model=case.bound)
    return Prediction({"y": y}, {"y": np.broadcast_to(bound, np.shape(y))})


def correct_forward(case: Case) -> Prediction:
    return normalized(case)


def gradients(case: Case, gamma=None, dy=None, u_acc: float | None = None) -> Prediction:
    """The correct backward model (oracle VJPs and the error-model bounds), optionally at another weight,
    upstream gradient or accumulation roundoff."""
    gamma = case.gamma if gamma is None else gamma
    dy = case.dy if dy is None else dy
    vjp = oracles.layernorm_vjp if case.kind == "ln" else oracles.rmsnorm_vjp
    names = ("x", "weight", "bias")
    values = dict(zip(names, vjp(case.x, gamma, case.eps, dy), strict=False))
    bounds = dict(zip(names, error_model.backward_bound(case.x, gamma, case.eps, dy,
                                                        case.u_acc if u_acc is None else u_acc, case.u_out,
                                                        case.kind, model=case.bound), strict=False))
    present = [name for name, value in values.items() if value is not None]
    return Prediction({n: values[n] for n in present}, {n: bounds[n] for n in present})


def correct_backward(case: Case) -> Prediction:
    return gradients(case)


def replaced(base: Prediction, detail: str = "", **quantities: tuple[np.ndarray, np.ndarray]) -> Prediction:
    """``base`` with some quantities' (center, bound) replaced."""
    values, bounds = dict(base.values), dict(base.bounds)
    for name, (value, bound) in quantities.items():
        if name in values:
            values[name], bounds[name] = value, bound
    return Prediction(values, bounds, detail or base.detail)


def interval(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(center, half-width) of the elementwise interval [min(lo, hi), max(lo, hi)]."""
    low, high = np.minimum(lo, hi), np.maximum(lo, hi)
    with np.errstate(invalid="ignore", over="ignore"):
        return (low + high) / 2, (high - low) / 2


def union(*predictions: Prediction) -> Prediction:
    """The elementwise union of the predictions' intervals, quantity by quantity (every quantity of the first)."""
    first = predictions[0]
    values, bounds = {}, {}
    for name in first.values:
        parts = [p for p in predictions if name in p.values]
        with np.errstate(invalid="ignore", over="ignore"):
            lo = np.min([p.values[name] - p.bounds[name] for p in parts], axis=0)
            hi = np.max([p.values[name] + p.bounds[name] for p in parts], axis=0)
        values[name], bounds[name] = interval(lo, hi)
    return Prediction(values, bounds, "; ".join(p.detail for p in predictions if p.detail))
