"""Run Triton kernels written for a GPU on CPU tensors, through Triton's interpreter.

Entry points: :func:`enable` (process-wide, idempotent) and the context manager :func:`enabled`.
Once enabled, launching any ``@triton.jit`` kernel (ours or a third party's, e.g. Liger-Kernel's)

* on CUDA tensors compiles and runs it exactly as before: the CUDA path stays the default;
* on CPU tensors runs an interpreted twin of it (``triton.runtime.interpreter.InterpretedFunction``
  built from the same Python function), whatever ``TRITON_INTERPRET`` was when it was decorated.
  Kernels decorated under ``TRITON_INTERPRET=1`` get the same fixes.

Gaps of the interpreter (triton 3.9) closed here, each one with its own test in
``tests/test_interpret.py``:

1. Float scalar arguments reach the kernel as Python floats, so ``eps.to(tl.float32)`` raises
   AttributeError. The compiler specializes them as fp32 scalars; they are now wrapped the same way.
2. ``triton.language.extra.libdevice`` functions are stubs with no body under the interpreter
   (``libdevice.rsqrt(x)`` returns None), the backend modules (``extra.cuda.libdevice``,
   ``extra.hip.libdevice``) need the ``_semantic`` argument the interpreter does not pass, and the
   interpreter's ``create_extern_elementwise`` raises NotImplementedError. The stubs are bound to the
   CUDA backend functions, every libdevice builtin a kernel can reach (module attribute or name
   imported into the kernel's module) receives the interpreter's semantic, and the elementwise math
   symbols (``__nv_rsqrtf``, ``__ocml_exp_f32``, ...; see :data:`LIBDEVICE_MATH`) are computed with
   numpy in the argument's dtype.
3. A ``@triton.jit`` helper decorated without ``TRITON_INTERPRET`` is a compiled ``JITFunction``,
   which cannot be called from interpreted code ("Cannot call @triton.jit'd outside of the scope of
   a kernel"). That includes ``tl.sum``, ``tl.max``, ``tl.cdiv`` ...: ``triton.language.standard`` is
   itself compiled when triton is imported without ``TRITON_INTERPRET``. During an interpreted launch
   such helpers (in the kernel's module, in their own modules, behind a module alias such as
   ``tle.program_id``, in ``triton.language``) are replaced by
   interpreted twins, and ``triton.language`` is patched once for the launch and restored after it
   (the interpreter's own nested calls re-patch it on every call and leave patched builtins behind,
   which would break later compiled launches in the same process). What to replace is found once per
   kernel and again when a name it replaced holds another value (:func:`_kernel_replacements`).
4. Loop variables: compiled Triton makes the variable of ``for i in range(...)`` / ``tl.range(...)`` a
   tensor (int32, int64 when a bound is), the interpreter a Python int, so ``i.to(tl.int64)`` raises
   AttributeError. During an interpreted launch ``range`` in the kernels' modules and ``tl.range`` yield
   integer scalars of the compiled dtype (``tl.static_range`` still yields Python ints, as compiled).
5. bfloat16: the interpreter holds bf16 as raw uint16 bit patterns, so arithmetic on it is garbage
   (and fp32 -> bf16 conversion truncates instead of rounding). An interpreted launch with a bf16
   tensor argument raises :class:`InterpreterUnsupported` with one clear line instead.

6. ``triton.autotune`` benchmarks its configurations with the GPU's benchmarker, which fails without
   one (and interpreter timings would mean nothing): on CPU tensors the first configuration is used.

7. ``and`` / ``or`` / ``not`` on block tensors: compiled Triton computes them elementwise, the interpreter
   as Python, where a block tensor is always true (``mask_a and mask_b`` is ``mask_b``, silently). Kernel
   sources are rewritten to the compiled semantics (:mod:`kernels.interpret_logic`); any other Python truth
   test of a block tensor (``if mask:``) raises :class:`~kernels.interpret_logic.LogicOnBlockTensor` naming
   the file and line.

8. Host code of GPU kernels queries the CUDA device (SM count, current device, ``torch.cuda.device``
   context, ``triton.runtime.driver.active``), which raises without CUDA, often at import. Without CUDA,
   :mod:`kernels.cuda_stand_ins` answers for one small stand-in device (4 SMs, so per-SM grids stay small).

9. ``JITFunction.run`` returns the ``CompiledKernel``, which launchers keep and launch again as
   ``kernel[grid](*args)`` (FlagGems' ``LibEntry``); the interpreter returns None ("'NoneType' object is
   not subscriptable" on the second call). A launch on CPU tensors returns an :class:`InterpretedLaunch`.

10. A load or store out of bounds (a wrong mask or row count) goes through raw pointers in the interpreter:
    it corrupts the heap ("corrupted size vs. prev_size", the process aborts). Every masked-in address is
    checked against the storages of the launch's tensor arguments: :class:`OutOfBounds` names the kernel's line.

Also: numpy's floating-point warnings are silenced during a launch (a GPU raises none for NaN/inf).

Not covered: ``inline_asm``, tensor descriptors beyond what the interpreter already supports.

The interpreter is one global machine (grid index, patched ``triton.language``), so interpreted
launches are serialized by a lock.
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys
import threading
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import torch
import triton
import triton.language as tl
from triton.runtime import interpreter
from triton.runtime.autotuner import Autotuner
from triton.runtime.errors import InterpreterError
from triton.runtime.interpreter import InterpretedFunction, TensorHandle, interpreter_semantic
from triton.runtime.jit import JITFunction, mangle_type

from kernels import cuda_stand_ins, interpret_logic

from triton.language.extra import libdevice as libdevice_stubs  # isort: skip
from triton.language.extra.cuda import libdevice as cuda_libdevice  # isort: skip
from triton.language.extra.hip import libdevice as hip_libdevice  # isort: skip


LogicOnBlockTensor = interpret_logic.LogicOnBlockTensor


class OutOfBounds(IndexError):
    """An interpreted load or store reached memory outside every tensor argument of the launch."""


class InterpreterUnsupported(TypeError):
    """The kernel launch needs something Triton's interpreter cannot do (e.g. bfloat16 arithmetic)."""


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return (1 / np.sqrt(x)).astype(x.dtype)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[x.dtype])(x)


