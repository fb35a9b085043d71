"""Fused residual add + norm kernels behind one interface, and their float64 references.

Kinds (docs/validate-your-kernel.md):

    add_layernorm          fn(x, residual, weight, bias, eps)          -> (y, residual_out)
    add_rmsnorm            fn(x, residual, weight, eps)                -> (y, residual_out)
    dropout_add_layernorm  fn(x, residual, weight, bias, eps, p, seed) -> (y, residual_out)

residual_out = h = residual + x (x dropped out first), kept in the residual's dtype or, when the kernel declares
``residual_dtype="float32"``, in float32; y = N(residual_out) in x's dtype. Every call goes through
:mod:`core.guard`; a kernel that does not return the pair fails the claim being checked (AssertionError).
The references are proofs.fused_oracles at the residual_out the kernel returned (the contract: y normalizes
exactly the residual stream the next layer receives), whose own accuracy the residual_out claim checks.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import torch

from core import guard
from core.kernel import STORAGE_BACKWARD
from core.registry import Kernel
from proofs import fused_oracles
from properties.norms import as_float64, effective_weight, output_dtype

NORM_OF = {"add_layernorm": "layernorm", "add_rmsnorm": "rmsnorm", "dropout_add_layernorm": "layernorm"}


def norm_kind(kernel: Kernel) -> str:
    """The norm a fused kernel applies: "layernorm" or "rmsnorm"."""
    return NORM_OF[kernel.kind]


def norm_view(kernel: Kernel, h: torch.Tensor, x: torch.Tensor) -> Kernel | None:
    """The kernel as a kernel of its norm's kind, whose declared conventions' models (properties.diagnosis) are
    evaluated at residual_out h; None when it declares no convention beyond the storage-precision backward (which
    properties.fused_tolerance applies) or when h is not in y's dtype (the models round to one storage dtype)."""
    if h.dtype != x.dtype or not [c for c in kernel.conventions if c != STORAGE_BACKWARD]:
        return None
    return dataclasses.replace(kernel, kind=norm_kind(kernel), residual_dtype="storage", in_place=())


def has_bias(kernel: Kernel) -> bool:
    return norm_kind(kernel) == "layernorm"


def arguments(kernel: Kernel, x, residual, weight, bias, eps: float, p: float | None = None,
              seed: int | None = None) -> tuple:
    """The positional arguments of the kernel's contract."""
    if kernel.kind == "add_rmsnorm":
        return (x, residual, weight, eps)
    if kernel.kind == "dropout_add_layernorm":
        return (x, residual, weight, bias, eps, p, seed)
    return (x, residual, weight, bias, eps)


def residual_dtype(kernel: Kernel, residual: torch.Tensor) -> torch.dtype:
    """The dtype residual_out must have: float32 when declared, else the residual's."""
    return torch.float32 if kernel.residual_dtype == "float32" else residual.dtype


def forward(kernel: Kernel, x: torch.Tensor, residual: torch.Tensor, weight=None, bias=None, eps: float = 1e-5,
            p: float | None = None, seed: int | None = None, allow_nonfinite: bool = False, any_dtype: bool = False
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, residual_out) from the kernel; y is checked like a norm's output (shape, dtype, device, finite; its dtype
    not with ``any_dtype``: for checks about something else, as properties.norms.forward's)."""
    args = arguments(kernel, x, residual, weight, bias, eps, p, seed)
    out = guard.limited(kernel, lambda: kernel.fn(*args))
    if not (isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(t, torch.Tensor) for t in out)):
        what = f"a {type(out).__name__} of {len(out)}" if isinstance(out, (tuple, list)) else type(out).__name__
        raise AssertionError(f"kernel {kernel.name} returned {what}, not the pair (y, residual_out) of its contract")
    # the output checks of every norm's y (shape and device of x, the output-dtype rule's dtype: x's by torch's rule,
    # whatever the weight's; finite for finite inputs)
    y = guard.call(SimpleNamespace(name=kernel.name, fn=lambda: out[0]), like=x, allow_nonfinite=allow_nonfinite,
                   dtype=guard.ANY_DTYPE if any_dtype else output_dtype(kernel, x, weight))
    return y, out[1]


def vjp(kernel: Kernel, example: dict, dy: torch.Tensor, dh: torch.Tensor, *, same_tensors: bool = False,
        allow_nonfinite: bool = False, any_dtype: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(residual_out, {"x", "residual", "weight", "bias": gradient}) for upstream gradients dy of y and dh of
    residual_out, through autograd (L = <y, dy> + <residual_out, dh>, so exactly dy and dh flow back).

    Gradients are taken with respect to copies of the inputs unless ``same_tensors`` (as properties.norms.vjp);
    ``any_dtype``: y's dtype is not judged (:func:`forward`)."""
    names = ["x", "residual", "weight"] + (["bias"] if has_bias(kernel) else [])
    leaves = {name: (example[name] if same_tensors else example[name].detach().clone()).requires_grad_(True)
              for name in names if example.get(name) is not None}
    try:
        with torch.enable_grad():
            y, h = forward(kernel, leaves["x"], leaves["residual"], leaves.get("weight"), leaves.get("bias"),
                           example["eps"], example.get("p"), example.get("seed"), allow_nonfinite, any_dtype)
            loss = (y.float() * dy.float()).sum() + (h.float() * dh.to(h.dtype).float()).sum()
            grads = guard.grad(kernel, loss, list(leaves.values()), torch.ones((), device=loss.device),
                               allow_nonfinite=allow_nonfinite)
    finally:
        if same_tensors:
            for leaf in leaves.values():
                leaf.requires_grad_(False)
    return h.detach(), dict(zip(leaves, grads, strict=True))


def gammas(kernel: Kernel, weight, bias) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(gamma, beta) in float64: the effective weight, and the bias (None for RMSNorm)."""
    return effective_weight(kernel, weight), as_float64(bias) if has_bias(kernel) else None


def reference(kernel: Kernel, h: torch.Tensor, weight, bias, eps: float) -> np.ndarray:
    """N(h) in float64 at the residual_out h."""
    gamma, beta = gammas(kernel, weight, bias)
    h64 = as_float64(h)
    return fused_oracles.add_norm(h64, np.zeros_like(h64), gamma, beta, eps, norm_kind(kernel))[0]
