"""Why a forward or gradient check failed: the mechanisms (proofs.mechanisms) that explain the failing example,
and the models a kernel's declared conventions put in place of the correct one.

A mechanism explains a failed example when the kernel's result is within that mechanism's own derived bound on
every element checked (|got - center| <= bound, the bound finite: an infinite bound explains nothing), and still is
on the probes, the same example with the rows shifted and with another eps, wherever its model applies there (one
row cannot tell a one-pass variance from a wrong eps: both scale the row; a shift or another eps can); the correct
model's is not (the check failed). Of a mechanism's variants (weight_offset's missing/extra) the best fitting one
is kept. A mechanism with a free parameter (fixed_eps's constant: proofs.mechanisms.fitting) is evaluated at the
value fitted to the kernel's outputs, and that value, not refitted, must explain the probes too (for fixed_eps the
probe with another eps is the test that the constant ignores the argument); where the evidence does not identify
the value, and nothing explains the failure, the sentence says so. The matches are ranked: first the tight models
(total bound within TIGHT times the correct model's: another function, or one more rounding), best fit (smallest
ratio) first, then the looser interval models, tightest first. The diagnosis names the best tight model and those
fitting as well or predicting the same on this example (eps = 0 and max(sigma^2, eps) agree on rows with sigma^2 >
eps); where no tight model fits, every loose one that does. It is evaluated once per failing test, on the example
Hypothesis reports (:func:`final_example`), not on every example tried while shrinking, and on examples of at most
DIAGNOSED_ELEMENTS elements (a larger one's failure says it is not diagnosed).

Declared conventions (``Kernel.conventions``) are part of a kernel's model (properties.bounds.models), so they are not
candidates here.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np
import torch

from core.guard import KernelFault
from core.registry import Kernel
from proofs.mechanisms import CONVENTIONS, MECHANISMS, Case, Mechanism, Prediction, correct_backward, correct_forward
from properties import norms, outcome
from properties.bounds.models import case_of, conventions_of

TIGHT = 4.0  # a model whose total bound is within this factor of the correct model's is a tight one
TIE = 0.1  # two tight models predict the same where their centers differ by at most this fraction of their bounds
RATIO_TIE = 0.1  # two tight models fit equally well where their worst ratios are within this fraction
PROBE_SHIFT = 30.0  # the shift of the rows in the probes, in units of their largest standard deviation
PROBE_EPS = (1e-2, 1e-5)  # the probe's eps: the first, or the second when the example's eps is the first
# The largest example diagnosed: each mechanism's model and the probes cost seconds a call beyond (a large batch's
# 4099 x 256 backward ~10 s); larger failing examples (wide rows, large batches) say they are not diagnosed
DIAGNOSED_ELEMENTS = 2**16


@dataclass(frozen=True)
class Match:
    """A mechanism that explains the example: its id, the worst |got - center| / bound (<= 1), the variant's text,
    and its rank key (tight models by ratio, then loose ones by total bound)."""

    mechanism: str
    ratio: float
    text: str
    tight: bool
    width: float  # total bound over the checked elements
    prediction: Prediction = field(compare=False, repr=False)

    def as_json(self, leading: bool) -> dict:
        """``leading``: among the mechanisms the sentence names (the best, and those predicting the same)."""
        return {"mechanism": self.mechanism, "ratio": self.ratio, "text": self.text, "leading": leading}

    @property
    def rank(self) -> tuple:
        return (0, self.ratio, self.width) if self.tight else (1, self.width, self.ratio)


def _fit(prediction: Prediction, got: dict[str, np.ndarray]) -> tuple[float, float]:
    """(worst ratio, total bound) of the kernel's values under the prediction; inf where a bound is not finite."""
    worst, width = 0.0, 0.0
    for name, value in got.items():
        if name not in prediction.values:
            continue
        center = prediction.values[name]
        bound = np.broadcast_to(prediction.bounds[name], np.shape(value))
        if not np.all(np.isfinite(bound) | (np.isnan(center) & ~np.isinf(bound))):  # NaN: an undefined row
            return np.inf, np.inf
        ratio = outcome.ratios(value, center, bound)
        worst = max(worst, float(np.max(ratio)) if ratio.size else 0.0)
        width += float(np.nansum(bound))
    return worst, width


