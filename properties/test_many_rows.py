"""More rows than a CUDA grid dimension holds (65 535): a kernel launching one program per row along grid axis
1 or 2, or indexing rows with a 16-bit counter, is wrong beyond it. Checked once per run, forward (ln.forward /
rms.forward) and backward (ln.jacobian / rms.jacobian: dgamma and dbeta sum over every row), at a small width.

A kernel too slow for that many rows here (Triton's CPU interpreter runs its programs one by one) is skipped
with the measured reason: its time per row (from calls on ``PROBE_ROWS`` and 4 ``PROBE_ROWS`` rows), scaled to
``ROWS``, above ``BUDGET_S``.
"""

from __future__ import annotations

import time

import pytest
import torch

from core.capabilities import discover
from properties import evidence, norms
from properties.checks.forward import check_forward
from properties.checks.gradients import check_vjp
from properties.strategies import rounded, standard_values

ROWS = 65_537
WIDTH = 8
PROBE_ROWS = 8
BUDGET_S = 60.0


def many_rows_example(kernel, upstream: bool) -> dict:
    """ROWS x WIDTH rows (seeded) in float32 (else the kernel's first dtype), a random weight (and bias), eps 1e-5;
    dy with ``upstream``."""
    caps = discover(kernel)
    dtype = torch.float32 if torch.float32 in caps.dtypes or not caps.dtypes else caps.dtypes[0]

    def values(shape: tuple[int, ...], seed: int, offset: float = 0.0) -> torch.Tensor:
        return rounded(offset + standard_values(shape, "normal", seed), dtype, caps.device)

    example = {"x": values((ROWS, WIDTH), 65535), "weight": values((WIDTH,), 1, offset=1.0), "eps": 1e-5}
    if kernel.kind == "layernorm":
        example["bias"] = values((WIDTH,), 2)
    if upstream:
        example["dy"] = values((ROWS, WIDTH), 3)
    return example


def skip_when_too_slow(kernel, example: dict, upstream: bool) -> None:
    """Skip, with the measured times, when ROWS rows would take more than BUDGET_S seconds: one call on one row first
    (compilation, caches), then PROBE_ROWS rows timed; when that time scaled to ROWS is above the budget, the
    quickest of two calls on PROBE_ROWS and on 4 PROBE_ROWS rows give the time per row (their difference over
    3 PROBE_ROWS rows: a call's fixed cost cancels), the estimate the smaller call's time plus the other rows'."""

    def run(rows: int) -> float:
        probe = {name: (t[:rows] if name in ("x", "dy") else t) for name, t in example.items()}
        start = time.perf_counter()
        if upstream:
            norms.vjp(kernel, probe["x"], probe["weight"], probe.get("bias"), probe["eps"], probe["dy"],
                      allow_nonfinite=True)
        else:
            norms.forward(kernel, probe["x"], probe["weight"], probe.get("bias"), probe["eps"], allow_nonfinite=True)
        return time.perf_counter() - start

    run(1)
    small = run(PROBE_ROWS)
    if small * ROWS / PROBE_ROWS <= BUDGET_S:  # even a call's fixed cost counted per row fits
        return
    small, large = min(small, run(PROBE_ROWS)), min(run(4 * PROBE_ROWS) for _ in range(2))  # the quietest of each
    per_row = max(large - small, 0.0) / (3 * PROBE_ROWS)
    estimate = small + per_row * (ROWS - PROBE_ROWS)
    if estimate > BUDGET_S:
        pytest.skip(f"{kernel.name}: {PROBE_ROWS} rows took {small:.2f} s, {4 * PROBE_ROWS} rows {large:.2f} s, so "
                    f"{ROWS} rows would take ~{estimate:.0f} s (> {BUDGET_S:.0f} s; an interpreted kernel?): checked "
                    "where it runs natively")


@pytest.mark.claim("ln.forward", "rms.forward")
def test_forward_beyond_65535_rows(norm_kernel):
    example = many_rows_example(norm_kernel, upstream=False)
    skip_when_too_slow(norm_kernel, example, upstream=False)
    evidence.check(check_forward, norm_kernel, example)


@pytest.mark.claim("ln.jacobian", "rms.jacobian")
def test_gradients_beyond_65535_rows(norm_kernel):
    norms.require_backward(norm_kernel)
    example = many_rows_example(norm_kernel, upstream=True)
    skip_when_too_slow(norm_kernel, example, upstream=True)
    evidence.check(check_vjp, norm_kernel, example)
