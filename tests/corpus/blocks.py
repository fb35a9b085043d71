"""A LayerNorm made 'contractive by construction' (rstd clamped to at most 1, as a stabilization hack would):
its Jacobian no longer has norm 1/sqrt(sigma^2 + eps) on rows of variance below 1, so it fails ln.contraction,
and its Post-LN block with W = aI no longer has the Jacobian J_{eps/(1+a)^2} (blocks.jacobians)."""

from __future__ import annotations

import torch

from core.kernel import Kernel


def _clamped(x, weight, bias, eps):
    centred = x.float() - x.float().mean(-1, keepdim=True)
    rstd = torch.rsqrt(centred.square().mean(-1, keepdim=True) + eps).clamp(max=1.0)
    y = centred * rstd
    y = y if weight is None else y * weight.float()
    return (y if bias is None else y + bias.float()).to(x.dtype)


LN_RSTD_CLAMPED = Kernel("ln_rstd_clamped", "layernorm", _clamped, spec="tests/corpus/blocks.py:LN_RSTD_CLAMPED",
                         description="rstd clamped to <= 1: ln.contraction, blocks.jacobians")
