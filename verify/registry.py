"""Kernels under test: what they are, and how a SPEC string names them.

A kernel is a plain callable with one of three contracts, normalizing over the last dimension:

    layernorm: fn(x, weight, bias, eps) -> y      weight, bias: shape [d] or None
    rmsnorm:   fn(x, weight, eps) -> y            weight: shape [d] or None
    dropout:   fn(x, p, seed) -> y                inverted dropout, deterministic for a seed

Gradients are taken through autograd when the callable is differentiable.

SPEC forms accepted by :func:`resolve`:

    NAME               a built-in (``normverify list``), e.g. ``torch`` or ``triton``
    MODULE:ATTR        an importable module's attribute
    PATH.py:ATTR       an attribute of a Python file

ATTR is a function (its kind given by ``--kind``, a ``normverify_kind`` attribute, or its
parameter names), a :class:`Kernel`, or a list of them. Built-ins come from the modules of
:mod:`verify.adapters`, each of which exports ``BUILTINS: list[Builtin]``.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from verify.errors import UsageError

KINDS = ("layernorm", "rmsnorm", "dropout")
# Claim ids are prefixed by the kind's short name (proofs.claims).
KIND_PREFIX = {"layernorm": "ln", "rmsnorm": "rms", "dropout": "dropout"}
BACKWARD_PRECISIONS = ("float32", "storage")


@dataclass(frozen=True)
class Kernel:
    """One kernel under test.

    ``weight_offset`` declares the weight convention: the kernel scales by
    ``weight_offset + weight`` (0 for torch/Llama, 1 for Gemma's ``(1 + w)``), and is checked
    against the derivation with that effective weight. ``device``/``dtypes`` are declarations;
    ``None`` means "discover by probing" (:mod:`verify.capabilities`).

    ``backward_precision`` declares what the backward accumulates in for float16/bfloat16 data:
    ``"float32"`` (the default, what mixed-precision kernels do) or ``"storage"`` (statistics or
    partial sums kept in the storage dtype, as torch's CPU ``layer_norm`` keeps mean and rstd);
    the backward is then checked against the error model with u_acc = u_storage. The declaration
    is shown in every result and report, so a weaker contract is never silent.
    """

    name: str
    kind: str
    fn: Callable
    spec: str = ""
    weight_offset: float = 0.0
    device: str | None = None
    dtypes: tuple[torch.dtype, ...] | None = None
    description: str = ""
    backward_precision: str = "float32"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise UsageError(f"kernel {self.name!r}: kind must be one of {', '.join(KINDS)}, not {self.kind!r}")
        if self.backward_precision not in BACKWARD_PRECISIONS:
            raise UsageError(f"kernel {self.name!r}: backward_precision must be one of "
                             f"{', '.join(BACKWARD_PRECISIONS)}, not {self.backward_precision!r}")

    def as_json(self) -> dict:
        """The kernel's identity and declarations, as the results JSON records them."""
        return {"spec": self.spec, "name": self.name, "kind": self.kind, "weight_offset": self.weight_offset,
                "backward_precision": self.backward_precision, "description": self.description}

    @property
    def prefix(self) -> str:
        return KIND_PREFIX[self.kind]


@dataclass(frozen=True)
class Builtin:
    """A named SPEC shipped with normverify. ``unavailable()`` returns why it cannot run here, or None."""

    name: str
    description: str
    load: Callable[[], list[Kernel]]
    unavailable: Callable[[], str | None] = lambda: None


def builtins() -> dict[str, Builtin]:
    """All built-in SPECs, from every module of :mod:`verify.adapters`."""
    import verify.adapters

    found: dict[str, Builtin] = {}
    for info in pkgutil.iter_modules(verify.adapters.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"verify.adapters.{info.name}")
        for builtin in getattr(module, "BUILTINS", []):
            found[builtin.name] = builtin
    return found


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
        obj = _load_attribute(_load_module(target, spec), attr, spec)
        kernels = _as_kernels(obj, spec, kind)
    else:
        raise UsageError(f"unknown kernel {spec!r}: use a built-in ({', '.join(sorted(table))}), "
                         "MODULE:ATTR or PATH.py:ATTR")
    if kind is not None:
        kernels = [k for k in kernels if k.kind == kind]
    if not kernels:
        raise UsageError(f"kernel {spec!r} provides no {kind or 'kernel'}")
    return kernels


def _load_module(target: str, spec: str):
    if target.endswith(".py"):
        path = Path(target).expanduser().resolve()
        if not path.is_file():
            raise UsageError(f"kernel {spec!r}: no such file {target}")
        name = f"normverify_user_{abs(hash(str(path)))}"
        if name in sys.modules:
            return sys.modules[name]
        module_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        try:
            module_spec.loader.exec_module(module)
        except Exception as error:
            del sys.modules[name]
            raise UsageError(f"kernel {spec!r}: importing {target} failed: {type(error).__name__}: {error}") from None
        return module
    try:
        return importlib.import_module(target)
    except Exception as error:
        raise UsageError(f"kernel {spec!r}: cannot import {target}: {type(error).__name__}: {error}") from None


def _load_attribute(module, attr: str, spec: str):
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"kernel {spec!r}: {getattr(obj, '__name__', obj)!s} has no attribute {part!r}")
        obj = getattr(obj, part)
    return obj


def _as_kernels(obj, spec: str, kind: str | None) -> list[Kernel]:
    if isinstance(obj, Kernel):
        return [obj]
    if isinstance(obj, (list, tuple)) and obj and all(isinstance(k, Kernel) for k in obj):
        return list(obj)
    if inspect.isclass(obj) and issubclass(obj, torch.nn.Module):
        from verify.adapters import modules

        return [modules.kernel_from_module_class(obj, spec, kind)]
    if callable(obj):
        kind = kind or getattr(obj, "normverify_kind", None) or infer_kind(obj)
        if kind is None:
            raise UsageError(f"kernel {spec!r}: cannot tell whether it is a layernorm, rmsnorm or dropout; "
                             "pass --kind")
        return [Kernel(name=spec, kind=kind, fn=obj, spec=spec)]
    raise UsageError(f"kernel {spec!r}: {type(obj).__name__} is not a function, nn.Module class or Kernel")


def infer_kind(fn: Callable) -> str | None:
    """Kind from the parameter names: (x, weight, bias, eps) / (x, weight, eps) / (x, p, seed)."""
    try:
        names = [p.name for p in inspect.signature(fn).parameters.values()]
    except (TypeError, ValueError):
        return None
    if "seed" in names or "p" in names[1:2]:
        return "dropout"
    if "bias" in names or len(names) == 4:
        return "layernorm"
    if len(names) == 3:
        return "rmsnorm"
    return None
