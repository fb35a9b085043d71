"""core.results: the one schema of results documents, its JSON Schema file, and the plot series claims declare.

A real run's output is validated against both in tests/test_runner_results.py (the plugin's own suite run).
"""

from __future__ import annotations

import fnmatch
import json

import pytest
import torch

from core.kernel import Kernel
from core.registry import resolve
from core.results import PLOT_SERIES, SCHEMA_FILE, Capabilities, KernelEntry, Result, json_schema, series_of
from proofs.claims import CLAIMS
from properties import evidence
from properties.checks import forward, mean_stability, spectral_norm
from verify.report.plots import PLOTS


def test_the_schema_file_is_generated_from_the_models():
    assert SCHEMA_FILE.read_text(encoding="utf-8") == json_schema(), (
        "core/results.schema.json is stale: regenerate it with `python -m core.results`")


def test_statuses_are_defined_once_and_the_schema_file_lists_them():
    from core import results

    status = json.loads(SCHEMA_FILE.read_text())["$defs"]["Result"]["properties"]["status"]
    assert tuple(status["enum"]) == results.STATUSES
    assert {"failed", "error", "unchecked"} == results.NOT_PASSING
    with pytest.raises(ValueError):
        Result(claim="ln.forward", status="fine")


@pytest.mark.parametrize("spec", ["torch", "triton"])
def test_every_built_in_kernel_entry_fits_the_schema(spec):
    for kernel in resolve(spec):
        KernelEntry.model_validate({**kernel.as_json(), "capabilities": None})


def test_capabilities_fit_the_schema():
    from core.capabilities import discover

    (kernel,) = resolve("torch", "layernorm")
    assert Capabilities.model_validate(discover(kernel).as_json()).dtypes


def test_every_plot_series_is_declared_by_existing_claims_and_drawn_by_the_report():
    for series in PLOT_SERIES:
        assert all(any(fnmatch.fnmatchcase(claim, glob) for claim in CLAIMS) for glob in series.claims), series
    assert [plot.series for plot in PLOTS] == list(PLOT_SERIES)
    assert [s.name for s in series_of("rms.spectral_norm")] == ["spectral"]
    assert series_of("ln.jacobian") == []


def test_a_point_with_a_renamed_key_is_refused():
    series = next(s for s in PLOT_SERIES if s.name == "spectral")
    with pytest.raises(ValueError, match="sigma2"):
        series.point(sigma_squared=1.0, eps=1e-5, measured=1.0, derived=1.0, bound=316.0)


def _points(check, kernel: Kernel, example: dict) -> list[dict]:
    evidence.start()
    evidence.check(check, kernel, example)
    return evidence.take()


@pytest.mark.parametrize(("claim", "check", "example"), [
    ("ln.forward", forward.check_forward, lambda x: {"x": x, "weight": None, "eps": 1e-5}),
    ("ln.spectral_norm", spectral_norm.check_spectral_norm, lambda x: {"x": x[:1], "weight": None, "eps": 1e-5}),
    ("ln.shift_invariance", mean_stability.check_shift_invariance,
     lambda x: {"x": x, "shifted": x + 3.0, "weight": None, "eps": 1e-5}),
])
def test_the_checks_of_a_claim_record_the_keys_of_its_plot_series(claim, check, example):
    (kernel,) = resolve("torch", "layernorm")
    x = torch.linspace(-2.0, 3.0, 16, dtype=torch.float32).reshape(2, 8)
    points = _points(check, kernel, example(x))
    for series in series_of(claim):
        assert series.of(points) == points, f"{claim}: its points lack the keys of the {series.name!r} series"
