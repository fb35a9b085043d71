"""The gradients of a kernel over x [N, C, *] with x in a layout other than contiguous (claims bn.layout_invariance,
in.layout_invariance, gn.layout_invariance, cln.layout_invariance): the backward of the call on x as laid out against
the backward of the contiguous call, for one contiguous dy (dy's own layouts are test_strided_upstream_gradient's).

A backward that addresses x or its saved x_hat with contiguous (NCHW) strides while the forward reads the strides
right gives the right y and wrong gradients (pytorch/pytorch#175189: BatchNorm's backward on channels-last MPS
tensors, weight.grad orders of magnitude off; #111824, linkedin/Liger-Kernel#883: GroupNorm's). Both calls compute
one value, each within one bound of it: they agree within twice the gradient's bound."""

from __future__ import annotations

import numpy as np
import torch

from core.capabilities import discover
from properties import norms, outcome


def layout_of(x: torch.Tensor) -> str:
    """x's layout in words, for the messages: channels-last, or its strides and storage offset."""
    if x.dim() >= 3 and x.stride(1) == 1 < x.shape[1]:
        return "channels-last"
    return f"strides {tuple(x.stride())}, storage offset {x.storage_offset()}"


def input_layout_gradients(kernel, laid_out: dict, contiguous: dict, dy: torch.Tensor,
                           bounds: dict[str, np.ndarray]) -> list[outcome.Comparison]:
    """dx, dweight, dbias of the call on ``laid_out`` (x in its layout) vs those of the call on ``contiguous`` (x
    contiguous), dy contiguous in both, each within twice its bound; none for a kernel without a backward (autograd
    gives no gradient through it: its forward is all there is to compare)."""
    if not discover(kernel).backward:
        return []
    upstream = {"y": dy.contiguous()}
    layout = layout_of(laid_out["x"])
    _, got = norms.gradients(kernel, laid_out, upstream, allow_nonfinite=True, any_dtype=True)
    _, plain = norms.gradients(kernel, contiguous, upstream, allow_nonfinite=True, any_dtype=True)
    return [outcome.compare(g, plain[name], 2 * bounds[name], f"d{name}: x of {layout} vs contiguous x")
            for name, g in got.items()]
