"""Mechanisms with a fitted parameter (proofs.mechanisms.fitting, issue 28): a kernel that hard-codes an eps no list
of library defaults holds is diagnosed as fixed_eps with the value fitted from the evidence, forward and backward;
a correct kernel's output identifies no fixed eps; evidence that cannot identify the value says so; and the
momentum fit the BatchNorm mechanisms will use recovers torch's and Keras' conventions.

Stated accuracy: on float32 rows of variance 1e-2 (eps* = 3e-4 moves y by ~1.5 % relative, resolved to ~1e-5 of
it per element) the fitted eps is within RELATIVE_ACCURACY of the constant, and the range the diagnosis reports
contains it.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from core.kernel import Kernel
from core.registry import resolve
from proofs.mechanisms import MECHANISMS, Case, Mechanism, fitting
from proofs.mechanisms.base import Fit, Parameter
from properties import evidence
from properties.bounds import diagnosis, models
from properties.checks.forward import check_forward
from properties.checks.gradients import check_vjp

RELATIVE_ACCURACY = 0.01
D = 48
FITTED = re.compile(r"eps ≈ (\S+) used instead of (\S+), fitted: (\S+) to (\S+) fit")


def _rows(n: int, std: float, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (0.3 + std * torch.randn(n, D, generator=generator, dtype=torch.float64)).float()


def _parameters(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return ((1 + 0.5 * torch.randn(D, generator=generator, dtype=torch.float64)).float(),
            (0.5 * torch.randn(D, generator=generator, dtype=torch.float64)).float())


def corpus_kernel(attr: str) -> Kernel:
    (kernel,) = resolve(f"tests/corpus/statistics.py:{attr}")
    return kernel


def _failure(check, kernel: Kernel, **example) -> tuple[str, list[dict]]:
    """(the failure's first line, its diagnosis JSON) of a check that must fail."""
    evidence.start()
    with pytest.raises(AssertionError) as failure:
        check(kernel, **example)
    (point,) = evidence.take()
    return str(failure.value).splitlines()[0], point.get("diagnosis") or []


def _fitted(found: list[dict]) -> tuple[float, float, float]:
    """(value, low, high) of the leading fixed_eps diagnosis."""
    (text,) = [m["text"] for m in found if m["mechanism"] == "fixed_eps" and m["leading"]]
    value, _, low, high = FITTED.search(text).groups()
    return float(value), float(low), float(high)


def _example(kind: str, seed: int = 0) -> dict:
    weight, bias = _parameters()
    example = {"x": _rows(4, std=0.1, seed=seed), "weight": weight, "eps": 1e-2}
    return {**example, "bias": bias} if kind == "ln" else example


CONSTANTS = [("LN_EPS_UNUSUAL_CONSTANT", "ln", 3e-4), ("RMS_EPS_UNUSUAL_CONSTANT", "rms", 2.5e-3),
             ("LN_EPS_IGNORED", "ln", 1e-5), ("RMS_EPS_IGNORED", "rms", 1e-6)]


@pytest.mark.parametrize(("attr", "kind", "constant"), CONSTANTS, ids=[c[0] for c in CONSTANTS])
def test_a_hard_coded_eps_is_diagnosed_with_its_fitted_value(attr, kind, constant):
    first, found = _failure(check_forward, corpus_kernel(attr), **_example(kind))
    assert "consistent with fixed_eps: the eps argument ignored (eps ≈" in first, first
    value, low, high = _fitted(found)
    assert abs(value - constant) <= RELATIVE_ACCURACY * constant and low <= constant <= high, (value, low, high)


@pytest.mark.parametrize(("attr", "kind", "constant"), CONSTANTS[:2], ids=[c[0] for c in CONSTANTS[:2]])
def test_the_backward_of_a_hard_coded_eps_is_diagnosed_with_its_fitted_value(attr, kind, constant):
    example = _example(kind)
    example.pop("bias", None)
    dy = _rows(4, std=1.0, seed=7)
    first, found = _failure(check_vjp, corpus_kernel(attr), **example, dy=dy)
    assert f"fails {kind}.jacobian" in first and "consistent with fixed_eps" in first, first
    value, low, high = _fitted(found)
    assert abs(value - constant) <= RELATIVE_ACCURACY * constant and low <= constant <= high, (value, low, high)


def test_no_eps_at_all_is_fitted_as_zero_at_most_the_resolution():
    first, found = _failure(check_forward, corpus_kernel("LN_NO_EPS"), **_example("ln"))
    assert "consistent with fixed_eps" in first, first
    (text,) = [m["text"] for m in found if m["mechanism"] == "fixed_eps"]
    assert re.search(r"eps ≈ 0 used instead of 0.01, fitted: at most \S+$", text[:-1]), text


@pytest.mark.parametrize("kind", ["ln", "rms"])
def test_a_correct_kernel_identifies_no_fixed_eps(kind):
    """The textbook kernel passes; its output fitted as fixed_eps resolves the argument itself: ruled out."""
    textbook = corpus_kernel("LN_TEXTBOOK" if kind == "ln" else "RMS_TEXTBOOK")
    example = _example(kind)
    evidence.start()
    check_forward(textbook, **example)
    x, weight, bias, eps = example["x"], example["weight"], example.get("bias"), example["eps"]
    case = models.case_of(textbook, x, weight, bias, eps)
    got = {"y": textbook.fn(*([x, weight, bias, eps] if kind == "ln" else [x, weight, eps])).double().numpy()}
    fit = MECHANISMS["fixed_eps"].parameter.fit(case, "forward", got)
    assert fit.value is None and fit.low <= eps <= fit.high
    assert fit.detail.startswith("the argument 0.01 fits")
    assert "fixed_eps" not in {m.mechanism for m in diagnosis.explaining(textbook, case, got, "forward")}


def _constant_rows_wrong(x, weight, bias, eps):
    """Textbook LayerNorm, but a constant row normalizes to 1 instead of 0 (output weight + bias)."""
    y = corpus_kernel("LN_TEXTBOOK").fn(x, weight, bias, eps)
    constant = (x == x[..., :1]).all(-1, keepdim=True)
    return torch.where(constant, weight + bias, y)


def test_evidence_that_cannot_identify_eps_says_so_instead_of_naming_a_value():
    """On constant rows y = beta for every eps: the failure is no eps's, and the sentence says eps is not
    identifiable there rather than fitting one."""
    weight, bias = _parameters()
    kernel = Kernel("constant_rows_wrong", "layernorm", _constant_rows_wrong)
    first, found = _failure(check_forward, kernel, x=torch.full((2, D), 3.0), weight=weight, bias=bias, eps=1e-5)
    assert "no mechanism of the library (proofs.mechanisms) explains it" in first
    assert "fixed_eps: not identifiable from this evidence: no output depends on eps" in first
    assert found == []


def test_eps_negligible_against_the_variance_is_not_identifiable():
    """On float32 rows of sigma^2 ~ 1 the elements resolve eps to ~1e-5: a kernel using 1e-9 and the argument 1e-6
    (y apart by 5e-7 relative, within the bound) fit alike, so the fit names no value."""
    x = _rows(4, std=1.0).double().numpy()
    case = Case("ln", x, None, None, 1e-6, "float32", "float32")
    got = {"y": MECHANISMS["fixed_eps"].parameter.models["forward"](case, Fit(1e-9)).values["y"]}
    got["y"] = got["y"].astype(np.float32).astype(np.float64)
    fit = MECHANISMS["fixed_eps"].parameter.fit(case, "forward", got)
    assert not fit.identifiable and "not identifiable from this evidence" in fit.detail


def test_a_declarable_convention_cannot_have_a_fitted_parameter():
    parameter = Parameter("c", {}, {})
    with pytest.raises(ValueError, match="cannot have a fitted parameter"):
        Mechanism("m", "t", frozenset({"ln"}), lambda: None, convention=True, parameter=parameter)


# --- the momentum fit (BatchNorm's running statistics) ---------------------------------------------------------

CHANNELS = 16


def _running(seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    generator = np.random.default_rng(seed)
    return generator.standard_normal(CHANNELS), 2 + generator.standard_normal(CHANNELS)


def _float32(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float32).astype(np.float64)


@pytest.mark.parametrize(("convention", "applied", "declared"), [("torch", 0.1, None), ("keras", 0.9, 0.1)])
def test_the_momentum_fit_recovers_the_momentum_applied(convention, applied, declared):
    """torch: new = (1 - m) old + m batch; Keras: new = m old + (1 - m) batch, i.e. m* = 1 - m (identified against
    the declared torch momentum 0.1)."""
    old, batch = (_float32(a) for a in _running())
    m = np.float32(0.1)
    keep = m if convention == "keras" else 1 - m
    new = (keep * old.astype(np.float32) + (1 - keep) * batch.astype(np.float32)).astype(np.float64)
    fit = fitting.fit_momentum(old, new, batch, declared=declared)
    assert fit.identifiable and abs(fit.value - applied) <= 1e-5 and fit.low <= applied <= fit.high
    assert fit.detail.startswith("momentum ≈ ")


def test_the_momentum_is_not_identifiable_where_the_statistics_do_not_move():
    old, _ = _running()
    fit = fitting.fit_momentum(old, old, old)
    assert not fit.identifiable and "not identifiable from this evidence" in fit.detail


def test_the_declared_momentum_applied_is_not_identified_as_a_wrong_one():
    old, batch = (_float32(a) for a in _running())
    new = _float32(0.9 * old + 0.1 * batch)
    fit = fitting.fit_momentum(old, new, batch, declared=0.1)
    assert fit.value is None and fit.detail.startswith("the argument 0.1 fits")
