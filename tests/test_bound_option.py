"""--bound: the tolerances' model is chosen per run (pytest --bound, normverify run --bound), the probabilistic
bound is never looser than the worst case it refines, and an unknown name is a clear error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from proofs import error_model, simulate
from properties.bounds import tolerance
from verify import runner

U32 = error_model.unit_roundoff("float32")


def test_the_run_passes_the_bound_to_the_suite():
    request = runner.RunRequest(specs=["torch"], json_path=Path("/tmp/results.json"), bound="worst-case")
    command = runner.pytest_command(request)
    assert command[command.index("--bound") + 1] == "worst-case"
    assert "--bound" not in runner.pytest_command(runner.RunRequest(specs=["torch"], json_path=Path("/tmp/r.json")))


def test_use_bound_selects_the_model_and_rejects_unknown_names():
    assert tolerance.bound_in_use() == error_model.DEFAULT_BOUND == "probabilistic"
    try:
        tolerance.use_bound("worst-case")
        assert tolerance.bound_in_use() == "worst-case"
    finally:
        tolerance.use_bound(error_model.DEFAULT_BOUND)
    with pytest.raises(ValueError, match="unknown bound"):
        tolerance.use_bound("optimistic")
    with pytest.raises(ValueError, match="unknown bound"):
        error_model.forward_bound(np.ones((1, 4)), None, None, 1e-5, U32, U32, "ln", "optimistic")


@pytest.mark.parametrize("kind", ["ln", "rms"])
@pytest.mark.parametrize("width", [8, 1000, 8192])
def test_the_probabilistic_bound_is_never_looser_than_the_worst_case(kind, width):
    rng = np.random.default_rng(width)
    row = simulate.adversarial_rows(rng, 3, width, 10.0, np.float32)
    weight, upstream = rng.normal(size=width), rng.normal(size=row.shape)
    forward = {m: error_model.forward_bound(row, weight, None, 1e-5, U32, U32, kind, m) for m in error_model.BOUNDS}
    assert (forward["probabilistic"] <= forward["worst-case"]).all()
    backward = {m: error_model.backward_bound(row, weight, 1e-5, upstream, U32, U32, kind, m)
                for m in error_model.BOUNDS}
    for tighter, looser in zip(backward["probabilistic"], backward["worst-case"], strict=True):
        assert (tighter <= looser).all()
    identities = {m: error_model.identity_bounds(row, weight, 1e-5, upstream, U32, U32, kind, m)
                  for m in error_model.BOUNDS}
    for name in identities["worst-case"]:
        assert (identities["probabilistic"][name] <= identities["worst-case"][name]).all()
    if width >= 1000:
        assert (forward["probabilistic"] < forward["worst-case"] / 3).all()
