"""How a kernel that ignores strides reads a tensor: from its first element on, ``ptr + i`` for the i-th element
in row-major order, as if it were contiguous. Right only for a contiguous tensor; for a strided view it reads the
wrong elements, and past the end of the tensor's memory (a transposed copy's, or the stride-0 expansion autograd
hands as a sum's upstream gradient) whatever lies there: zeros here. A kernel that takes the row stride from
``t.stride(-2)`` reads unevenly spaced rows wrongly the same way."""

from __future__ import annotations

import torch


def read_as_if_contiguous(t: torch.Tensor) -> torch.Tensor:
    """t's memory from its first element, read with contiguous strides (differentiable, as torch's as_strided is):
    zeros for the elements past its storage's end."""
    return _read(t, torch.empty(t.shape, device="meta").stride())


def read_as_nchw_unless_dense(t: torch.Tensor) -> torch.Tensor:
    """t [N, C, *] as a kernel with two paths only, a contiguous one and a channels-last one (4-D channels_last, 5-D
    channels_last_3d), reads it: those two layouts right, any other (a permuted or transposed view, a channel slice,
    every other sample) as its memory from its first element with contiguous strides (pytorch/pytorch#63224)."""
    dense = t.is_contiguous() or (t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)) or (
        t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d))
    return t if dense else read_as_if_contiguous(t)


def read_rows_by_the_last_row_stride(t: torch.Tensor) -> torch.Tensor:
    """t (at least 2-D) read as rows of its last axis stepped by ``t.stride(-2)``, as a kernel that flattens the
    leading axes into one with that stride does: right when the rows are evenly spaced (2-D, contiguous, every other
    column), wrong for an [S, B, d] tensor viewed as [B, S, d]; zeros past the storage's end. A 1-D t is one row,
    read as it is."""
    if t.dim() < 2:
        return t.clone()
    *leading, d = t.shape
    rows = 1
    for size in leading:
        rows *= size
    return _read(t, (t.stride(-2), t.stride(-1)), (rows, d)).view(t.shape)


def _read(t: torch.Tensor, strides: tuple[int, ...], shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """t's memory from its first element read as ``shape`` (t's) with ``strides``; zeros past the storage's end."""
    shape = tuple(t.shape) if shape is None else shape
    span = 1 + sum((size - 1) * step for size, step in zip(shape, strides, strict=True)) if t.numel() else 0
    available = t.untyped_storage().nbytes() // t.element_size() - t.storage_offset()
    flat = torch.as_strided(t, (min(available, span),), (1,), t.storage_offset())
    if flat.numel() < span:
        flat = torch.cat([flat, flat.new_zeros(span - flat.numel())])
    return torch.as_strided(flat, shape, strides)
