"""Checks run with the kernel in torch's default modes.

Every kernel call is made with torch's uninitialized allocations filled with NaN (core.guard.poisoned_allocations),
which needs torch's deterministic-algorithms mode. A kernel that picks another path there (atomics unless
``torch.are_deterministic_algorithms_enabled()``, as Liger-Kernel's and TransformerEngine's backwards do) is then
never checked on the path a user's program takes: the forward and gradient claims also check it with the call in
torch's default modes (core.guard.as_by_default).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import nullcontext

from core import guard


def also_in_default_modes(check: Callable[..., None]) -> Callable[..., None]:
    """``check`` taking one more keyword, ``default_modes``: True runs it with every kernel call in torch's default
    modes (no deterministic-algorithms mode, uninitialized memory not filled). The example records it, so a
    counterexample replays in the modes it failed in."""

    @functools.wraps(check)
    def run(kernel, *args, default_modes: bool = False, **kwargs) -> None:
        with guard.as_by_default() if default_modes else nullcontext():
            check(kernel, *args, **kwargs)

    return run
