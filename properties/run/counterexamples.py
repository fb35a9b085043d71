"""Failing examples saved to a file, and replayed from it.

A conformance test runs each example as ``check(kernel, **example)`` (:func:`properties.evidence.check`).
When one fails, the results plugin calls :func:`save` with the minimal example Hypothesis found
(``evidence.last_example()``), and prints it with :func:`describe` and ``core.results.replay_command``.
The file (``torch.save``) holds::

    {"schema": "normverify.counterexample/1", "spec", "kind", "kernel", "claim",
     "check": "module:function", "inputs": {...}, "layouts": {name: {shape, stride, storage_offset,
     contiguous, dtype, device}}}

Tensors are saved as given: ``torch.save`` keeps a view's storage, offset and strides, so a
non-contiguous input (and whatever lies in its storage around it) comes back as it was; ``layouts``
records the layout of each tensor input, and :func:`load` re-creates it should one come back otherwise.

:func:`replay` reloads the kernel by its SPEC (``core.registry.resolve``), or another SPEC,
re-runs the check and returns a :class:`ReplayResult`: passed or not, the message, expected vs got.
A check states a violation as a ``properties.outcome.CheckFailure``, an AssertionError whose ``expected``,
``got`` and ``where`` attributes replay shows side by side (never parsed back from the message).
"""

from __future__ import annotations

import hashlib
import importlib
import io
import pickle
import re
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core import boundary
from core.errors import UsageError, one_line
from core.files import write_atomically
from core.guard import KernelFault
from core.names import short_spec
from core.registry import Kernel, resolve
from properties.norms import strided_copy

SCHEMA = "normverify.counterexample/1"
MAX_STEM = 60


@dataclass
class ReplayResult:
    """The outcome of re-running a saved counterexample: ``outcome`` is passed, failed or error
    (as a test's status: error when the check could not run to a verdict)."""

    path: Path
    claim: str
    kernel: str
    spec: str
    check: str
    outcome: str
    message: str = ""
    expected: str | None = None
    got: str | None = None
    inputs: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"


def check_reference(check: Callable) -> str:
    """``module:qualname`` of a module-level check function; ValueError when it cannot be imported by that name."""
    module, name = getattr(check, "__module__", None), getattr(check, "__qualname__", "")
    if not module or "<" in name or _attribute(sys.modules.get(module), name) is not check:
        raise ValueError(f"check {check!r} cannot be replayed: it must be a module-level function "
                         "of an importable module")
    return f"{module}:{name}"