#: libdevice base name -> numpy function; the symbol's prefix (``__nv_``, ``__ocml_``), fp32 ``f``
#: suffix, ``_f32``/``_f64`` suffix and round-to-nearest ``_rn`` suffix are removed before lookup.
LIBDEVICE_MATH: dict[str, Callable[..., np.ndarray]] = {
    "rsqrt": _rsqrt, "sqrt": np.sqrt, "rcp": np.reciprocal,
    "exp": np.exp, "fast_exp": np.exp, "exp2": np.exp2, "exp10": lambda x: np.power(x.dtype.type(10), x),
    "expm1": np.expm1, "log": np.log, "fast_log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "erf": _erf, "abs": np.abs, "fabs": np.abs, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc,
    "rint": np.rint, "round": np.round, "nearbyint": np.rint, "isnan": np.isnan, "isinf": np.isinf,
    "signbit": np.signbit, "pow": np.power, "powi": np.power, "atan2": np.arctan2, "fmin": np.fmin,
    "fmax": np.fmax, "fmod": np.fmod, "hypot": np.hypot, "copysign": np.copysign,
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "fdiv": np.divide,
    "fadd": np.add, "fsub": np.subtract, "fmul": np.multiply, "frcp": np.reciprocal, "fsqrt": np.sqrt,
    "frsqrt": _rsqrt, "fma": lambda x, y, z: x * y + z,
}


def _libdevice_base_name(symbol: str) -> list[str]:
    """Candidate table keys for a libdevice symbol, most specific first."""
    name = symbol.removeprefix("__nv_").removeprefix("__ocml_")
    for suffix in ("_f16", "_f32", "_f64", "_rn"):
        name = name.removesuffix(suffix)
    return [name, name[:-1]] if name.endswith("f") else [name]


