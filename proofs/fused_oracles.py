"""Float64 references of the fused kinds, composed from the derived oracles (proofs.oracles) as the claims derive.

    add_norm(x, residual, weight, bias, eps, kind) -> (y, h)          h = x + residual, y = N(h)
    add_norm_vjp(h, weight, eps, dy, dh, kind)
        -> (d, dweight[, dbias])                                       claim add_{ln,rms}.jacobian:
                                                                       dx = dresidual = d = J_N(h)^T dy + dh
    groupnorm(x, num_groups, weight, bias, eps) -> y                   claim gn.jacobian: LN over each group's
    groupnorm_vjp(x, num_groups, weight, eps, dy) -> (dx, dweight, dbias)   (C/G) x spatial elements,
                                                                       per-channel gamma, beta
    dropout_add_variance_bias(p, d, var, mean)                         claim drop_add_ln.variance_bias: the
                                                                       dropout bias in the branch's statistics

``kind`` is "layernorm"/"rmsnorm" (or "ln"/"rms"). Inputs are the rounded values a kernel received, as
float64 arrays; x + residual is formed in float64 (exact for float16/bfloat16 inputs, and for float32 inputs
whose exponents differ by less than 29). GroupNorm takes x of shape [N, C, *] and weight/bias of shape [C]
(or None); the weight and bias gradients are per channel, summed over the batch and the spatial elements.
Rows (groups) where the norm is undefined give NaN, as in proofs.oracles.
"""

from __future__ import annotations

import numpy as np

from proofs import oracles


def add_norm(x, residual, weight, bias, eps, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(N(h), h) with h = x + residual over the last axis; bias is ignored for RMSNorm (None)."""
    h = np.asarray(x, dtype=np.float64) + np.asarray(residual, dtype=np.float64)
    if oracles.norm_key(kind) == "rms":
        return oracles.rmsnorm(h, weight, eps), h
    return oracles.layernorm(h, weight, bias, eps), h


def add_norm_vjp(h, weight, eps, dy, dh, kind: str) -> tuple:
    """(d, dweight[, dbias]) at the residual stream h = x + residual the norm was applied to, for upstream
    gradients dy = dL/dy and dh = dL/d(residual_out) (None: 0): d = J_N(h)^T dy + dh is both dL/dx and
    dL/dresidual (claim add_ln.jacobian); dweight (and dbias, LayerNorm) are the norm's at h."""
    if oracles.norm_key(kind) == "rms":
        dn, *parameters = oracles.rmsnorm_vjp(h, weight, eps, dy)
    else:
        dn, *parameters = oracles.layernorm_vjp(h, weight, eps, dy)
    return (dn if dh is None else dn + np.asarray(dh, dtype=np.float64), *parameters)


def _grouped(x, num_groups: int) -> tuple[np.ndarray, tuple[int, ...]]:
    """x [N, C, *] as [N, G, (C/G) S] and x's shape."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim < 2:
        raise ValueError(f"GroupNorm needs x of shape [N, C, *], got {x.shape}")
    channels = x.shape[1]
    if num_groups < 1 or channels % num_groups:
        raise ValueError(f"num_groups = {num_groups} does not divide C = {channels}")
    return x.reshape(x.shape[0], num_groups, -1), x.shape


def per_element(parameter, shape: tuple[int, ...], num_groups: int) -> np.ndarray | None:
    """A per-channel parameter [C] spread over the elements of each group: [G, (C/G) S]."""
    if parameter is None:
        return None
    spatial = int(np.prod(shape[2:], dtype=np.int64))
    return np.repeat(np.asarray(parameter, dtype=np.float64), spatial).reshape(num_groups, -1)


def groupnorm(x, num_groups: int, weight, bias, eps) -> np.ndarray:
    """GroupNorm over [N, C, *]: LayerNorm of each group's elements, per-channel weight and bias."""
    grouped, shape = _grouped(x, num_groups)
    y = oracles.layernorm(grouped, per_element(weight, shape, num_groups), per_element(bias, shape, num_groups),
                          eps)
    return y.reshape(shape)


def groupnorm_vjp(x, num_groups: int, weight, eps, dy) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """(dx, dweight [C] or None, dbias [C]) of GroupNorm for the upstream gradient dy (shape of x)."""
    grouped, shape = _grouped(x, num_groups)
    upstream = np.asarray(dy, dtype=np.float64).reshape(grouped.shape)
    gamma = per_element(weight, shape, num_groups)
    dx = np.empty_like(grouped)
    # one group at a time: proofs.oracles sums the parameter gradients over the leading axes (the batch) only
    per_element_w, per_element_b = [], []
    for group in range(num_groups):
        dx[:, group], dw, db = oracles.layernorm_vjp(grouped[:, group], None if gamma is None else gamma[group],
                                                     eps, upstream[:, group])
        per_element_w.append(dw)
        per_element_b.append(db)
    channels = shape[1]
    dbias = np.stack(per_element_b).reshape(channels, -1).sum(-1)
    dweight = None if weight is None else np.stack(per_element_w).reshape(channels, -1).sum(-1)
    return dx.reshape(shape), dweight, dbias


def dropout_add_variance_bias(p, d, var, mean) -> np.ndarray:
    """E_m[Var(residual + dropout(x))] - Var(residual + x) = p(d-1)/(d(1-p)) (var + mean^2), var and mean the
    branch x's population statistics (the residual drops out)."""
    return oracles.dropout_variance_bias(p, d, var, mean)
