"""Host-side helpers shared by the kernels: input checks, rows view, launch sizes.

A norm works on rows: ``x`` of shape ``[..., d]`` is seen as ``[n, d]`` with ``n = prod(leading dims)``
(a view when the strides allow one, else a copy: inputs are never written). Kernels take the row and
column strides of what they read, so sliced and transposed inputs need no copy in most cases.
"""

from __future__ import annotations

import functools
import inspect
import math
from dataclasses import dataclass

import torch
import triton
from triton import knobs
from triton.runtime.jit import JITFunction

from kernels import interpret

_compiled_run = interpret.original_jit_run
_hooks = knobs.runtime

STORAGE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# Widest column block one program holds in registers: 8192 fp32 values over 16 warps is 16 per thread.
MAX_BLOCK = 8192
# Widest column block of the plain LayerNorm/RMSNorm forward (kernels/norm.py _norm_forward): 16384 values over 16
# warps, 32 per thread. ptxas (CUDA 12.9, sm_90a) compiles it at that block without a spill in every dtype (104-128
# registers of the 128 a thread of 16 warps may have); the fused add + norm forward with dropout spills 120-344
# bytes there, so it keeps MAX_BLOCK (scripts/register_use.py prints these counts).
FORWARD_MAX_BLOCK = 16384
# Widest column block of the backward's row kernel (kernels/norm.py _norm_backward_input), whose row of one block is
# read once (x, dy, gamma and the program's dgamma/dbeta accumulators held); wider rows read x and dy twice. Measured
# on an H100 (docs/kernels.md, 16384 rows, d = 16384, one block of 32 warps against two reads of 8192): RMSNorm
# forward + backward 1135 us against 1591 in bfloat16 (Liger-Kernel's single read: 1131), 2104 against 2688 in
# float32; LayerNorm, which also holds the mean, c_one and a dbeta accumulator, 1891 against 1729 in bfloat16 and
# 3050 against 2971 in float32: slower, so LayerNorm keeps MAX_BLOCK. At 16384 the row kernel gets 32 warps
# (:func:`backward_num_warps`): 64 registers a thread and 0.2-0.6 KB of spills, against 2.1-3.3 KB with 16 warps
# (scripts/register_use.py); scripts/launch_sweep.py --backward-blocks measures other caps.
RMS_BACKWARD_MAX_BLOCK = 16384
LAYERNORM_BACKWARD_MAX_BLOCK = MAX_BLOCK
# Programs per streaming multiprocessor for persistent (row-looping) kernels on CUDA.
PROGRAMS_PER_SM = 4
# Persistent programs under the interpreter: it runs them one after the other, so this only sizes
# the partial-sum buffers of the parameter gradients.
CPU_PROGRAMS = 4


#: dtypes our kernels run: compiled on CUDA, interpreted on the CPU (no bfloat16 there).
_CUDA_DTYPES = frozenset({torch.float32, torch.float16, torch.bfloat16})
_CPU_DTYPES = frozenset({torch.float32, torch.float16})


def _same_place(t: torch.Tensor, x: torch.Tensor, x_is_cuda: bool) -> bool:
    """t is on x's device (integer comparisons: cheaper than building and comparing two torch.device)."""
    return t.is_cuda and t.get_device() == x.get_device() if x_is_cuda else t.is_cpu


def inputs_ok(x: object, params: tuple[object, ...] = (), same_shape: tuple[object, ...] = ()) -> bool:
    """The common case at the cost of a few attribute reads: ``x`` a tensor of at least one dimension that our
    kernels run, each of ``params`` None or such a tensor of shape ``[d]`` on x's device, each of ``same_shape`` such
    a tensor of x's shape. False means: run the checks that say what is wrong (:func:`check_tensor`, ...)."""
    if not isinstance(x, torch.Tensor) or x.dim() == 0:
        return False
    is_cuda = x.is_cuda
    if not is_cuda and not x.is_cpu:
        return False
    dtypes = _CUDA_DTYPES if is_cuda else _CPU_DTYPES
    if x.dtype not in dtypes:
        return False
    d = x.shape[-1]
    for t in params:
        if t is not None and not (isinstance(t, torch.Tensor) and t.dim() == 1 and t.shape[0] == d
                                  and t.dtype in dtypes and _same_place(t, x, is_cuda)):
            return False
    for t in same_shape:
        if not (isinstance(t, torch.Tensor) and t.shape == x.shape and t.dtype in dtypes
                and _same_place(t, x, is_cuda)):
            return False
    return True


