"""How a kernel that ignores strides reads a tensor: from its first element on, ``ptr + i`` for the i-th element
in row-major order, as if it were contiguous. Right only for a contiguous tensor; for a strided view it reads the
wrong elements, and past the end of the tensor's memory (a transposed copy's, or the stride-0 expansion autograd
hands as a sum's upstream gradient) whatever lies there: zeros here."""

from __future__ import annotations

import torch


def read_as_if_contiguous(t: torch.Tensor) -> torch.Tensor:
    """t's memory from its first element, read with contiguous strides (differentiable, as torch's as_strided is):
    zeros for the elements past its storage's end."""
    available = t.untyped_storage().nbytes() // t.element_size() - t.storage_offset()
    flat = torch.as_strided(t, (min(available, t.numel()),), (1,), t.storage_offset())
    if flat.numel() < t.numel():
        flat = torch.cat([flat, flat.new_zeros(t.numel() - flat.numel())])
    return flat.view(t.shape)
