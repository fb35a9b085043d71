"""Dropout + add + LayerNorm kernels with an explicit backward (an autograd.Function), each broken by replacing exactly
one named hook of a correct implementation (float32 two-pass statistics, rounded once; the backward recomputes the
statistics from the saved residual_out), modelled on the backward bugs of a red-team session (2026-11-27, round 5)
that escaped dropout + add + LayerNorm's gradient draws of its day (up to 4 rows of at most 1024 columns, 2-D, x's
dtype for the residual, every input requiring grad); the manifest (tests/corpus/__init__.py) lists the claims that
must catch each.

    DROP_ADD_DWEIGHT_FIRST_DIMENSION   dweight and dbias summed over x.shape[0] rows only (a launcher taking rows =
                                       x.shape[0]): wrong on every [B, S, d] x              -> drop_add_ln.gradient
    DROP_ADD_RESIDUAL_GRAD_GATED_ON_X  dresidual returned only when x requires grad (the backward reads
                                       ctx.needs_input_grad[0] for both inputs)             -> drop_add_ln.gradient
    DROP_ADD_RESIDUAL_GRAD_IN_X_DTYPE  beside a float32 residual (flash-attention's residual_in_fp32), dresidual
                                       rounded through x's 16-bit dtype                    -> drop_add_ln.gradient
    DROP_ADD_DWEIGHT_FLOOR_ROWS_PER_PROGRAM  dweight/dbias from a persistent grid of 108 programs of rows // 108 rows
                                       each (Liger-Kernel's rows_per_program with a floor, not a ceiling): the last
                                       rows % 108 rows left out                            -> drop_add_ln.gradient
    DROP_ADD_BACKWARD_BLOCK_MEANS_ABOVE_1024  the backward's row means of g and g x_hat per block of 1024 columns
                                       (a tiled backward per hidden size, as flash-attention's ln_bwd instances,
                                       never combining its blocks)                         -> drop_add_ln.gradient
    DROP_ADD_CONTROL                   the implementation unbroken: correct
"""

from __future__ import annotations

import torch

from core.kernel import Kernel

SPEC = "tests/corpus/explicit_backward.py:"

# --- the correct hooks ------------------------------------------------------------------------------------------


