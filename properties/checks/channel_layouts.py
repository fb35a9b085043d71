"""The gradients of a kernel over x [N, C, *] with x in channels-last memory (claims bn.layout_invariance,
in.layout_invariance, gn.layout_invariance, cln.layout_invariance): the backward of the channels-last call against
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


def channels_last_gradients(kernel, last: dict, contiguous: dict, dy: torch.Tensor,
                            bounds: dict[str, np.ndarray]) -> list[outcome.Comparison]:
    """dx, dweight, dbias of the call on ``last`` (x channels-last) vs those of the call on ``contiguous`` (x
    contiguous), dy contiguous in both, each within twice its bound; none for a kernel without a backward (autograd
    gives no gradient through it: its forward is all there is to compare)."""
    if not discover(kernel).backward:
        return []
    upstream = {"y": dy.contiguous()}
    _, laid_out = norms.gradients(kernel, last, upstream, allow_nonfinite=True, any_dtype=True)
    _, plain = norms.gradients(kernel, contiguous, upstream, allow_nonfinite=True, any_dtype=True)
    return [outcome.compare(g, plain[name], 2 * bounds[name], f"d{name}: channels-last vs contiguous x")
            for name, g in laid_out.items()]
