"""Checks run with the kernel in torch's default modes, or under another default dtype.

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

import torch

from core import guard


def also_in_default_modes(check: Callable[..., None]) -> Callable[..., None]:
    """``check`` taking two more keywords: ``default_modes`` True runs it with every kernel call in torch's default
    modes (no deterministic-algorithms mode, uninitialized memory not filled); ``default_dtype`` (a torch dtype)
    with torch's default dtype set to it around every kernel call (core.guard.default_dtype: a kernel allocating its
    accumulators or output with the default dtype, transformers#29496). The example records both, so a
    counterexample replays in the state it failed in."""

    @functools.wraps(check)
    def run(kernel, *args, default_modes: bool = False, default_dtype: torch.dtype | None = None, **kwargs) -> None:
        with guard.as_by_default() if default_modes else nullcontext(), \
                guard.default_dtype(default_dtype) if default_dtype is not None else nullcontext():
            check(kernel, *args, **kwargs)

    return run
