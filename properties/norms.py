"""LayerNorm and RMSNorm kernels behind one interface, and their float64 references.

Each claim family is written once for both kinds: :func:`forward` and :func:`vjp` call the
kernel (always through :mod:`core.guard`), :func:`reference` and :func:`reference_vjp` give the
float64 oracle of :mod:`proofs.oracles` on the same rounded inputs. The effective scale is
``kernel.weight_offset + weight`` (docs/ARCHITECTURE.md, weight conventions); RMSNorm has no bias.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core import boundary, guard
from core.capabilities import discover
from core.registry import Kernel
from proofs import oracles


def arguments(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
              eps: float) -> tuple:
    """The positional arguments of the kernel's contract: (x, weight, bias, eps) or (x, weight, eps)."""
    return (x, weight, eps) if kernel.kind == "rmsnorm" else (x, weight, bias, eps)


def output_dtype(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None) -> torch.dtype:
    """The dtype the kernel's output must have (core.kernel.OUTPUT_DTYPE_RULES): x's (torch's rule, the default),
    torch.promote_types(x, weight) (``output_dtype="promoted"``) or the weight's (``"weight"``); x's without a
    weight."""
    if weight is None or kernel.output_dtype == "input":
        return x.dtype
    return torch.promote_types(x.dtype, weight.dtype) if kernel.output_dtype == "promoted" else weight.dtype


def forward(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
            eps: float = 1e-5, allow_nonfinite: bool = False, any_dtype: bool = False) -> torch.Tensor:
    """The kernel's output for x (guarded: faults become one-line KernelFault errors; an output dtype other than
    :func:`output_dtype` is a ``dtype`` fault, unless ``any_dtype``: for checks about something else, which compare
    the kernel with itself)."""
    return guard.call(kernel, *arguments(kernel, x, weight, bias, eps), like=x, allow_nonfinite=allow_nonfinite,
                      dtype=guard.ANY_DTYPE if any_dtype else output_dtype(kernel, x, weight))


def vjp(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
        dy: torch.Tensor, *, same_tensors: bool = False, allow_nonfinite: bool = False,
        any_dtype: bool = False) -> dict[str, torch.Tensor]:
    """The kernel's backward for upstream gradient dy: {"x": dx, "weight": dweight, "bias": dbias} (present ones).

    Parameters the kernel declares no gradient for (``kernel.no_gradient``, a frozen weight) are passed but not
    differentiated, and absent from the result. The gradients are taken with respect to copies of x, weight and
    bias, unless ``same_tensors``: then the
    given tensors themselves are the autograd leaves for the call (so that a kernel writing into them
    writes into the caller's tensors), and are given back without requires_grad. ``allow_nonfinite``: NaN/inf
    values and gradients are not a fault (for checks about something else); ``any_dtype``: nor is the output's dtype.
    """
    given = {"x": x, "weight": weight, "bias": bias if kernel.kind == "layernorm" else None}
    leaves = {name: (t if same_tensors else t.detach().clone()).requires_grad_(name not in kernel.no_gradient)
              for name, t in given.items() if t is not None}
    differentiated = {name: leaf for name, leaf in leaves.items() if leaf.requires_grad}
    try:
        with torch.enable_grad():
            y = forward(kernel, leaves["x"], leaves.get("weight"), leaves.get("bias"), eps, allow_nonfinite, any_dtype)
            # a copy unless same_tensors: a kernel that writes its dX into dy (Liger's in_place=True) must not
            # change the dy the caller's reference is computed from; inputs_unmodified is the claim about that
            upstream = dy if same_tensors else copy_with_strides(dy)
            grads = guard.grad(kernel, y, list(differentiated.values()), upstream, allow_nonfinite=allow_nonfinite)
    finally:
        if same_tensors:
            for leaf in leaves.values():
                leaf.requires_grad_(False)
    return dict(zip(differentiated, grads, strict=True))


def copy_with_strides(t: torch.Tensor) -> torch.Tensor:
    """A copy of t with t's strides (``clone()`` makes a gapped view, such as every other column, contiguous)."""
    span = 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True)) if t.numel() else 0
    copy = torch.as_strided(t.new_zeros(span), t.shape, t.stride())
    return copy.copy_(t)


def representable(values: np.ndarray, dtype: torch.dtype) -> bool:
    """Whether every exact value fits the storage dtype, |v| <= its largest finite number.

    Where one does not (a zero row with eps = 1e-12 has Jacobian entries ~ 1/sqrt(eps) = 1e6, beyond
    float16's 65504), inf is the correctly rounded result, and no claim about those values can be checked
    in that dtype: the strategies leave such examples out rather than call the kernel wrong.
    """
    return bool(np.all(np.abs(values) <= torch.finfo(dtype).max))


def require_backward(kernel: Kernel) -> None:
    """Skip the calling test, with the probed reason, when autograd gives no gradient through the kernel."""
    caps = discover(kernel)
    if not caps.backward:
        pytest.skip(caps.backward_reason)


# a kernel-side tensor as float64 numpy on the host: the one crossing to the oracle (core.boundary)
as_float64 = boundary.to_oracle


def effective_weight(kernel: Kernel, weight: torch.Tensor | None) -> np.ndarray | None:
    """gamma = weight_offset + weight in float64 (None: no scaling, gamma = 1)."""
    return None if weight is None else kernel.weight_offset + as_float64(weight)


def reference(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
              eps: float) -> np.ndarray:
    """The float64 oracle output on the kernel's (rounded) inputs."""
    gamma = effective_weight(kernel, weight)
    if kernel.kind == "rmsnorm":
        return oracles.rmsnorm(as_float64(x), gamma, eps)
    return oracles.layernorm(as_float64(x), gamma, as_float64(bias), eps)


def reference_vjp(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None, eps: float,
                  dy: torch.Tensor) -> dict[str, np.ndarray]:
    """The float64 oracle gradients {"x", "weight", "bias"} (weight/bias summed over rows; no weight without one)."""
    gamma = effective_weight(kernel, weight)
    vjp_of = oracles.rmsnorm_vjp if kernel.kind == "rmsnorm" else oracles.layernorm_vjp
    grads = dict(zip(("x", "weight", "bias"), vjp_of(as_float64(x), gamma, eps, as_float64(dy)), strict=False))
    return {name: g for name, g in grads.items() if g is not None}


def reference_jacobian(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> np.ndarray:
    """dy/dx per row, [..., d, d], in float64."""
    gamma = effective_weight(kernel, weight)
    jacobian = oracles.rmsnorm_jacobian if kernel.kind == "rmsnorm" else oracles.layernorm_jacobian
    return jacobian(as_float64(x), gamma, eps)


def reference_spectral_norm(kernel: Kernel, x: torch.Tensor, eps: float) -> np.ndarray:
    """The derived ||dy/dx||_2 per row for gamma = 1."""
    norm = oracles.rmsnorm_spectral_norm if kernel.kind == "rmsnorm" else oracles.layernorm_spectral_norm
    return np.asarray(norm(as_float64(x), eps))
