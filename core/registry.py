"""How a SPEC string names kernels under test.

The kernel record and its contracts are :mod:`core.kernel`; here a SPEC string becomes records.

SPEC forms accepted by :func:`resolve`:

    NAME               a built-in (``normverify list``), e.g. ``torch`` or ``triton``
    MODULE:ATTR        an importable module's attribute
    PATH.py:ATTR       an attribute of a Python file

ATTR is a function (its kind given by ``--kind``, a ``normverify_kind`` attribute, or its
parameter names), a :class:`Kernel`, or a list of them. Built-ins come from the modules of
:mod:`core.adapters` (listed there), each of which exports ``BUILTINS: list[Builtin]``.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable

from core import adapters, kinds
from core.errors import UsageError
from core.kernel import BACKWARD_PRECISIONS, KINDS, Builtin, Kernel
from core.loading import load_attribute, load_module

__all__ = ["BACKWARD_PRECISIONS", "KINDS", "Builtin", "Kernel", "builtins", "infer_kind", "resolve"]


@functools.cache
def _builtin_table() -> dict[str, Builtin]:
    found: dict[str, Builtin] = {}
    for name in adapters.MODULES:
        module = importlib.import_module(f"{adapters.__name__}.{name}")
        for builtin in module.BUILTINS:
            found[builtin.name] = builtin
    return found


def builtins() -> dict[str, Builtin]:
    """All built-in SPECs, from the adapter modules :data:`core.adapters.MODULES` names (imported once)."""
    return dict(_builtin_table())


def resolve(spec: str, kind: str | None = None) -> list[Kernel]:
    """The kernels SPEC names, restricted to ``kind`` when given. Raises UsageError with one clear line."""
    if kind is not None and kind not in KINDS:
        raise UsageError(f"--kind must be one of {', '.join(KINDS)}, not {kind!r}")
    table = builtins()
    if spec in table:
        builtin = table[spec]
        reason = builtin.unavailable()
        if reason:
            raise UsageError(f"kernel {spec!r} is not available here: {reason}")
        kernels = builtin.load()
    elif ":" in spec:
        target, _, attr = spec.rpartition(":")
        obj = load_attribute(load_module(target, spec), attr, spec)
        kernels = _as_kernels(obj, spec, kind)
        for kernel in kernels:
            check_signature(kernel, spec)
    else:
        raise UsageError(f"unknown kernel {spec!r}: use a built-in ({', '.join(sorted(table))}), "
                         "MODULE:ATTR or PATH.py:ATTR")
    if kind is not None:
        kernels = [k for k in kernels if k.kind == kind]
    if not kernels:
        raise UsageError(f"kernel {spec!r} provides no {kind or 'kernel'}")
    return [_on_its_device(k) for k in kernels]


def _on_its_device(kernel: Kernel) -> Kernel:
    """A kernel with declarations for CUDA (Kernel.on_cuda), as it runs on the device the suite gives it."""
    if not kernel.on_cuda:
        return kernel
    from core.capabilities import device_of

    return kernel.for_device(device_of(kernel))


def _as_kernels(obj, spec: str, kind: str | None) -> list[Kernel]:
    if isinstance(obj, Kernel):
        return [obj]
    if isinstance(obj, (list, tuple)) and obj and all(isinstance(k, Kernel) for k in obj):
        return list(obj)
    import torch

    if inspect.isclass(obj) and issubclass(obj, torch.nn.Module):
        from core.adapters.modules import kernel_from_module_class

        return [kernel_from_module_class(obj, spec, kind)]
    if callable(obj):
        kind = kind or getattr(obj, "normverify_kind", None) or infer_kind(obj)
        if kind is None:
            raise UsageError(f"kernel {spec!r}: cannot tell whether it is a layernorm, rmsnorm or dropout; "
                             "pass --kind")
        return [Kernel(name=spec, kind=kind, fn=obj, spec=spec)]
    raise UsageError(f"kernel {spec!r}: {type(obj).__name__} is not a function, nn.Module class or Kernel")


def check_signature(kernel: Kernel, spec: str) -> None:
    """A UsageError (one line) when the kernel's function cannot take its kind's positional arguments
    (``core.capabilities.probe_arguments``: the contract of the kind); silent when Python cannot tell."""
    import torch

    from core.capabilities import probe_arguments

    try:
        signature = inspect.signature(kernel.fn)
    except (TypeError, ValueError):
        return
    arguments = probe_arguments(kernel, torch.zeros(2, 8, device="meta"))  # only bound to the signature, never run
    try:
        signature.bind(*arguments)
    except TypeError as error:
        raise UsageError(f"kernel {spec!r}: {getattr(kernel.fn, '__name__', 'its function')}{signature} does not fit "
                         f"the {kernel.kind} contract, {len(arguments)} positional arguments ({error})") from None


def infer_kind(fn: Callable) -> str | None:
    """Kind from the parameter names (core.kinds.infer): the kind record whose signature they fit."""
    return kinds.infer(fn)
