"""A broken LayerNorm whose bug is in how a 3-D input is flattened into rows."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from core.registry import Kernel


def layernorm_sequence_first_flatten(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                                     eps: float) -> torch.Tensor:
    """3-D input flattened wrongly: a kernel written for Megatron's sequence-first [S, B, H] layout flattens
    [B, S, H] as ``x.transpose(0, 1).reshape(-1, H)`` and reshapes the rows straight back to [B, S, H]: every
    row is normalized correctly but lands in another row's place (right for 2-D input, B = 1 or S = 1).
    Must fail ln.row_independence ([B, S, H] == [B*S, H])."""
    d = x.shape[-1]
    rows = x.transpose(0, 1).reshape(-1, d) if x.dim() == 3 else x.reshape(-1, d)
    return F.layer_norm(rows, (d,), weight, bias, eps).reshape(x.shape)


LN_SEQUENCE_FIRST_FLATTEN = Kernel(
    "ln_sequence_first_flatten", "layernorm", layernorm_sequence_first_flatten,
    spec="tests/corpus/rows.py:LN_SEQUENCE_FIRST_FLATTEN",
    description=" ".join(layernorm_sequence_first_flatten.__doc__.split()))