def _create_extern_elementwise(self, lib_name, lib_path, symbol, arg_list, ret_type, is_pure) -> TensorHandle:
    """``InterpreterBuilder.create_extern_elementwise``: the libdevice math function, computed by numpy."""
    for name in _libdevice_base_name(symbol):
        if name in LIBDEVICE_MATH:
            with np.errstate(all="ignore"):
                data = LIBDEVICE_MATH[name](*[arg.data for arg in arg_list])
            scalar = ret_type.scalar
            return TensorHandle(np.asarray(data).astype(interpreter._get_np_dtype(scalar)), scalar)
    raise NotImplementedError(f"libdevice function {symbol} is not available under the Triton interpreter "
                              "(kernels.interpret.LIBDEVICE_MATH)")


_original_implicit_cvt = interpreter._implicit_cvt
_original_masked_load = interpreter.InterpreterBuilder.create_masked_load
_original_masked_store = interpreter.InterpreterBuilder.create_masked_store
_TRITON_DIR = str(Path(triton.__file__).parent)

#: [start, end) byte ranges of the storages of the running launch's tensor arguments (None: no check).
_bounds: list[tuple[int, int]] | None = None


def _kernel_line() -> str:
    """``FILE:LINE`` of the innermost frame outside triton and this module: the kernel's line being run."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith((_TRITON_DIR, __file__)):
        frame = frame.f_back
    return "<unknown>" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _check_bounds(ptrs: TensorHandle, mask: TensorHandle, what: str) -> None:
    """Gap 10: every address a masked-in lane touches lies inside a tensor argument, else :class:`OutOfBounds`."""
    if _bounds is None:
        return
    addresses = ptrs.data[np.broadcast_to(mask.data, ptrs.data.shape)].astype(np.int64)
    if addresses.size == 0:
        return
    width = interpreter._get_np_dtype(ptrs.get_element_ty()).itemsize
    inside = np.zeros(addresses.shape, dtype=bool)
    for start, end in _bounds:
        inside |= (addresses >= start) & (addresses + width <= end)
    if not inside.all():
        raise OutOfBounds(f"{_kernel_line()}: {what} of {int((~inside).sum())} element(s) outside every tensor "
                          "argument of the launch (a wrong mask, row count or stride); on a GPU that is undefined "
                          "behaviour, in the interpreter it would corrupt the heap")


def _masked_load(self, ptrs, mask, other, *policies):
    """The interpreter's masked load after the bounds check; ``policies`` as the installed Triton passes them (3.9:
    cache, volatile; 3.6: cache, eviction, volatile)."""
    _check_bounds(ptrs, mask, "a load")
    return _original_masked_load(self, ptrs, mask, other, *policies)


def _masked_store(self, ptrs, value, mask, *policies):
    """The interpreter's masked store after the bounds check (``policies``: as for :func:`_masked_load`)."""
    _check_bounds(ptrs, mask, "a store")
    return _original_masked_store(self, ptrs, value, mask, *policies)


def _storage_ranges(args: tuple, kwargs: dict) -> list[tuple[int, int]]:
    storages = [t.untyped_storage() for t in _tensors(args, kwargs)]
    return [(s.data_ptr(), s.data_ptr() + s.nbytes()) for s in storages]


def _loop_range(arg1, arg2=None, step=None, **kwargs) -> Iterator[tl.tensor]:
    """``range``/``tl.range`` of a kernel: integer scalars of the dtype compiled Triton gives the loop variable."""
    bounds = [arg1] if arg2 is None else [arg1, arg2]
    bounds += [] if step is None else [step]
    wide = any(isinstance(b, tl.tensor) and b.dtype.primitive_bitwidth == 64 for b in bounds)
    values = [int(b) for b in bounds]
    dtype, np_dtype = (tl.int64, np.int64) if wide else (tl.int32, np.int32)
    for i in range(*values):
        yield tl.tensor(TensorHandle(np.array([i], dtype=np_dtype), dtype), dtype)


