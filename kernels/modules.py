"""``nn.Module`` versions with the constructor and call signatures of ``torch.nn.LayerNorm``/``RMSNorm``.

``normalized_shape`` may name several trailing dimensions; they are normalized together, as by torch
(the kernels see them flattened into one row of length prod(normalized_shape)).
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import nn

from kernels import functional


def _as_shape(normalized_shape: int | tuple[int, ...] | list[int] | torch.Size) -> tuple[int, ...]:
    if isinstance(normalized_shape, numbers.Integral):
        return (int(normalized_shape),)
    return tuple(int(n) for n in normalized_shape)


def _normalized_rows(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """x with its trailing ``normalized_shape`` dimensions flattened into one (a view when possible)."""
    shape = module.normalized_shape
    if x.dim() < len(shape) or tuple(x.shape[x.dim() - len(shape):]) != shape:
        raise ValueError(f"{type(module).__name__}: expected input with trailing dimensions {list(shape)}, "
                         f"got shape {list(x.shape)}")
    return x.reshape(*x.shape[:x.dim() - len(shape)], math.prod(shape))


def _flat(parameter: torch.Tensor | None) -> torch.Tensor | None:
    return None if parameter is None else parameter.reshape(-1)


class LayerNorm(nn.Module):
    """Drop-in for ``torch.nn.LayerNorm`` running :func:`kernels.functional.layer_norm`."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None) -> None:
        super().__init__()
        self.normalized_shape = _as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        factory = {"device": device, "dtype": dtype}
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(self.normalized_shape, **factory))
            self.bias = nn.Parameter(torch.zeros(self.normalized_shape, **factory)) if bias else None
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        y = functional.layer_norm(_normalized_rows(self, input), _flat(self.weight), _flat(self.bias), self.eps)
        return y.view(input.shape)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class RMSNorm(nn.Module):
    """Drop-in for ``torch.nn.RMSNorm``; ``eps=None`` means ``torch.finfo(input.dtype).eps``, as in torch."""

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True,
                 device=None, dtype=None) -> None:
        super().__init__()
        self.normalized_shape = _as_shape(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        eps = torch.finfo(input.dtype).eps if self.eps is None else self.eps
        return functional.rms_norm(_normalized_rows(self, input), _flat(self.weight), eps).view(input.shape)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
