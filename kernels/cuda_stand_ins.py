"""Stand-ins for the CUDA host queries that GPU kernels' host code makes, on a machine without CUDA.

Third-party Triton launchers size their grids from the device and enter its context before a launch:
``torch.cuda.get_device_properties(x.device).multi_processor_count``, ``torch.cuda.current_device()``,
``with torch.cuda.device(x.device.index):`` (``None`` for a CPU tensor), and Triton's
``triton.runtime.driver.active.get_current_device()`` / ``.utils.get_device_properties(dev)`` /
``.get_active_torch_device()`` (often at import: ``DEVICE = triton.runtime.driver.active.
get_active_torch_device()``). Without CUDA, torch answers "AssertionError: Torch not compiled with CUDA
enabled" and Triton "RuntimeError: 0 active drivers", so such a module cannot even be imported.

:func:`install` (called by :func:`kernels.interpret.enable` when ``torch.cuda.is_available()`` is
False; never on a machine with CUDA) answers them for one small imaginary device, index 0, whose tensors
live on the CPU. Only code outside torch gets these answers: torch's own callers (which probe CUDA in
``try`` blocks, e.g. Inductor's cache key) still see no CUDA.

=================================================  =======================================================
query                                              stand-in answer
=================================================  =======================================================
``torch.cuda.get_device_properties(any)``          :data:`PROPERTIES`: :data:`SM_COUNT` = 4 SMs, sm_80, 32-wide
                                                   warps (few SMs: grids of one program per SM stay small,
                                                   and the interpreter runs programs one after the other)
``torch.cuda.get_device_capability(any)``          :data:`CAPABILITY` = (8, 0)
``torch.cuda.get_device_name(any)``                :data:`NAME`
``torch.cuda.current_device()``                    0
``torch.cuda.device_count()``                      1 (``torch.cuda.is_available()`` stays False)
``torch.cuda.device(d)``, ``device_of(t)``         a context that does nothing
``torch.cuda.set_device(d)``, ``synchronize()``    nothing
``triton.runtime.driver.active``                   :class:`StandInDriver`: device 0, the properties above as
                                                   Triton's dict, ``get_active_torch_device()`` = cpu
=================================================  =======================================================

:func:`uninstall` restores torch and Triton as they were.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase

SM_COUNT = 4
CAPABILITY = (8, 0)
NAME = "normverify CPU stand-in (no CUDA device)"


@dataclass(frozen=True)
class DeviceProperties:
    """The fields of ``torch.cuda.get_device_properties`` that launchers read, for the stand-in device."""

    name: str = NAME
    major: int = CAPABILITY[0]
    minor: int = CAPABILITY[1]
    multi_processor_count: int = SM_COUNT
    warp_size: int = 32
    total_memory: int = 8 << 30
    max_threads_per_multi_processor: int = 2048
    max_threads_per_block: int = 1024
    regs_per_multiprocessor: int = 65536
    shared_memory_per_block: int = 48 << 10
    shared_memory_per_block_optin: int = 163 << 10
    shared_memory_per_multiprocessor: int = 164 << 10
    L2_cache_size: int = 40 << 20
    is_integrated: bool = False
    is_multi_gpu_board: bool = False


PROPERTIES = DeviceProperties()


class _NoDeviceContext(contextlib.AbstractContextManager):
    """``torch.cuda.device(d)`` / ``device_of(t)``: selecting the one stand-in device changes nothing."""

    def __init__(self, device: object = None) -> None:
        self.idx = 0

    def __exit__(self, *exc_info) -> bool:
        return False


class _StandInUtils:
    @staticmethod
    def get_device_properties(device: object = None) -> dict[str, int]:
        return {"max_shared_mem": PROPERTIES.shared_memory_per_block_optin, "max_num_regs": 65536,
                "multiprocessor_count": SM_COUNT, "warpSize": PROPERTIES.warp_size, "sm_clock_rate": 1_410_000,
                "mem_clock_rate": 1_215_000, "mem_bus_width": 5120}


class StandInDriver(DriverBase):
    """``triton.runtime.driver.active`` without a GPU: host queries answered, nothing compiled or launched."""

    utils = _StandInUtils()

    @classmethod
    def is_active(cls) -> bool:
        return False  # never chosen by Triton itself; installed by set_active

    def map_python_to_cpp_type(self, ty: str) -> str:
        raise NotImplementedError("the CPU stand-in driver launches nothing (kernels.cuda_stand_ins)")

    def get_current_target(self) -> GPUTarget:
        return GPUTarget("cuda", CAPABILITY[0] * 10 + CAPABILITY[1], PROPERTIES.warp_size)

    def get_active_torch_device(self) -> torch.device:
        return torch.device("cpu")

    def get_benchmarker(self):
        raise NotImplementedError("no GPU to benchmark on (kernels.cuda_stand_ins)")

    def get_current_device(self) -> int:
        return 0

    def set_current_device(self, device: object) -> None:
        pass

    def get_current_stream(self, device: object = None) -> int:
        return 0

    def get_device_capability(self, device: object = None) -> tuple[int, int]:
        return CAPABILITY

    def get_device_interface(self):
        return torch.cuda


def get_device_properties(device: object = None) -> DeviceProperties:
    return PROPERTIES


def get_device_capability(device: object = None) -> tuple[int, int]:
    return CAPABILITY


def get_device_name(device: object = None) -> str:
    return NAME


def current_device() -> int:
    return 0


def device_count() -> int:
    return 1


def set_device(device: object) -> None:
    pass


def synchronize(device: object = None) -> None:
    pass


class device_of(_NoDeviceContext):  # distinct from device: torch._dynamo keys rules on these objects
    pass


# One distinct object per name: torch._dynamo keys its tracing rules on the function objects of torch.cuda.
_TORCH_CUDA: dict[str, object] = {
    "get_device_properties": get_device_properties, "get_device_capability": get_device_capability,
    "get_device_name": get_device_name, "current_device": current_device, "device_count": device_count,
    "device": _NoDeviceContext, "device_of": device_of, "set_device": set_device, "synchronize": synchronize,
}
_saved: dict[str, object] = {}
_TORCH_DIR = str(Path(torch.__file__).parent)


def _outside_torch(name: str, original: Callable, stand_in: Callable) -> Callable:
    """``stand_in`` for a kernel's host code; ``original`` (no CUDA: an error) for torch's own callers, which
    probe CUDA in try blocks (Inductor's cache key reads the device's properties when they can be had)."""

    def query(*args, **kwargs):
        if sys._getframe(1).f_code.co_filename.startswith(_TORCH_DIR):
            return original(*args, **kwargs)
        return stand_in(*args, **kwargs)

    query.__name__ = query.__qualname__ = name
    query.__doc__ = f"torch.cuda.{name} outside torch on a machine without CUDA: {stand_in.__name__} of the stand-in."
    return query


def _no_triton_driver() -> bool:
    try:
        triton.runtime.driver.active  # noqa: B018  (the property creates the driver or raises)
    except RuntimeError:
        return True
    return False


def install() -> None:
    """Answer the host queries above on a machine without CUDA (idempotent; nothing happens with CUDA)."""
    if _saved or torch.cuda.is_available():
        return
    for name, stand_in in _TORCH_CUDA.items():
        _saved[name] = original = getattr(torch.cuda, name)
        setattr(torch.cuda, name, stand_in if isinstance(stand_in, type) else _outside_torch(name, original, stand_in))
    if _no_triton_driver():
        _saved["triton driver"] = True
        triton.runtime.driver.set_active(StandInDriver())


def uninstall() -> None:
    """Undo :func:`install`."""
    if _saved.pop("triton driver", False):
        triton.runtime.driver._active = None
    for name, original in _saved.items():
        setattr(torch.cuda, name, original)
    _saved.clear()


def installed() -> bool:
    return bool(_saved)


__all__ = ["CAPABILITY", "NAME", "PROPERTIES", "SM_COUNT", "DeviceProperties", "StandInDriver", "install",
           "installed", "uninstall"]
