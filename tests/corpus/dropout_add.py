"""Broken fused dropout + add + LayerNorm kernels (kind dropout_add_layernorm): residual_out = residual + dropout(x)
(mask of the seed, i.i.d. Bernoulli(1-p) per element), y = LN(residual_out), with exactly one thing broken.

    DROP_ADD_NO_RESCALE          kept values not divided by 1 - p              -> drop_add_ln.values
    DROP_ADD_ONE_MASK_FOR_ROWS   every row gets the same mask (a per-column mask) -> drop_add_ln.variance_bias
    DROP_ADD_NORM_WITHOUT_DROPOUT y = LN(residual + x): the dropout skipped for y -> drop_add_ln.forward
"""

from __future__ import annotations

import torch

from core.kernel import Kernel

SPEC = "tests/corpus/dropout_add.py:"


def _mask(shape, p: float, seed: int, one_for_rows: bool) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    if one_for_rows:
        return (torch.rand(shape[-1], generator=generator) >= p).expand(shape)
    return torch.rand(shape, generator=generator) >= p


def _make(bug: str):
    def fn(x, residual, weight, bias, eps, p, seed):
        kept = _mask(x.shape, p, seed, bug == "rows").to(x.device)
        scale = 1.0 if bug == "rescale" else 1.0 / (1.0 - p)
        h = (residual.float() + torch.where(kept, x.float() * scale, 0.0)).to(residual.dtype)
        normalized = (residual.float() + x.float()) if bug == "skipped" else h.float()
        y = torch.nn.functional.layer_norm(normalized, x.shape[-1:], None if weight is None else weight.float(),
                                           None if bias is None else bias.float(), eps)
        return y.to(x.dtype), h

    return fn


DROP_ADD_NO_RESCALE = Kernel("drop_add_no_rescale", "dropout_add_layernorm", _make("rescale"),
                             spec=f"{SPEC}DROP_ADD_NO_RESCALE",
                             description="kept values not rescaled by 1/(1-p): drop_add_ln.values")
DROP_ADD_ONE_MASK_FOR_ROWS = Kernel("drop_add_one_mask_for_rows", "dropout_add_layernorm", _make("rows"),
                                    spec=f"{SPEC}DROP_ADD_ONE_MASK_FOR_ROWS",
                                    description="the same mask in every row: drop_add_ln.variance_bias")
DROP_ADD_NORM_WITHOUT_DROPOUT = Kernel("drop_add_norm_without_dropout", "dropout_add_layernorm", _make("skipped"),
                                       spec=f"{SPEC}DROP_ADD_NORM_WITHOUT_DROPOUT",
                                       description="y normalizes residual + x, not residual_out: drop_add_ln.forward")
DROP_ADD_CORRECT = Kernel("drop_add_correct", "dropout_add_layernorm", _make(""), spec=f"{SPEC}DROP_ADD_CORRECT",
                          description="the same implementation, unbroken: the control")
