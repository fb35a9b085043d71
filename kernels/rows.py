"""Host-side helpers shared by the kernels: input checks, rows view, launch sizes.

A norm works on rows: ``x`` of shape ``[..., d]`` is seen as ``[n, d]`` with ``n = prod(leading dims)``
(a view when the strides allow one, else a copy: inputs are never written). Kernels take the row and
column strides of what they read, so sliced and transposed inputs need no copy in most cases.
"""

from __future__ import annotations

import contextlib
import math

import torch
import triton

STORAGE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# Widest column block one program holds in registers: 8192 fp32 values over 16 warps is 16 per thread.
MAX_BLOCK = 8192
# Programs per streaming multiprocessor for persistent (row-looping) kernels on CUDA.
PROGRAMS_PER_SM = 4
# Persistent programs under the interpreter: it runs them one after the other, so this only sizes
# the partial-sum buffers of the parameter gradients.
CPU_PROGRAMS = 4


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


def launch_device(t: torch.Tensor) -> contextlib.AbstractContextManager:
    """Triton launches on the current CUDA device: make it t's (a tensor on cuda:1 launches there)."""
    return torch.cuda.device(t.device) if t.device.type == "cuda" else contextlib.nullcontext()


def as_rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` as ``[n, d]``: a view when possible (no copy, never written)."""
    if x.dim() == 0:
        raise ValueError("a norm needs at least one dimension; got a 0-d tensor")
    return x.reshape(math.prod(x.shape[:-1]), x.shape[-1])


def block_size(n_cols: int) -> int:
    """Column block of a program: the whole row when it fits in :data:`MAX_BLOCK`, else loop over blocks."""
    return min(triton.next_power_of_2(n_cols), MAX_BLOCK)


def num_warps(block: int) -> int:
    """Warps for a block: ~256 values per warp (as in Triton's layer-norm tutorial), between 1 and 16."""
    return min(max(block // 256, 1), 16)


def param_tile(block: int, device: torch.device) -> tuple[int, int]:
    """(rows, columns) of the tiles the column-parallel dgamma/dbeta kernel sums: 16 x 256 on CUDA (coalesced
    loads, 16 values per thread at 4 warps); wider under the interpreter, whose cost is per program, not per value."""
    return (16, min(block, 256)) if device.type == "cuda" else (16, min(block, 4096))


def device_programs(device: torch.device) -> int:
    """Programs that keep the device busy: :data:`PROGRAMS_PER_SM` per SM on CUDA, :data:`CPU_PROGRAMS` on CPU."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count * PROGRAMS_PER_SM
    return CPU_PROGRAMS


def persistent_programs(n_rows: int, device: torch.device) -> int:
    """How many programs loop over the rows of a backward pass (each keeps one partial sum of dgamma/dbeta)."""
    return max(1, min(n_rows, device_programs(device)))
