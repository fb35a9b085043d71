"""Loading the module and attribute a user's SPEC names (``PATH.py:ATTR`` or ``MODULE:ATTR``).

* ``PATH.py`` is imported under a readable name: its stem, e.g. ``wrap``, or ``wrap_2`` when that name
  is one of normverify's packages (:data:`OUR_PACKAGES`), already imported, or importable otherwise, so a
  user's ``kernels.py`` becomes module ``kernels_2`` (its functions' ``__module__`` says so) and never
  replaces ours. Its directory is first on ``sys.path`` while it loads, so that it imports its sibling
  files as it would when run from its directory (``from helpers import rsqrt``).
* Our packages resolve first, whatever precedes them on ``sys.path`` (``python -m verify`` puts the
  working directory there, a user file's directory is there while it loads): a finder first on
  ``sys.meta_path`` answers their top-level names from normverify's own directory only. A
  user's sibling file named like one of them is therefore not importable by that name.
* Before a user's module is imported, Triton kernels are made runnable on CPU tensors
  (:func:`kernels.interpret.enable`, when triton is installed): the interpreter's gaps are closed and
  CUDA host queries at import (``DEVICE = triton.runtime.driver.active.get_active_torch_device()``,
  ``torch.cuda.get_device_properties(...)``) get the stand-ins of :mod:`kernels.cuda_stand_ins`.
* An import that fails is one line: where in the user's files (file, line, code), where it was raised
  when that is elsewhere, the error, and for CUDA-only host code the likely cause and its remedy.
* A missing attribute names the close matches: "did you mean 'layer_norm'?".
"""

from __future__ import annotations

import difflib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType

from core.errors import UsageError, one_line

#: Words of an error that come from CUDA-only host code run on a machine without CUDA.
CUDA_SIGNS = ("cuda", "active drivers", "no device were detected", "nvidia", "gpu")
CUDA_REMEDY = ("likely cause: CUDA-only host code run at import, which normverify's CPU stand-ins do not cover "
               "(docs/kernels.md, 'Not covered'); create tensors on x.device rather than 'cuda', or run that "
               "code only when torch.cuda.is_available()")

#: normverify's top-level packages: always ours, never a user's file of that name.
OUR_PACKAGES = ("core", "kernels", "proofs", "properties", "verify")
#: The directory that holds them.
OUR_ROOT = Path(__file__).resolve().parents[1]

_loaded: dict[Path, ModuleType] = {}


class _OursFirst(importlib.abc.MetaPathFinder):
    """Finds the top-level names of :data:`OUR_PACKAGES` in :data:`OUR_ROOT` only."""

    def find_spec(self, name: str, path=None, target=None) -> importlib.machinery.ModuleSpec | None:
        if path is None and name in OUR_PACKAGES:
            return importlib.machinery.PathFinder.find_spec(name, [str(OUR_ROOT)])
        return None


def _ours_first() -> None:
    """Put :class:`_OursFirst` ahead of the other finders (once)."""
    if not any(isinstance(finder, _OursFirst) for finder in sys.meta_path):
        sys.meta_path.insert(0, _OursFirst())


def _enable_interpreter() -> None:
    if importlib.util.find_spec("triton") is not None:
        from kernels import interpret

        interpret.enable()


def _readable_name(path: Path) -> str:
    """The file's stem, unless it names one of our packages or a loaded or importable module: then ``stem_2``,
    ``stem_3`` ..."""
    stem = "".join(c if c.isalnum() or c == "_" else "_" for c in path.stem)
    name, number = stem, 1
    while name in OUR_PACKAGES or name in sys.modules or importlib.util.find_spec(name) is not None:
        number += 1
        name = f"{stem}_{number}"
    return name


def _failure(spec: str, what: str, error: BaseException, user_dir: Path | None) -> UsageError:
    """One line: where in the user's files the import failed, where it was raised, the error, a likely cause."""
    frames = traceback.extract_tb(error.__traceback__)
    mine = [f for f in frames if user_dir is not None and Path(f.filename).resolve().is_relative_to(user_dir)]
    places = []
    if mine:
        places.append(f"at {mine[-1].filename}:{mine[-1].lineno} `{(mine[-1].line or '').strip()}`")
    if frames and (not mine or frames[-1] is not mine[-1]):
        places.append(f"raised in {frames[-1].filename}:{frames[-1].lineno}")
    if isinstance(error, SyntaxError) and error.filename:
        places.append(f"at {error.filename}:{error.lineno}")
    message = f"kernel {spec!r}: {what}: {one_line(error)}"
    if places:
        message += f" ({'; '.join(places)})"
    if any(sign in str(error).lower() for sign in CUDA_SIGNS):
        message += f". {CUDA_REMEDY}"
    return UsageError(message)


def load_module(target: str, spec: str) -> ModuleType:
    """The module ``target`` (a ``.py`` path or a module name) of ``spec``; UsageError in one line when it fails."""
    _ours_first()
    _enable_interpreter()
    if not target.endswith(".py"):
        try:
            return importlib.import_module(target)
        except Exception as error:
            raise _failure(spec, f"cannot import {target}", error, Path.cwd().resolve()) from None
    path = Path(target).expanduser().resolve()
    if not path.is_file():
        raise UsageError(f"kernel {spec!r}: no such file {target}")
    if path in _loaded:
        return _loaded[path]
    name = _readable_name(path)
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.parent))
    try:
        module_spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[name]
        raise _failure(spec, f"importing {target} failed", error, path.parent) from None
    finally:
        sys.path.remove(str(path.parent))
    _loaded[path] = module
    return module


def load_attribute(module: ModuleType, attr: str, spec: str) -> object:
    """``module.ATTR`` (dotted); a missing name is a UsageError naming the close matches."""
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            names = [n for n in dir(obj) if not n.startswith("__")]
            close = difflib.get_close_matches(part, names, n=3)
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise UsageError(f"kernel {spec!r}: {getattr(obj, '__name__', obj)!s} has no attribute {part!r}{hint}")
        obj = getattr(obj, part)
    return obj


__all__ = ["CUDA_REMEDY", "OUR_PACKAGES", "OUR_ROOT", "load_attribute", "load_module"]
