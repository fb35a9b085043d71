"""Calling a kernel under test without letting it take the run down.

Every call of a kernel under test goes through :func:`call`. A kernel that raises, exceeds the
time limit, or returns something unusable (not a tensor, wrong shape, dtype or device, NaN/inf
for finite inputs) raises :class:`KernelFault` with one line that says which and how; the test
reports that claim as error/failed and the run goes on.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import torch

DEFAULT_TIMEOUT_S = float(os.environ.get("NORMVERIFY_CALL_TIMEOUT", "120"))


class KernelFault(Exception):
    """The kernel under test misbehaved. ``reason``: raised | timeout | type | shape | dtype | device | nonfinite."""

    def __init__(self, kernel: str, reason: str, detail: str) -> None:
        super().__init__(f"kernel {kernel} {detail}")
        self.kernel = kernel
        self.reason = reason


def _run_with_timeout(fn: Callable, args: tuple, kwargs: dict, timeout: float | None, name: str):
    if timeout is None:
        return fn(*args, **kwargs)
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as error:  # reported below, in the caller's thread
            box["error"] = error

    worker = threading.Thread(target=target, name=f"normverify-call-{name}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise KernelFault(name, "timeout", f"did not return within {timeout:g} s (hung?)")
    if "error" in box:
        raise box["error"]
    return box["value"]


def call(kernel, *args, like: torch.Tensor | None = None, allow_nonfinite: bool = False,
         timeout: float | None = DEFAULT_TIMEOUT_S, **kwargs) -> torch.Tensor:
    """``kernel.fn(*args, **kwargs)``, checked against ``like`` (whose shape, dtype and device the output must have).

    Non-finite outputs are a fault only when every tensor argument is finite and ``allow_nonfinite`` is false.
    """
    name = getattr(kernel, "name", repr(kernel))
    fn = getattr(kernel, "fn", kernel)
    try:
        out = _run_with_timeout(fn, args, kwargs, timeout, name)
    except KernelFault:
        raise
    except Exception as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise KernelFault(name, "raised", f"raised {type(error).__name__}: {message}") from error
    if not isinstance(out, torch.Tensor):
        raise KernelFault(name, "type", f"returned {type(out).__name__}, not a tensor")
    if like is not None:
        if out.shape != like.shape:
            raise KernelFault(name, "shape", f"returned shape {tuple(out.shape)} for input shape {tuple(like.shape)}")
        if out.dtype != like.dtype:
            raise KernelFault(name, "dtype", f"returned {out.dtype} for {like.dtype} input")
        if out.device != like.device:
            raise KernelFault(name, "device", f"returned a tensor on {out.device} for input on {like.device}")
    if not allow_nonfinite and out.is_floating_point() and not bool(torch.isfinite(out).all()):
        inputs_finite = all(bool(torch.isfinite(a).all()) for a in args
                            if isinstance(a, torch.Tensor) and a.is_floating_point())
        if inputs_finite:
            bad = int((~torch.isfinite(out)).sum())
            raise KernelFault(name, "nonfinite", f"returned {bad} NaN/inf values for finite inputs")
    return out
