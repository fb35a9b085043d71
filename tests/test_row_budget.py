"""The time budget of the checks beyond 65 535 rows (properties/test_many_rows.too_slow_reason): a kernel that runs
natively is never skipped for a scheduler's pause of a few milliseconds (the probes' time on a loaded machine, where
two tests and a corpus run share two cores); an interpreted one, a few milliseconds a row, is skipped with an
estimate close to its real time."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from properties.test_many_rows import BUDGET_S, PAUSE_S, ROWS, too_slow_reason


def timed(fixed: float, per_row: float, pauses=()):
    """A call's time on ``rows`` rows: a fixed cost, a cost per row, and the next pause of ``pauses`` (then none)."""
    pauses = itertools.chain(pauses, itertools.repeat(0.0))
    calls = []

    def took(rows: int) -> float:
        calls.append(rows)
        return fixed + per_row * rows + next(pauses)

    took.calls = calls
    return took


def test_the_pauses_that_once_skipped_a_native_kernel_do_not():
    """A loaded CI machine timed a torch GroupNorm at 4 ms on 8 samples and 11 ms on 32: a difference of 24 rows,
    scaled to 65 537, estimated 20 s, and the check beyond the grid did not run."""
    took = timed(0.0, 1e-7, pauses=[0.004, 0.004, 0.0114, 0.0114, 0.0114, 0.0114])
    assert too_slow_reason("k", took) is None


@given(fixed=st.floats(0.0, 1.0), per_row=st.floats(0.0, 5e-3),
       pauses=st.lists(st.floats(0.0, PAUSE_S), min_size=8, max_size=8))
def test_a_kernel_is_skipped_only_when_its_rows_would_take_longer_than_the_budget(fixed, per_row, pauses):
    """Whatever pauses up to PAUSE_S delay the probes: skipped, the rows take longer than BUDGET_S (less at most the
    pause of a last call on every row); not skipped, they fit."""
    took = timed(fixed, per_row, pauses)
    real = fixed + per_row * ROWS
    if too_slow_reason("k", took):
        assert real > BUDGET_S - PAUSE_S, took.calls
    else:
        assert real <= BUDGET_S, took.calls


@given(fixed=st.floats(0.0, 0.01), per_row=st.floats(0.0, 1e-5),
       pauses=st.lists(st.floats(0.0, PAUSE_S), min_size=8, max_size=8))
def test_a_native_kernel_is_never_skipped(fixed, per_row, pauses):
    assert too_slow_reason("k", timed(fixed, per_row, pauses)) is None


@given(per_row=st.floats(2 * BUDGET_S / ROWS, 5e-3), pauses=st.lists(st.floats(0.0, PAUSE_S), min_size=8, max_size=8))
def test_an_interpreted_kernel_is_skipped_for_a_fraction_of_its_time(per_row, pauses):
    took = timed(0.01, per_row, pauses)
    reason = too_slow_reason("k", took)
    assert reason and reason.startswith("k: ") and "an interpreted kernel?" in reason
    assert sum(took.calls) < ROWS / 16, took.calls


def test_a_fixed_cost_is_told_from_a_cost_per_row():
    """Half a second a call: 0.25 ms a row fits the budget (16.9 s in all), 0.4 ms a row does not (26.7 s)."""
    assert too_slow_reason("k", timed(0.5, 0.00025)) is None
    reason = too_slow_reason("k", timed(0.5, 0.0004))
    assert reason and f"> {BUDGET_S:.0f} s" in reason


def test_a_large_fixed_cost_alone_ends_at_a_call_that_fits():
    took = timed(1.0, 1e-6)
    assert too_slow_reason("k", took) is None and max(took.calls) < ROWS