def explaining(kernel: Kernel, case: Case, got: dict[str, np.ndarray], direction: str,
               probes: tuple[tuple[Case, dict[str, np.ndarray]], ...] = ()) -> list[Match]:
    """The mechanisms that explain ``got`` (forward: {"y"}, backward: {"x", "weight", "bias"}), ranked (module
    docstring), and also explain the kernel's results on the ``probes`` (:func:`probes`) where their model applies.
    Mechanisms the kernel declares are part of its model already and are not candidates."""
    with np.errstate(all="ignore"):
        correct = (correct_forward if direction == "forward" else correct_backward)(case)
        reference = sum(float(np.nansum(np.broadcast_to(correct.bounds[n], np.shape(v))))
                        for n, v in got.items() if n in correct.bounds)
    matches = []
    for mechanism in _candidates(kernel, case, direction):
        with np.errstate(all="ignore"):
            fits = [(*_fit(p, got), p) for p in mechanism.predictions(case, direction, got)]
        explained = [fit for fit in fits if fit[0] <= 1.0]
        if explained:
            ratio, width, best = min(explained, key=lambda fit: fit[:2])
            if all(_still_fits(mechanism, direction, best, *probe) for probe in probes):
                matches.append(Match(mechanism.id, ratio, mechanism.describe(case.storage, best.detail),
                                     width <= TIGHT * reference, width, best))
    return sorted(matches, key=lambda m: m.rank)


def _candidates(kernel: Kernel, case: Case, direction: str) -> list[Mechanism]:
    """The mechanisms that model this direction and kind and that the kernel does not declare."""
    return [m for m in MECHANISMS.values()
            if m.applies(direction) and case.kind in m.kinds and m.id not in conventions_of(kernel)]


def unidentified(kernel: Kernel, case: Case, got: dict[str, np.ndarray], direction: str) -> list[str]:
    """'id: why' for each mechanism whose free parameter this evidence does not identify (eps negligible against
    every row's variance, constant rows): said where nothing explains a failure, instead of a wrong name."""
    notes = []
    for mechanism in _candidates(kernel, case, direction):
        if mechanism.parameter is None:
            continue
        with np.errstate(all="ignore"):
            fit = mechanism.parameter.fit(case, direction, got)
        if fit is not None and not fit.identifiable:
            notes.append(f"{mechanism.id}: {fit.detail}")
    return notes


def _still_fits(mechanism: Mechanism, direction: str, best: Prediction, case: Case,
                got: dict[str, np.ndarray]) -> bool:
    """Whether the mechanism's same variant (a fitted value: the same value) explains the kernel on a probe too
    (True where it has no finite model there: no evidence either way)."""
    with np.errstate(all="ignore"):
        same = mechanism.again(case, direction, best)
        if not same:
            return True
        ratio, width = _fit(same[0], got)
    return ratio <= 1.0 or not np.isfinite(width)


def probes(kernel: Kernel, x: torch.Tensor, weight, bias, eps: float, dy=None) -> tuple[tuple[Case, dict], ...]:
    """The kernel's results on variants of the failing example that tell mechanisms apart: the rows shifted by
    PROBE_SHIFT times their largest standard deviation (the statistics' conditioning changes: a per-row scale that
    matched a wrong model by coincidence does not survive it) and the same rows with another eps. A variant the
    kernel faults on is left out."""
    spread = float(x.double().std(-1, unbiased=False).max()) or 1.0
    other_eps = PROBE_EPS[0] if eps != PROBE_EPS[0] else PROBE_EPS[1]
    found = []
    for x_p, eps_p in (((x.double() + PROBE_SHIFT * spread).to(x.dtype), eps), (x, other_eps)):
        try:
            if dy is None:
                got = {"y": norms.as_float64(norms.forward(kernel, x_p, weight, bias, eps_p))}
            else:
                got = {n: norms.as_float64(g) for n, g in norms.vjp(kernel, x_p, weight, bias, eps_p, dy).items()}
        except (KernelFault, RuntimeError):
            continue
        found.append((case_of(kernel, x_p, weight, bias, eps_p, dy), got))
    return tuple(found)