def _patch_lang_core(lang, scope) -> None:
    """The interpreter's own ``triton.language`` patches, then ``tl.range`` as :func:`_loop_range`."""
    _original_patch_lang_core(lang, scope)
    scope.set_attr(lang, "range", _loop_range)


_original_patch_lang_core = interpreter._patch_lang_core


def _patch_lang_tensor(tensor, scope) -> None:
    """The interpreter's own ``tl.tensor`` patches, then ``__bool__`` as :func:`interpret_logic.strict_bool`."""
    _original_patch_lang_tensor(tensor, scope)
    scope.set_attr(tensor, "__bool__", interpret_logic.strict_bool)


_original_patch_lang_tensor = interpreter._patch_lang_tensor


def _implicit_cvt(arg):
    """Kernel argument conversion that also turns a Python float into an fp32 scalar, as the compiler does."""
    if isinstance(arg, float):
        return tl.tensor(TensorHandle(np.array([arg], dtype=np.float32), tl.float32), tl.float32)
    return _original_implicit_cvt(arg)


_MISSING = object()


class _Patches:
    """Attribute and dict-item replacements undone in reverse order by :meth:`restore` (a launch makes ~1000)."""

    def __init__(self) -> None:
        self._undo: list[tuple] = []  # (kind, target, name, old): "attr", "item", or "call" (target is a callable)

    def add_undo(self, undo: Callable[[], None]) -> None:
        self._undo.append(("call", undo, None, None))

    def setattr(self, obj: object, name: str, value: object) -> None:
        self._undo.append(("attr", obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    def setitem(self, mapping: dict, key: str, value: object) -> None:
        self._undo.append(("item", mapping, key, mapping.get(key, _MISSING)))
        mapping[key] = value

    def restore(self) -> None:
        while self._undo:
            kind, target, name, old = self._undo.pop()
            if kind == "attr":
                setattr(target, name, old)
            elif kind == "call":
                target()
            elif old is _MISSING:
                target.pop(name)
            else:
                target[name] = old


def _with_interpreter_semantic(builtin: Callable) -> Callable:
    def call(*args, _semantic=None, **kwargs):
        return builtin(*args, _semantic=interpreter_semantic, **kwargs)

    call.__name__ = getattr(builtin, "__name__", "libdevice")
    call.__triton_builtin__ = True  # what Triton's source hashing expects of a language function
    return call


def _libdevice_for(value: object) -> Callable | None:
    """The interpreter-ready libdevice function for a global of a kernel's module, or None if it is none."""
    if getattr(value, "__module__", "") == libdevice_stubs.__name__:
        value = getattr(cuda_libdevice, value.__name__, None)
    if getattr(value, "__module__", "") in (cuda_libdevice.__name__, hip_libdevice.__name__) and tl.core.is_builtin(
            value):
        return _with_interpreter_semantic(value)
    return None


@functools.cache
def _libdevice_replacements() -> tuple[tuple[ModuleType, str, Callable], ...]:
    """(module, name, replacement) for every libdevice function, made once: the CUDA and HIP libdevice builtins
    wrapped to compute with the interpreter's semantic, and the ``tl.extra.libdevice`` stubs bound to CUDA's."""
    found = []
    for module in (cuda_libdevice, hip_libdevice):
        for name, value in vars(module).copy().items():
            if tl.core.is_builtin(value) and value.__module__ == module.__name__:
                found.append((module, name, _with_interpreter_semantic(value)))
    for name in dir(libdevice_stubs):
        backend = getattr(cuda_libdevice, name, None)
        if callable(getattr(libdevice_stubs, name)) and backend is not None and not name.startswith("_"):
            found.append((libdevice_stubs, name, backend))
    return tuple(found)


def _patch_libdevice_modules(patches: _Patches) -> None:
    for module, name, replacement in _libdevice_replacements():
        patches.setattr(module, name, replacement)


def _defines_jit_functions(module: ModuleType) -> bool:
    """A module reached through an alias (``tle.program_id``, ``helpers.rsqrt``) whose helpers a kernel may call."""
    return any(isinstance(value, (JITFunction, InterpretedFunction)) for value in vars(module).values())


def _replacements(namespace: dict, found: list[tuple[dict, str, object, object]], seen: dict[int, dict]) -> None:
    """Interpreter-ready replacements (namespace, name, the value there, its replacement) for the libdevice names and
    compiled ``@triton.jit`` functions reachable from a kernel's module namespace: directly, through other
    ``@triton.jit`` functions' modules, through a module alias that defines ``@triton.jit`` functions, or through
    ``triton.language`` modules (``tl.sum`` is itself a ``@triton.jit`` function)."""
    if id(namespace) in seen:
        return
    seen[id(namespace)] = namespace
    for name, value in list(namespace.items()):
        if isinstance(value, ModuleType):
            if value.__name__.startswith("triton.language") or _defines_jit_functions(value):
                _replacements(vars(value), found, seen)
        elif isinstance(value, JITFunction):
            found.append((namespace, name, value, _device_function(value)))
            _replacements(value.fn.__globals__, found, seen)
        elif isinstance(value, InterpretedFunction):
            _replacements(value.fn.__globals__, found, seen)
        elif (ready := _libdevice_for(value)) is not None:
            found.append((namespace, name, value, ready))


_found: dict[object, tuple[list[tuple[dict, str, object, object]], list[tuple[dict, int]]]] = {}
_patched_launches = 0  # launches whose patches are in place (a launch from host code inside another: 2)


def _kernel_replacements(kernel: InterpretedFunction) -> list[tuple[dict, str, object, object]]:
    """:func:`_replacements` of a kernel's module namespace, walked once per kernel and walked again when a name it
    replaced holds another value now (a helper redefined or monkeypatched) or a namespace it walked has gained or
    lost a name; the walk of the ``triton.language`` modules is most of an interpreted launch's own cost otherwise."""
    found, sizes = _found.get(kernel.fn, (None, ()))
    if (found is None or any(len(namespace) != size for namespace, size in sizes)
            or any(namespace.get(name, _MISSING) is not value for namespace, name, value, _ in found)):
        found, seen = [], {}
        _replacements(kernel.fn.__globals__, found, seen)
        if not _patched_launches:  # a launch inside another's patches would see replacements, not the originals
            _found[kernel.fn] = found, [(namespace, len(namespace)) for namespace in seen.values()]
    for _, _, value, _ in found:
        if isinstance(value, JITFunction):
            _device_function(value)  # rewritten before the launch patches anything, as in interpreted_twin
    return found


_twins: dict[JITFunction, InterpretedFunction] = {}
_device_functions: dict[JITFunction, _DeviceFunction] = {}
_launch_lock = threading.RLock()


def interpreted_twin(kernel: JITFunction) -> InterpretedFunction:
    """The interpreted version of a compiled ``@triton.jit`` kernel (cached, one per kernel)."""
    if kernel not in _twins:
        twin = InterpretedFunction(kernel.fn)
        twin.rewrite()  # now: Triton hashes the source's references, which must not be twins yet
        _twins[kernel] = twin
    return _twins[kernel]


class _DeviceFunction:
    """A compiled ``@triton.jit`` helper (``tl.sum`` included) made callable from interpreted code.

    Unlike the interpreter's own nested call, it does not patch ``triton.language`` on every call (and
    leave it patched): the launch has patched both language modules once, see :func:`_patch_language`.
    """

    def __init__(self, kernel: JITFunction) -> None:
        self.fn = kernel.fn  # the interpreter's generic reduction calls ``combine_fn.fn``
        self._twin = interpreted_twin(kernel)

    def __call__(self, *args, **kwargs):
        return self._twin.rewrite()(*args, **kwargs)


def _patch_language():
    """The interpreter's patches of ``triton.language`` and ``triton.language.core`` (what it applies to a kernel
    whose module imports both), for the whole launch; returns the interpreter's scope, to ``restore()``."""
    stand_in = types.FunctionType((lambda: None).__code__, {"tl": tl, "core": tl.core})
    return interpreter._patch_lang(stand_in)


def _device_function(kernel: JITFunction) -> _DeviceFunction:
    if kernel not in _device_functions:
        _device_functions[kernel] = _DeviceFunction(kernel)
    _device_functions[kernel]._twin.rewrite()  # before the launch patches anything, as in interpreted_twin
    return _device_functions[kernel]


def _tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    values = [*args, *kwargs.values()]
    values = [getattr(v, "base", v) for v in values]  # triton.reinterpret's TensorWrapper
    return [v for v in values if isinstance(v, torch.Tensor)]


def _all_on_cpu(args: tuple, kwargs: dict) -> bool:
    """Every tensor argument is on the CPU; a launch without tensors counts when there is no CUDA."""
    tensors = _tensors(args, kwargs)
    if not tensors:
        return not torch.cuda.is_available()
    return all(t.device.type == "cpu" for t in tensors)


def _refuse_bfloat16(kernel_name: str, args: tuple, kwargs: dict) -> None:
    if any(t.dtype == torch.bfloat16 for t in _tensors(args, kwargs)):
        raise InterpreterUnsupported(f"{kernel_name}: Triton's interpreter cannot compute in bfloat16 (it holds "
                                     "bf16 as raw uint16 bits); run bfloat16 on a CUDA device")


_original_interpreted_run = InterpretedFunction.run
#: Triton's own ``JITFunction.run`` (the compiled path), which our launchers call directly on CUDA tensors.
original_jit_run = JITFunction.run


def _interpreted_run(self: InterpretedFunction, *args, grid, warmup, **kwargs):
    """``InterpretedFunction.run`` with the gaps above closed for the duration of the launch."""
    _refuse_bfloat16(self.fn.__name__, args, kwargs)
    global _bounds, _patched_launches
    with _launch_lock:
        self.rewrite()  # before any patch, as in interpreted_twin
        found = _kernel_replacements(self)
        patches = _Patches()
        _patched_launches += 1
        try:
            patches.add_undo(_patch_language().restore)
            _patch_libdevice_modules(patches)
            for namespace, name, _, replacement in found:
                patches.setitem(namespace, name, replacement)
            for namespace in {id(ns): ns for ns in [self.fn.__globals__, *(f[0] for f in found)]}.values():
                patches.setitem(namespace, "range", _loop_range)
            _bounds = _storage_ranges(args, kwargs)
            with np.errstate(all="ignore"):  # NaN/inf in, NaN/inf out, silently: GPUs raise no FP exceptions
                return _original_interpreted_run(self, *args, grid=grid, warmup=warmup, **kwargs)
        except InterpreterError as error:
            if isinstance(error.__cause__, (LogicOnBlockTensor, OutOfBounds)):
                raise error.__cause__ from None  # its one line names the kernel's file and line
            raise
        finally:
            _bounds = None
            patches.restore()
            _patched_launches -= 1


class InterpretedLaunch:
    """What a launch on CPU tensors returns in place of the ``CompiledKernel`` (gap 9): launchable again as
    ``kernel[grid](*args)``, as launchers that cache compiled kernels do (FlagGems' ``LibEntry``). ``args`` are
    every parameter's value in order, or the non-constexpr ones only; the constexprs default to the first
    launch's (a compiled kernel has them built in)."""

    def __init__(self, kernel: JITFunction, args: tuple, kwargs: dict) -> None:
        self._kernel = kernel
        given = {**dict(zip(kernel.arg_names, args, strict=False)), **kwargs}
        self._constexprs = {p.name: given[p.name] for p in kernel.params if p.is_constexpr and p.name in given}

    def __getitem__(self, grid) -> Callable[..., None]:
        def launch(*args, stream=None) -> None:
            params = self._kernel.params
            names = [p.name for p in params] if len(args) == len(params) else [
                p.name for p in params if not p.is_constexpr]
            named = {**self._constexprs, **dict(zip(names, args, strict=True))}
            interpreted_twin(self._kernel).run(grid=grid, warmup=False, **named)

        return launch


def _jit_run(self: JITFunction, *args, grid, warmup, **kwargs):
    """``JITFunction.run``: compiled on CUDA tensors (unchanged), interpreted when every tensor is on the CPU."""
    if _all_on_cpu(args, kwargs):
        interpreted_twin(self).run(*args, grid=grid, warmup=warmup, **kwargs)
        return InterpretedLaunch(self, args, kwargs)
    return original_jit_run(self, *args, grid=grid, warmup=warmup, **kwargs)


def _autotuner_run(self: Autotuner, *args, **kwargs):
    """``Autotuner.run``: on CPU tensors, no benchmarking: the first configuration (see gap 6)."""
    if len(self.configs) <= 1 or not _all_on_cpu(args, kwargs):
        return _original_autotuner_run(self, *args, **kwargs)
    configs, self.configs = self.configs, self.configs[:1]
    try:
        return _original_autotuner_run(self, *args, **kwargs)
    finally:
        self.configs = configs


_original_autotuner_run = Autotuner.run

_PATCHES: tuple[tuple[object, str, object], ...] = (
    (interpreter, "_implicit_cvt", _implicit_cvt),
    (interpreter, "_patch_lang_core", _patch_lang_core),
    (interpreter, "_patch_lang_tensor", _patch_lang_tensor),
    (interpreter.FunctionRewriter, "ast_transformer", interpret_logic.LogicalTransformer()),
    *((interpreter, name, helper) for name, helper in interpret_logic.HELPERS.items()),
    (interpreter.InterpreterBuilder, "create_extern_elementwise", _create_extern_elementwise),
    (interpreter.InterpreterBuilder, "create_masked_load", _masked_load),
    (interpreter.InterpreterBuilder, "create_masked_store", _masked_store),
    (InterpretedFunction, "run", _interpreted_run),
    (JITFunction, "run", _jit_run),
    (Autotuner, "run", _autotuner_run),
)
_ORIGINALS = tuple(getattr(owner, name, None) for owner, name, _ in _PATCHES)


def is_enabled() -> bool:
    return JITFunction.run is _jit_run


def enable() -> None:
    """Let every Triton kernel launched on CPU tensors run in the interpreter, gaps closed (idempotent)."""
    # Argument specialization imports triton.experimental.gluon on first use, and that import asserts that
    # tl.standard's functions are JITFunctions: let it happen now, before any launch swaps them for twins.
    mangle_type(1)
    if not is_enabled():
        InterpretedFunction.rewritten_fn.clear()  # sources rewritten before: again, with and/or/not
    for owner, name, value in _PATCHES:
        setattr(owner, name, value)
    cuda_stand_ins.install()


def disable() -> None:
    """Undo :func:`enable`."""
    for (owner, name, _), original in zip(_PATCHES, _ORIGINALS, strict=True):
        if original is None:
            delattr(owner, name)  # a name the rewritten sources need, which the interpreter did not have
        else:
            setattr(owner, name, original)
    InterpretedFunction.rewritten_fn.clear()
    cuda_stand_ins.uninstall()


@contextlib.contextmanager
def enabled() -> Iterator[None]:
    """``with enabled(): ...``: :func:`enable` for the block; left as it was found afterwards."""
    was_enabled = is_enabled()
    enable()
    try:
        yield
    finally:
        if not was_enabled:
            disable()


__all__ = ["LIBDEVICE_MATH", "InterpreterUnsupported", "LogicOnBlockTensor", "OutOfBounds", "disable", "enable",
           "enabled", "interpreted_twin", "is_enabled"]