def stats(hf: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """LayerNorm's mean and rstd of float32 rows, two-pass."""
    mean = hf.mean(-1, keepdim=True)
    return mean, torch.rsqrt((hf - mean).square().mean(-1, keepdim=True) + eps)


def affine(xhat: torch.Tensor, weight, bias) -> torch.Tensor:
    y = xhat if weight is None else xhat * weight.float()
    return y if bias is None else y + bias.float()


def input_grad(g: torch.Tensor, xhat: torch.Tensor, rstd: torch.Tensor, rms: bool) -> torch.Tensor:
    """rstd (g - mean(g) - x_hat mean(g x_hat)), g = dy * weight (RMSNorm: without mean(g))."""
    c2 = (g * xhat).mean(-1, keepdim=True)
    c1 = 0.0 if rms else g.mean(-1, keepdim=True)
    return rstd * (g - c1 - xhat * c2)


def param_grads(dy, xhat, weight, bias, needs_w: bool, needs_b: bool):
    """dweight = sum over every row of dy x_hat, dbias = sum of dy (None where not needed)."""
    d = dy.shape[-1]
    dw = (dy * xhat).reshape(-1, d).sum(0) if (weight is not None and needs_w) else None
    db = dy.reshape(-1, d).sum(0) if (bias is not None and needs_b) else None
    return dw, db


def residual_grad(t: torch.Tensor, residual_dtype: torch.dtype, x_dtype: torch.dtype) -> torch.Tensor:
    """dresidual rounded once to the residual's dtype."""
    return t.to(residual_dtype)


DEFAULT = {"input_grad": input_grad, "param_grads": param_grads, "residual_grad": residual_grad, "gate": None}


class DropoutAddLayerNorm(torch.autograd.Function):
    """residual_out = residual + x m / (1 - p) (m the seeded mask; every element at p = 0) in the promoted dtype of x
    and the residual, rounded once; y = LayerNorm(residual_out) in x's dtype; an explicit backward through ``hooks``
    (DEFAULT's, some replaced)."""

    @staticmethod
    def forward(ctx, x, residual, weight, bias, eps, keep, p, hooks):
        h_dtype = torch.promote_types(x.dtype, residual.dtype)
        branch = x.float() if keep is None else torch.where(keep, x.float() / (1.0 - p), 0.0)
        h = (residual.float() + branch).to(h_dtype)
        mean, rstd = stats(h.float(), eps)
        y = affine((h.float() - mean) * rstd, weight, bias).to(x.dtype)
        ctx.save_for_backward(h, weight, bias, keep)
        ctx.eps, ctx.hooks, ctx.p, ctx.x_dtype, ctx.r_dtype = eps, hooks, p, x.dtype, residual.dtype
        return y, h

    @staticmethod
    def backward(ctx, dy, dh):
        h, weight, bias, keep = ctx.saved_tensors
        hooks = ctx.hooks
        mean, rstd = stats(h.float(), ctx.eps)
        xhat = (h.float() - mean) * rstd
        g = dy.float() if weight is None else dy.float() * weight.float()
        dtotal = hooks["input_grad"](g, xhat, rstd, False) + dh.float()
        dx = dtotal if keep is None else torch.where(keep, dtotal / (1.0 - ctx.p), 0.0)
        dw, db = hooks["param_grads"](dy.float(), xhat, weight, bias, ctx.needs_input_grad[2],
                                      ctx.needs_input_grad[3])
        needs = ctx.needs_input_grad if hooks["gate"] is None else hooks["gate"](ctx.needs_input_grad)
        return (dx.to(ctx.x_dtype) if needs[0] else None,
                hooks["residual_grad"](dtotal, ctx.r_dtype, ctx.x_dtype) if needs[1] else None,
                None if dw is None else dw.to(weight.dtype), None if db is None else db.to(bias.dtype),
                None, None, None, None)


def _keep_mask(x: torch.Tensor, p: float, seed: int) -> torch.Tensor | None:
    """The mask of the seed (None at p = 0: every element kept; none kept at p = 1)."""
    if p <= 0.0:
        return None
    if p >= 1.0:
        return torch.zeros(x.shape, dtype=torch.bool, device=x.device)
    generator = torch.Generator(device=x.device).manual_seed(seed)
    return torch.rand(x.shape, generator=generator, device=x.device) >= p


def make(hooks: dict | None = None):
    """The dropout + add + LayerNorm function of the kind's signature, with ``hooks`` replacing DEFAULT's."""
    chosen = {**DEFAULT, **(hooks or {})}

    def dropout_add_layernorm(x, residual, weight, bias, eps, p, seed):
        keep = _keep_mask(x, p, seed)
        return DropoutAddLayerNorm.apply(x, residual, weight, bias, eps, keep, 0.0 if p >= 1.0 else p, chosen)

    return dropout_add_layernorm


# --- bug hooks ------------------------------------------------------------------------------------------------


def _dweight_first_dimension(dy, xhat, weight, bias, needs_w: bool, needs_b: bool):
    """dweight and dbias over the first x.shape[0] rows only."""
    d, first = dy.shape[-1], dy.shape[0]
    dyr, xr = dy.reshape(-1, d)[:first], xhat.reshape(-1, d)[:first]
    dw = (dyr * xr).sum(0) if (weight is not None and needs_w) else None
    db = dyr.sum(0) if (bias is not None and needs_b) else None
    return dw, db


def _residual_gated_on_x(needs):
    """The residual's gradient only where x's is needed too."""
    needs = list(needs)
    needs[1] = needs[1] and needs[0]
    return needs


def _through_x_dtype(t, residual_dtype, x_dtype):
    """dresidual rounded to x's dtype first."""
    return t.to(x_dtype).to(residual_dtype)


SM_COUNT = 108  # an A100's


def _floor_rows_per_program(dy, xhat, weight, bias, needs_w: bool, needs_b: bool):
    """dweight/dbias of min(SM_COUNT, rows) programs of max(1, rows // SM_COUNT) rows each."""
    d = dy.shape[-1]
    rows = dy.reshape(-1, d).shape[0]
    covered = min(SM_COUNT, rows) * max(1, rows // SM_COUNT)
    dyr, xr = dy.reshape(-1, d)[:covered], xhat.reshape(-1, d)[:covered]
    dw = (dyr * xr).sum(0) if (weight is not None and needs_w) else None
    db = dyr.sum(0) if (bias is not None and needs_b) else None
    return dw, db


BLOCK = 1024


def _block_means(g, xhat, rstd, rms):
    """The backward's row means per block of BLOCK columns."""
    out = []
    for gb, xb in zip(g.split(BLOCK, -1), xhat.split(BLOCK, -1), strict=True):
        c2 = (gb * xb).mean(-1, keepdim=True)
        c1 = 0.0 if rms else gb.mean(-1, keepdim=True)
        out.append(gb - c1 - xb * c2)
    return rstd * torch.cat(out, -1)


def _kernel(name: str, description: str, hooks: dict | None = None) -> Kernel:
    """The kernel named ``name``; a broken one's description names its claim (drop_add_ln.gradient)."""
    claim = " -> drop_add_ln.gradient" if hooks else ""
    return Kernel(name.lower(), "dropout_add_layernorm", make(hooks), spec=SPEC + name,
                  description=" ".join(description.split()) + claim)


DROP_ADD_DWEIGHT_FIRST_DIMENSION = _kernel("DROP_ADD_DWEIGHT_FIRST_DIMENSION", _dweight_first_dimension.__doc__,
                                           {"param_grads": _dweight_first_dimension})
DROP_ADD_RESIDUAL_GRAD_GATED_ON_X = _kernel("DROP_ADD_RESIDUAL_GRAD_GATED_ON_X", _residual_gated_on_x.__doc__,
                                            {"gate": _residual_gated_on_x})
DROP_ADD_RESIDUAL_GRAD_IN_X_DTYPE = _kernel("DROP_ADD_RESIDUAL_GRAD_IN_X_DTYPE", _through_x_dtype.__doc__,
                                            {"residual_grad": _through_x_dtype})
DROP_ADD_DWEIGHT_FLOOR_ROWS_PER_PROGRAM = _kernel("DROP_ADD_DWEIGHT_FLOOR_ROWS_PER_PROGRAM",
                                                  _floor_rows_per_program.__doc__,
                                                  {"param_grads": _floor_rows_per_program})
DROP_ADD_BACKWARD_BLOCK_MEANS_ABOVE_1024 = _kernel("DROP_ADD_BACKWARD_BLOCK_MEANS_ABOVE_1024", _block_means.__doc__,
                                                   {"input_grad": _block_means})
DROP_ADD_CONTROL = _kernel("DROP_ADD_CONTROL", "the implementation unbroken: the control")