def _same(a: Prediction, b: Prediction) -> bool:
    """Whether two predictions agree to within TIE of their bounds on every element (NaN where both are)."""
    for name in a.values.keys() & b.values.keys():
        with np.errstate(all="ignore"):
            apart = np.abs(a.values[name] - b.values[name]) > TIE * np.minimum(a.bounds[name], b.bounds[name])
        if np.any(apart & ~(np.isnan(a.values[name]) & np.isnan(b.values[name]))):
            return False
    return True


def leading(matches: list[Match]) -> list[Match]:
    """The matches the diagnosis names: the best tight one and the tight ones that fit as well (worst ratio within
    RATIO_TIE) or predict the same on this example; where no tight model fits, every loose one that does (none is
    better evidence than another)."""
    if not matches:
        return []
    first = matches[0]
    if not first.tight:
        return list(matches)
    return [m for m in matches if m is first or (m.tight and (m.ratio <= first.ratio * (1 + RATIO_TIE)
                                                                or _same(first.prediction, m.prediction)))]


def sentence(claim: str, ratio: float, matches: list[Match], kernel: Kernel, unresolved: tuple[str, ...] = ()) -> str:
    """The terminal line: 'fails rms.forward (ratio 1.73); consistent with double_rounding: x_hat rounded to ...';
    ``unresolved``: the fitted mechanisms this evidence does not identify (:func:`unidentified`), said where no
    mechanism explains the failure."""
    head = f"fails {claim} (ratio {ratio:.3g})"
    if not matches:
        text = f"{head}; no mechanism of the library (proofs.mechanisms) explains it"
        return text + "".join(f"; {note}" for note in unresolved)
    top = leading(matches)
    text = f"{head}; consistent with " + " or ".join(f"{m.mechanism}: {m.text}" for m in top)
    if not top[0].tight:
        text += " (loose models only, tightest first: weak evidence)"
    elif len(top) > 1:
        text += " (as good a fit on this example)"
    rest = [m.mechanism for m in matches if m not in top]
    if rest:
        text += f"; also, more loosely, with {', '.join(rest)}"
    convention = top[0].mechanism if top[0].mechanism in CONVENTIONS else None
    if convention:
        text += (f". If this is the kernel's convention, declare it: Kernel({kernel.name!r}, {kernel.kind!r}, fn, "
                 f"conventions=({convention!r},))")
    return text


def of_forward(kernel: Kernel, x, weight, bias, eps: float, got: torch.Tensor):
    """The ``diagnose`` of a failed forward check (properties.outcome.conclude): on the reported example only."""

    def diagnose(ratio: float) -> tuple[list[dict], str] | None:
        if not final_example() or parameters_in_another_dtype(x, weight):
            return None
        if x.numel() > DIAGNOSED_ELEMENTS:
            return too_large(x)
        case, values = case_of(kernel, x, weight, bias, eps), {"y": norms.as_float64(got)}
        matches = explaining(kernel, case, values, "forward", probes(kernel, x, weight, bias, eps))
        unresolved = () if matches else tuple(unidentified(kernel, case, values, "forward"))
        return reported(f"{kernel.prefix}.forward", ratio, matches, kernel, unresolved)

    return diagnose


def of_backward(kernel: Kernel, claim: str, x, weight, eps: float, dy, got: dict[str, torch.Tensor]):
    """The ``diagnose`` of a failed gradient check (``claim``: "jacobian" or "gradient_identities")."""

    def diagnose(ratio: float) -> tuple[list[dict], str] | None:
        if not final_example() or parameters_in_another_dtype(x, weight):
            return None
        if x.numel() > DIAGNOSED_ELEMENTS:
            return too_large(x)
        values = {name: norms.as_float64(g) for name, g in got.items()}
        case = case_of(kernel, x, weight, None, eps, dy)
        matches = explaining(kernel, case, values, "backward", probes(kernel, x, weight, None, eps, dy))
        unresolved = () if matches else tuple(unidentified(kernel, case, values, "backward"))
        return reported(f"{kernel.prefix}.{claim}", ratio, matches, kernel, unresolved)

    return diagnose


def too_large(x: torch.Tensor) -> tuple[list[dict], str]:
    """The diagnosis of a failed example of more than DIAGNOSED_ELEMENTS elements: none, saying why."""
    return [], (f"not diagnosed: the example has {x.numel()} elements, more than the {DIAGNOSED_ELEMENTS} the "
                "diagnosis evaluates every mechanism's model on (with its probes); its failures on smaller examples "
                "are diagnosed")