def check_tensor(op: str, name: str, t: torch.Tensor, like: torch.Tensor | None = None) -> None:
    """Raise a one-line TypeError/ValueError unless ``t`` is something our kernels can read."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, not {type(t).__name__}")
    if t.dtype not in STORAGE_DTYPES:
        raise TypeError(f"{op}: {name} has dtype {t.dtype}; supported: float32, float16, bfloat16")
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError(f"{op}: {name} is on {t.device}; supported: cuda (compiled Triton), cpu (interpreter)")
    if t.device.type == "cpu" and t.dtype == torch.bfloat16:
        raise TypeError(f"{op}: {name} is bfloat16 on the CPU, where Triton's interpreter cannot compute in "
                        "bfloat16; use float32/float16 on the CPU or run bfloat16 on a CUDA device")
    if like is not None and t.device != like.device:
        raise ValueError(f"{op}: {name} is on {t.device} but x is on {like.device}")


def check_param(op: str, name: str, t: torch.Tensor | None, x: torch.Tensor) -> None:
    """A weight or bias: None, or a tensor of shape [d] on x's device."""
    if t is None:
        return
    check_tensor(op, name, t, like=x)
    if tuple(t.shape) != (x.shape[-1],):
        raise ValueError(f"{op}: {name} has shape {tuple(t.shape)}, expected ({x.shape[-1]},) for x of shape "
                         f"{tuple(x.shape)}")


_C_APPLY = torch._C._FunctionBase.__dict__["apply"]  # autograd.Function.apply below its Python layer
_is_functorch_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_transforms_active = torch._C._are_functorch_transforms_active


def autograd_apply(function: type[torch.autograd.Function], *args):
    """``function.apply(*args)`` without the Python layer of ``Function.apply`` (~2.5 us), whose work is for
    functorch only (it unwraps tensors of finished transforms, routes active transforms): taken, unchanged, whenever
    a functorch transform is active or a tensor argument is a functorch wrapper."""
    if _transforms_active():
        return function.apply(*args)
    for a in args:
        if isinstance(a, torch.Tensor) and _is_functorch_wrapped(a):
            return function.apply(*args)
    return _C_APPLY.__get__(None, function)(*args)


#: What an autograd Function applied to some tensors would do (:func:`graph_mode`).
NO_GRAPH, RECORD, FUNCTORCH = "no graph", "record", "functorch"


def graph_mode(*tensors: torch.Tensor | None) -> str:
    """:data:`NO_GRAPH` when a Function applied to ``tensors`` would record nothing (grad mode off or none of them
    requiring grad): the kernels are then called directly (inference), without the Function's ~3.5 us;
    :data:`FUNCTORCH` when a functorch transform is active or one of them is a functorch wrapper: ``Function.apply``
    then, unchanged; else :data:`RECORD`: the Function's C ``apply`` (:func:`c_apply`), which records the graph."""
    if _transforms_active():
        return FUNCTORCH
    grad_mode = torch.is_grad_enabled()
    mode = NO_GRAPH
    for t in tensors:
        if t is not None:
            if _is_functorch_wrapped(t):
                return FUNCTORCH
            if grad_mode and t.requires_grad:
                mode = RECORD
    return mode


def c_apply(function: type[torch.autograd.Function]):
    """``function``'s apply below the Python layer of ``Function.apply`` (~2.5 us, functorch's work only), bound
    once: for :data:`RECORD` calls (:func:`graph_mode`)."""
    return _C_APPLY.__get__(None, function)


def launch(kernel: JITFunction, grid: tuple[int, ...], *args, **meta) -> None:
    """Launch ``kernel[grid](*args, **meta)`` as directly as Triton allows: the one place our kernels are launched.

    CUDA tensors (``args[0]`` is one): :func:`launch_compiled` on ``args[0]``'s device (entered only when it is not
    the current one). CPU tensors: the kernel's interpreted twin, the interpreter support enabled on first use.
    """
    first = args[0]
    if first.is_cuda:
        index = first.get_device()
        if index == torch.cuda.current_device():
            launch_compiled(kernel, grid, index, args, meta)
        else:
            with torch.cuda.device(index):
                launch_compiled(kernel, grid, index, args, meta)
        return
    if not interpret.is_enabled():
        interpret.enable()
    interpret.interpreted_twin(kernel).run(*args, grid=grid, warmup=False, **meta)


def specialization_key(args: tuple) -> tuple:
    """What Triton's launch specializes a compiled kernel on, for each argument, or finer: a tensor's dtype and
    whether its address is a multiple of 16 bytes; an integer's value 1 (a constant), divisibility by 16 and its
    range (int32, int64, uint64); for anything else its type (a float is fp32, a bool u1, None a constant).
    Arguments with equal keys get the same compiled kernel from Triton (tests/test_kernels_launch.py checks this
    against Triton's own ``native_specialize_impl``)."""
    return tuple([(a.dtype, a.data_ptr() % 16 == 0) if isinstance(a, torch.Tensor)
                  else (a == 1, a % 16 == 0, -_INT32 <= a < _INT32, a < _INT64) if a.__class__ is int
                  else a.__class__ for a in args])


