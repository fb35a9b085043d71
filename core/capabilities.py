"""What a kernel under test can do, found by probing it on a tiny input.

Discovered once per kernel (cached), unless declared on the :class:`~core.registry.Kernel`:

- ``device``: CUDA when it is available and the kernel computes there, else CPU
  (a declared ``Kernel.device`` wins);
- ``dtypes``: the storage dtypes among float32, float16 and bfloat16 that the kernel accepts and
  returns unchanged (a declared ``Kernel.dtypes`` wins). Whether the values are right is not
  judged here: that is what the conformance claims check;
- ``backward``: autograd gives a gradient of the output with respect to x (and weight, bias);
- ``double_backward``: that gradient is itself differentiable, which the matrix-free spectral
  norm needs for its Jacobian-vector products (double VJP).

A claim that needs a capability the kernel lacks is skipped with ``*_reason``, never passed.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch

from core import guard
from core.errors import one_line
from core.kernel import Kernel

PROBED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_PROBE_SHAPE = (2, 8)
_PROBE_TIMEOUT_S = guard.DEFAULT_TIMEOUT_S  # NORMVERIFY_CALL_TIMEOUT, normverify run --timeout


@dataclass(frozen=True)
class Capabilities:
    """The probed (or declared) capabilities of one kernel; the reasons say why one is missing."""

    device: str
    dtypes: tuple[torch.dtype, ...]
    backward: bool
    double_backward: bool
    backward_reason: str = ""
    double_backward_reason: str = ""
    dtype_reasons: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict:
        return {
            "device": self.device,
            "dtypes": [dtype_name(d) for d in self.dtypes],
            "backward": self.backward,
            "double_backward": self.double_backward,
            "reasons": {**self.dtype_reasons,
                        **({"backward": self.backward_reason} if self.backward_reason else {}),
                        **({"double_backward": self.double_backward_reason} if self.double_backward_reason else {})},
        }


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float16`` -> ``"float16"``."""
    return str(dtype).removeprefix("torch.")


def probe_arguments(kernel: Kernel, x: torch.Tensor) -> tuple:
    """The kernel's positional arguments for input x: unit weight, zero bias, eps 1e-5, p 0.5, seed 0."""
    d = x.shape[-1]
    if kernel.kind == "dropout":
        return (x, 0.5, 0)
    weight = torch.full((d,), 1.0 - kernel.weight_offset, dtype=x.dtype, device=x.device)
    if kernel.kind == "rmsnorm":
        return (x, weight, 1e-5)
    return (x, weight, torch.zeros(d, dtype=x.dtype, device=x.device), 1e-5)


def _probe_input(dtype: torch.dtype, device: str) -> torch.Tensor:
    values = torch.arange(_PROBE_SHAPE[0] * _PROBE_SHAPE[1], dtype=torch.float32).reshape(_PROBE_SHAPE)
    return torch.sin(values).to(dtype=dtype, device=device)


def _forward_problem(kernel: Kernel, dtype: torch.dtype, device: str) -> str:
    """Why the kernel cannot compute in ``dtype`` on ``device`` ('' when it can)."""
    x = _probe_input(dtype, device)
    try:
        guard.call(kernel, *probe_arguments(kernel, x), like=x, timeout=_PROBE_TIMEOUT_S)
    except guard.KernelFault as fault:
        return str(fault)
    return ""


def _backward_problems(kernel: Kernel, dtype: torch.dtype, device: str) -> tuple[str, str]:
    """Why autograd gives no gradient through the kernel, and why no second derivative ('' when it does).

    The first derivative is probed with a plain upstream gradient, as a training step passes it: a kernel
    that writes into it (a bug of its own, ``inputs_unmodified``) still has a backward to check.
    """

    def derivative(create_graph: bool) -> tuple[torch.Tensor, torch.Tensor]:
        x = _probe_input(dtype, device).requires_grad_(True)
        y = kernel.fn(*probe_arguments(kernel, x))
        upstream = torch.ones_like(y, requires_grad=create_graph)
        return upstream, torch.autograd.grad(y, x, upstream, create_graph=create_graph)[0]

    try:  # under the kernel's time limit: a hung backward must not hang the run
        _, dx = guard.limited(kernel, lambda: derivative(False), timeout=_PROBE_TIMEOUT_S)
    except guard.KernelFault as fault:
        return f"no backward: autograd through {kernel.name} failed: {fault}", "no backward"
    if dx is None or not bool(torch.isfinite(dx).all()):
        return f"no backward: autograd through {kernel.name} gave no finite gradient", "no backward"
    try:
        upstream, dx = guard.limited(kernel, lambda: derivative(True), timeout=_PROBE_TIMEOUT_S)
        (second,) = torch.autograd.grad(dx, upstream, torch.ones_like(dx), allow_unused=True)
    except Exception as error:
        return "", f"backward not differentiable: {one_line(error)}"
    if second is None:
        return "", "backward not differentiable: its gradient does not depend on the upstream gradient in autograd"
    return "", ""


def _device(kernel: Kernel) -> str:
    if kernel.device is not None:
        return kernel.device
    if torch.cuda.is_available() and not _forward_problem(kernel, torch.float32, "cuda"):
        return "cuda"
    return "cpu"


@functools.cache
def discover(kernel: Kernel) -> Capabilities:
    """Probe ``kernel`` (once; the result is cached per kernel)."""
    device = _device(kernel)
    reasons: dict[str, str] = {}
    if kernel.dtypes is not None:
        dtypes = tuple(kernel.dtypes)
    else:
        found = []
        for dtype in PROBED_DTYPES:
            problem = _forward_problem(kernel, dtype, device)
            if problem:
                reasons[dtype_name(dtype)] = problem
            else:
                found.append(dtype)
        dtypes = tuple(found)
    probe_dtype = torch.float32 if torch.float32 in dtypes or not dtypes else dtypes[0]
    backward_reason, double_reason = _backward_problems(kernel, probe_dtype, device)
    return Capabilities(device=device, dtypes=dtypes, backward=not backward_reason,
                        double_backward=not double_reason, backward_reason=backward_reason,
                        double_backward_reason=double_reason, dtype_reasons=reasons)