def parameters_in_another_dtype(x: torch.Tensor, weight) -> bool:
    """Whether the example's weight is in another dtype than x. Such failures get no diagnosis: the mechanisms are
    modelled with parameters in x's dtype, and with a float32 weight and 16-bit x the 16-bit roundings of a kernel's
    statistics and those of a double rounding look alike (the corpus's one-pass variance was named double_rounding)."""
    return weight is not None and weight.dtype != x.dtype


def reported(claim: str, ratio: float, matches: list[Match], kernel: Kernel,
             unresolved: tuple[str, ...] = ()) -> tuple[list[dict], str]:
    """(the diagnosis as the evidence records it, the sentence)."""
    top = leading(matches)
    return [m.as_json(m in top) for m in matches], sentence(claim, ratio, matches, kernel, unresolved)


def final_example() -> bool:
    """Whether this is the example Hypothesis reports (its final run), or a check outside Hypothesis (replay)."""
    with contextlib.suppress(Exception):
        from hypothesis.control import current_build_context

        return bool(current_build_context().is_final)
    return True


def _named(claim: str, ratio: float, named: list) -> tuple[list[dict], str] | None:
    """(the diagnosis as the evidence records it, the sentence) of mechanisms named by a fit (proofs.mechanisms
    .running), or None when none is."""
    if not named:
        return None
    text = f"fails {claim} (ratio {ratio:.3g}); consistent with " + " and ".join(
        f"{n.mechanism}: {n.text}" for n in named)
    return [{"mechanism": n.mechanism, "ratio": None, "text": n.text, "leading": True} for n in named], text


def of_running_statistics(kernel: Kernel, x: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor,
                          momentum: float, eps: float, new_mean: torch.Tensor, new_var: torch.Tensor):
    """The ``diagnose`` of a failed bn.running_statistics check: the momentum the means show and the variance's
    factor fitted from the buffers (proofs.mechanisms.running), within the derived bounds of the update
    (tolerance.running_statistics), and named: Keras' convention, two updates, none, another momentum; a biased
    variance, another factor. BatchNorm kernels only (InstanceNorm's update averages over the samples)."""

    def diagnose(ratio: float) -> tuple[list[dict], str] | None:
        if not final_example() or not kernel.record.batch_statistics:
            return None
        from proofs.mechanisms import fitting, running
        from properties.bounds import tolerance

        rows = norms.grouped(kernel, norms.as_float64(x), None)[0]  # [C, n]: each channel's elements
        bound_mean, bound_var = tolerance.running_statistics(kernel, x, running_mean, running_var, momentum, eps)
        expected = float(momentum) if kernel.momentum_convention == "torch" else 1.0 - float(momentum)
        old_mean, old_var = norms.as_float64(running_mean), norms.as_float64(running_var)
        fit = fitting.fit_momentum(old_mean, norms.as_float64(new_mean), rows.mean(-1), bound_mean, declared=expected)
        named = running.momentum_mechanisms(fit, expected)
        applied = fit.value if fit.value is not None else expected
        factor = running.fit_variance_factor(old_var, norms.as_float64(new_var), rows.var(-1), applied, bound_var)
        named += running.variance_mechanisms(factor, rows.shape[-1], kernel.running_variance == "unbiased")
        return _named(f"{kernel.prefix}.running_statistics", ratio, named)

    return diagnose


def of_eval(kernel: Kernel, x: torch.Tensor, weight, bias, eps: float, got: torch.Tensor):
    """The ``diagnose`` of a failed eval-mode check: eval_batch_statistics where the output is the training-mode
    output (the batch's statistics, within the forward bound) instead of the running statistics' affine map."""

    def diagnose(ratio: float) -> tuple[list[dict], str] | None:
        if not final_example():
            return None
        from proofs.mechanisms.running import Named
        from properties.bounds import tolerance

        training = outcome.compare(got, norms.reference(kernel, x, weight, bias, eps),
                                   tolerance.forward(kernel, x, weight, bias, eps), "y")
        if training.ratio > 1.0:
            return None
        named = [Named("eval_batch_statistics", f"eval mode normalizes with the batch's statistics (y is the "
                                                f"training-mode output within its bound, ratio {training.ratio:.3g})")]
        return _named(f"{kernel.prefix}.eval", ratio, named)

    return diagnose