_INT32, _INT64 = 2**31, 2**63


@dataclass(frozen=True)
class _Launcher:
    """A compiled kernel's C launcher and what it takes besides the arguments (CompiledKernel.__getitem__'s)."""

    run: object  # CompiledKernel.run: (grid0, grid1, grid2, stream, function, packed_metadata, launch_metadata,
    #              enter_hook, exit_hook, *every argument of the kernel's signature, constexprs included)
    function: object  # the loaded CUfunction
    packed_metadata: object
    tail: tuple[tuple[str, object], ...]  # (name, default) of the signature's parameters after the positional
    #                                        arguments: their values from ``meta``, else their defaults
    current_stream: object  # device index -> raw stream, Triton's driver's


_launchers: dict[tuple, _Launcher] = {}


def _hooked(hook: object) -> bool:
    """A launch hook is set: Triton's ``knobs.runtime.launch_enter_hook`` / ``_exit_hook``, a HookChain (empty
    unless a profiler added a call) or, in older Tritons, None or a function."""
    return hook is not None and bool(getattr(hook, "calls", True))


def clear_launchers() -> None:
    """Forget the launchers :func:`launch_compiled` keeps (their next launches go through Triton's run again)."""
    _launchers.clear()


def launch_compiled(kernel: JITFunction, grid: tuple[int, ...], device_index: int, args: tuple, meta: dict) -> None:
    """``kernel[grid](*args, **meta)`` compiled, on the current device ``device_index``: the first launch of each
    specialization (:func:`specialization_key` of every argument, ``meta``, the device) through Triton's own
    ``JITFunction.run`` (binder, cache, compile), the later ones straight to the compiled kernel's C launcher, as
    ``CompiledKernel[grid](*args)`` does, without the ~10 us of binding and cache-key building per call. Launch
    hooks (a profiler's) always take Triton's path, which calls them."""
    key = (kernel, device_index, *meta.items(), specialization_key(args))
    launcher = _launchers.get(key)
    if launcher is None or _hooked(_hooks.launch_enter_hook) or _hooked(_hooks.launch_exit_hook):
        compiled = _compiled_run(kernel, *args, grid=grid, warmup=False, **meta)
        if launcher is None and compiled is not None:  # None: a Triton that compiles asynchronously said so
            _launchers[key] = _Launcher(
                run=compiled.run, function=compiled.function, packed_metadata=compiled.packed_metadata,
                tail=tuple((name, parameter.default) for name, parameter in
                           list(inspect.signature(kernel.fn).parameters.items())[len(args):]),
                current_stream=triton.runtime.driver.active.get_current_stream)
        return
    constexprs = [meta.get(name, default) for name, default in launcher.tail]
    launcher.run(grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1,
                 launcher.current_stream(device_index), launcher.function, launcher.packed_metadata, None, None, None,
                 *args, *constexprs)