def _attribute(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
    return obj


def portable_spec(spec: str) -> str:
    """SPEC with a relative ``PATH.py`` made absolute, so the file replays from any directory."""
    target, colon, attr = spec.rpartition(":")
    if colon and target.endswith(".py"):
        return f"{Path(target).expanduser().resolve()}:{attr}"
    return spec


def _layout(tensor: torch.Tensor) -> dict:
    return {"shape": list(tensor.shape), "stride": list(tensor.stride()), "storage_offset": tensor.storage_offset(),
            "contiguous": tensor.is_contiguous(), "dtype": str(tensor.dtype).removeprefix("torch."),
            "device": str(tensor.device)}


def save(claim: str, kernel: Kernel, check: Callable, example: dict, directory: Path) -> Path:
    """Write the failing ``example`` of ``check`` on ``kernel`` into ``directory``; return the file's path.

    The name is ``CLAIM-KERNEL-DIGEST.pt`` (KERNEL as :func:`core.names.short_spec` gives it, e.g.
    ``flaggems_wrap_layer_norm`` for ``.../flaggems/wrap.py:layer_norm``; the stem cut at MAX_STEM
    characters): the same counterexample saved twice is one file.
    """
    spec = getattr(kernel, "spec", "") or getattr(kernel, "name", "")
    if not spec or not getattr(kernel, "kind", None):
        raise ValueError(f"kernel {kernel!r} has no SPEC or kind to replay it by")
    inputs = {name: value.detach() if isinstance(value, torch.Tensor) else value for name, value in example.items()}
    document = {"schema": SCHEMA, "spec": portable_spec(spec), "kind": kernel.kind,
                "kernel": getattr(kernel, "name", spec), "claim": claim, "check": check_reference(check),
                "inputs": inputs,
                "layouts": {name: _layout(value) for name, value in inputs.items() if isinstance(value, torch.Tensor)}}
    buffer = io.BytesIO()
    torch.save(document, buffer)
    data = buffer.getvalue()
    stem = re.sub(r"[^A-Za-z0-9.+-]+", "_", f"{claim}-{short_spec(document['kernel'])}")[:MAX_STEM]
    path = Path(directory) / f"{stem}-{hashlib.sha256(data).hexdigest()[:10]}.pt"
    write_atomically(path, data)
    return path


def load(path: Path) -> dict:
    """The counterexample document at ``path``, tensors in their recorded layout; UsageError when unreadable."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"no such counterexample file: {path}")
    if not zipfile.is_zipfile(path):
        raise UsageError(f"{path} is not a counterexample file (normverify saves them with torch.save, as .pt "
                         "zip archives, in counterexamples/ next to the results JSON)")
    try:
        document = _torch_load(path)
    except Exception as error:
        raise UsageError(f"{path} is not a counterexample file (torch.load: {one_line(error)})") from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise UsageError(f"{path} is not a counterexample file (no {SCHEMA!r} schema)")
    for name, layout in document.get("layouts", {}).items():
        tensor = document["inputs"].get(name)
        if isinstance(tensor, torch.Tensor) and list(tensor.stride()) != layout["stride"]:
            document["inputs"][name] = _with_layout(tensor, layout)
    return document


def map_location(storage: torch.UntypedStorage, saved: str) -> torch.UntypedStorage:
    """Where a saved tensor loads: on its CUDA device where this host has it, else on cuda:0 (a file saved on cuda:1
    replayed on a one-GPU host), on the CPU without CUDA; CPU tensors stay on the CPU."""
    if not saved.startswith("cuda") or not torch.cuda.is_available():
        return storage.cpu()
    index = int(saved.partition(":")[2] or 0)
    return storage.cuda(index if index < torch.cuda.device_count() else 0)


def _torch_load(path: Path) -> Any:
    location = map_location
    try:
        return torch.load(path, map_location=location, weights_only=True)
    except pickle.UnpicklingError:
        # Inputs of types outside torch's safe list; the file is one normverify wrote, and replaying
        # it runs the kernel's own Python code anyway.
        return torch.load(path, map_location=location, weights_only=False)


def _with_layout(tensor: torch.Tensor, layout: dict) -> torch.Tensor:
    """``tensor``'s values in a fresh tensor with the recorded shape and strides (overlapping ones too: an
    expanded upstream gradient)."""
    return strided_copy(tensor.reshape(layout["shape"]), layout["stride"])


def _import_check(reference: str) -> Callable:
    module_name, _, name = reference.partition(":")
    # files saved before the checks left the test modules name properties.test_FAMILY
    module_name = re.sub(r"^properties\.test_", "properties.checks.", module_name)
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise UsageError(f"cannot import the check {reference}: {one_line(error)}") from None
    check = _attribute(module, name)
    if not callable(check):
        raise UsageError(f"the check {reference} no longer exists")
    return check


def _kernel_for(document: dict, spec: str | None) -> Kernel:
    """The kernel to replay against: the saved one by name, or the one kernel of ``spec`` of the saved kind."""
    kernels = resolve(spec or document["spec"], document["kind"])
    named = [k for k in kernels if k.name == document["kernel"]]
    if named or len(kernels) == 1:
        return (named or kernels)[0]
    raise UsageError(f"{spec or document['spec']} provides {len(kernels)} {document['kind']} kernels "
                     f"({', '.join(k.name for k in kernels)}); name one with MODULE:ATTR")


def expected_and_got(error: BaseException) -> tuple[str | None, str | None]:
    """Expected and actual values of a failed check: the attributes of a ``properties.outcome.CheckFailure``
    (None, None for a failure without values to compare)."""
    expected, got = getattr(error, "expected", None), getattr(error, "got", None)
    if expected is None or got is None:
        return None, None
    return f"{expected:.9g}" if isinstance(expected, float) else str(expected), \
        f"{got:.9g}" if isinstance(got, float) else str(got)


def replay(path: Path, spec: str | None = None) -> ReplayResult:
    """Re-run the counterexample at ``path`` against its kernel, or against ``spec`` when given."""
    document = load(path)
    check = _import_check(document["check"])
    kernel = _kernel_for(document, spec)
    result = ReplayResult(Path(path), document["claim"], kernel.name, kernel.spec or spec or document["spec"],
                          document["check"], "passed", inputs=document["inputs"])
    try:
        check(kernel, **document["inputs"])
    except AssertionError as error:
        result.outcome, result.message = "failed", str(error).strip()
        result.expected, result.got = expected_and_got(error)
    except KernelFault as error:  # failed for a wrong answer (NaN on finite input), error when it could not run
        result.outcome, result.message = error.status, str(error)
    except Exception as error:
        result.outcome, result.message = "error", f"the check raised {one_line(error)}"
    return result


def describe(inputs: dict, width: int = 100) -> str:
    """The inputs compactly, one line or a few per name: tensors with dtype, shape, layout and values."""
    lines = []
    for name, value in inputs.items():
        if isinstance(value, torch.Tensor):
            layout = "" if value.is_contiguous() else f", non-contiguous stride {tuple(value.stride())}"
            values = np.array2string(boundary.to_oracle(value), precision=6, threshold=48, edgeitems=3,
                                     max_line_width=width, separator=", ")
            lines.append(f"{name}: {str(value.dtype).removeprefix('torch.')} {tuple(value.shape)}{layout} = {values}")
        else:
            lines.append(f"{name} = {value!r}")
    return "\n".join(lines)