def as_rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` as ``[n, d]``: a view when possible (no copy, never written)."""
    if x.dim() == 0:
        raise ValueError("a norm needs at least one dimension; got a 0-d tensor")
    return x.reshape(math.prod(x.shape[:-1]), x.shape[-1])


@dataclass(frozen=True)
class LaunchConfig:
    """How our norm kernels are launched for one row width and element size on one kind of device
    (:func:`launch_config`)."""

    block: int  # columns a row program holds at once: next_pow2(d), at most MAX_BLOCK
    forward_block: int  # columns the plain forward's program holds at once: next_pow2(d), at most FORWARD_MAX_BLOCK
    rms_backward_block: int  # columns RMSNorm's backward row program holds: next_pow2(d), <= RMS_BACKWARD_MAX_BLOCK
    layernorm_backward_block: int  # LayerNorm's: next_pow2(d), at most LAYERNORM_BACKWARD_MAX_BLOCK
    num_warps: int  # of a row program: block * element size / 1024 (32 bytes of a block per thread), 1..16
    single_block: bool  # d <= block: the fused forward's row is read once, kept in registers
    sum_rows: int  # rows of a tile of the column kernels (dgamma, dbeta; dx of rows wider than a block)
    sum_cols: int  # columns of that tile: one program per column block


@functools.cache
def launch_config(n_cols: int, element_size: int, device_type: str, sms: int) -> LaunchConfig:
    """The launch rule, by width d and the inputs' element size s (bytes):

    * row programs (fused forward): ``block = min(next_pow2(d), MAX_BLOCK)`` columns at a time; the plain forward
      ``forward_block = min(next_pow2(d), FORWARD_MAX_BLOCK)``, the backward's ``min(next_pow2(d),
      RMS_BACKWARD_MAX_BLOCK)`` (RMSNorm) or ``LAYERNORM_BACKWARD_MAX_BLOCK`` (LayerNorm); the row read once when it
      fits;
      ``num_warps = clamp(block * s / 1024, 1, 16)``: each thread holds 32 bytes of a block (of the plain forward's
      16384 columns, up to 64), two 16-byte vector loads (float32: 8 values, 16-bit: 16 values). That is tutorial
      05's block / 256 for float32; for 16-bit storage, half as many warps (at d = 4096: 8, Liger-Kernel's choice,
      where 16 warps of one 16-byte load each measured 41-61% of Liger's forward on an H200, float32 74-93%);
    * column tiles (dgamma, dbeta; dx too for rows wider than a block): ``16 x sum_cols``, one program per column
      block, ``sum_cols = clamp(prev_pow2(d / SMs), 32, 256)`` on CUDA so that there are about as many programs as
      SMs or more (a 64-column fp32 row segment is two 128-byte lines); under the interpreter, whose cost is per
      program, ``min(block, 4096)``; 4 warps.
    """
    block = block_size(n_cols)
    cuda_cols = min(max(_prev_power_of_2(max(n_cols // sms, 1)), 32), 256)
    sum_cols = cuda_cols if device_type == "cuda" else min(block, 4096)
    return LaunchConfig(block=block, forward_block=block_size(n_cols, FORWARD_MAX_BLOCK),
                        rms_backward_block=block_size(n_cols, RMS_BACKWARD_MAX_BLOCK),
                        layernorm_backward_block=block_size(n_cols, LAYERNORM_BACKWARD_MAX_BLOCK),
                        num_warps=num_warps(block, element_size), single_block=n_cols <= block, sum_rows=16,
                        sum_cols=sum_cols)


_configs: dict[tuple[int, int, torch.device], LaunchConfig] = {}


def config_for(n_cols: int, element_size: int, device: torch.device) -> LaunchConfig:
    """:func:`launch_config` for a row width and element size on a device (one dictionary lookup after the first
    call)."""
    config = _configs.get((n_cols, element_size, device))
    if config is None:
        config = _configs[n_cols, element_size, device] = launch_config(n_cols, element_size, device.type,
                                                                        sm_count(device))
    return config


def block_and_warps(n_cols: int, element_size: int, device: torch.device, block: int | None = None
                    ) -> tuple[int, int]:
    """(block, :func:`num_warps` of it) of a row program: :func:`config_for`'s block, or a given one (a power of two:
    the plain forward's wider block, or one that exercises the multi-block path). The warps come from the module's
    ``num_warps``, which scripts/launch_sweep.py replaces to measure other counts."""
    block = block or config_for(n_cols, element_size, device).block
    return block, num_warps(block, element_size)


def _prev_power_of_2(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def block_size(n_cols: int, cap: int = MAX_BLOCK) -> int:
    """Column block of a program: the whole row when it fits in ``cap`` (:data:`MAX_BLOCK`,
    :data:`FORWARD_MAX_BLOCK` for the forward, :data:`RMS_BACKWARD_MAX_BLOCK` or :data:`LAYERNORM_BACKWARD_MAX_BLOCK`
    for the backward), else loop over blocks of ``cap``."""
    return min(triton.next_power_of_2(n_cols), cap)


def num_warps(block: int, element_size: int) -> int:
    """Warps of a row program: 32 bytes of a block per thread (two 16-byte loads), between 1 and 16."""
    return min(max(block * element_size // 1024, 1), 16)


def backward_num_warps(block: int, element_size: int) -> int:
    """Warps of the backward's row program: :func:`num_warps`, but 32 for a block wider than :data:`MAX_BLOCK`,
    whose five held vectors (x, dy, gamma, two accumulators) spill 2.1-3.3 KB a thread over 16 warps."""
    return 32 if block > MAX_BLOCK else num_warps(block, element_size)


@functools.cache
def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device (asked once per device); :data:`CPU_PROGRAMS` on the CPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return CPU_PROGRAMS


def device_programs(device: torch.device) -> int:
    """Programs that keep the device busy: :data:`PROGRAMS_PER_SM` per SM on CUDA, :data:`CPU_PROGRAMS` on CPU."""
    return sm_count(device) * PROGRAMS_PER_SM if device.type == "cuda" else CPU_PROGRAMS


def persistent_programs(n_rows: int, device: torch.device, block: int = MAX_BLOCK) -> int:
    """How many programs loop over the rows of a backward pass of column block ``block`` (each keeps one partial sum
    of dgamma/dbeta): :func:`device_programs`, but one per SM on CUDA for a block wider than :data:`MAX_BLOCK`,
    whose program of 32 warps at 64 registers a thread fills an SM's 65536 registers, so that more programs would
    only add rows to the partial sums (35 MB of them for RMSNorm at d = 16384 with 4 per SM)."""
    programs = sm_count(device) if device.type == "cuda" and block > MAX_BLOCK else device_programs(device)
    return max(1, min(n_rows, programs))
