"""Correct fused residual add + norm kernels written in plain torch, as a user composes them (kinds add_layernorm,
add_rmsnorm, dropout_add_layernorm): h = x + residual, y = N(h), autograd for the backward. The conformance suite
must pass every one of them on every claim, in float32 and float16 (issue 25, point 3).

    ADD_LN_FLOAT64          h in the residual's dtype; LayerNorm two-pass in float64 (correct.py), cast back
    ADD_RMS_FLOAT64         h in the residual's dtype; RMSNorm in float64, cast back
    ADD_LN_FLOAT32          h in the residual's dtype; LayerNorm two-pass in float32 from h.float(), cast back
    ADD_RMS_FLOAT32         h in the residual's dtype; Llama's fp32-then-cast RMSNorm (correct.py)
    ADD_LN_RESIDUAL_FP32    h = x.float() + residual.float() kept in float32 (residual_dtype="float32"); LayerNorm
                            in float32, y cast to x's dtype
    ADD_RMS_RESIDUAL_FP32   the same for RMSNorm
    ADD_LN_CHAN_CHUNKS      h in the residual's dtype; float32 mean and M2 of chunks of CHUNK columns, merged
                            pairwise with Chan's formula (a two-level reduction), cast back
    DROP_ADD_LN_SEEDED      h = residual + x m / (1 - p) in the residual's dtype, m from a torch.Generator seeded
                            with the seed, the product in x's dtype; LayerNorm in float32

Autograd accumulates dL/dh over h's uses (residual_out itself, and each use inside N) in h's dtype, a rounding after
every partial sum: the k-term sum the fused bound allows in any order (properties.bounds.tolerance, claim
add_ln.jacobian). Before that term these kernels failed add_ln.jacobian / add_rms.jacobian / drop_add_ln.gradient.
"""

from __future__ import annotations

import torch

from core.kernel import Kernel
from corpus.correct import layernorm_two_pass_float64, rmsnorm_llama, rmsnorm_two_pass_float64

SPEC = "tests/corpus/composed.py:"
DTYPES = (torch.float32, torch.float16)
CHUNK = 4


def _affine(y: torch.Tensor, weight, bias) -> torch.Tensor:
    y = y if weight is None else y * weight.to(y.dtype)
    return y if bias is None else y + bias.to(y.dtype)


def layernorm_float32(h: torch.Tensor, weight, bias, eps: float) -> torch.Tensor:
    """LayerNorm of h.float(): mean, then the mean of (h - mean)^2, x_hat = (h - mean) rsqrt(var + eps), affine in
    float32, cast to h's dtype."""
    hf = h.float()
    centred = hf - hf.mean(-1, keepdim=True)
    return _affine(centred * torch.rsqrt(centred.square().mean(-1, keepdim=True) + eps), weight, bias).to(h.dtype)


def _chan_merge(a: tuple, b: tuple) -> tuple:
    """Chan, Golub, LeVeque: (n, mean, M2) of two parts, delta = mean_b - mean_a, n = n_a + n_b,
    mean = mean_a + delta n_b / n, M2 = M2_a + M2_b + delta^2 n_a n_b / n."""
    (n_a, mean_a, m2_a), (n_b, mean_b, m2_b) = a, b
    n = n_a + n_b
    delta = mean_b - mean_a
    return n, mean_a + delta * (n_b / n), m2_a + m2_b + delta.square() * (n_a * n_b / n)


def layernorm_chan_chunks(h: torch.Tensor, weight, bias, eps: float) -> torch.Tensor:
    """LayerNorm with float32 statistics from chunks of CHUNK columns: each chunk's (n, mean, M2) two-pass, then
    the chunks merged pairwise, level by level, with Chan's formula (:func:`_chan_merge`); cast to h's dtype."""
    hf = h.float()
    parts = [(c.shape[-1], c.mean(-1, keepdim=True), (c - c.mean(-1, keepdim=True)).square().sum(-1, keepdim=True))
             for c in hf.split(CHUNK, dim=-1)]
    while len(parts) > 1:
        parts = [_chan_merge(*parts[i:i + 2]) if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
    count, mean, m2 = parts[0]
    return _affine((hf - mean) * torch.rsqrt(m2 / count + eps), weight, bias).to(h.dtype)


def _add_norm(norm, residual_in_fp32: bool = False):
    def add_norm(x, residual, weight, bias, eps):
        h = x.float() + residual.float() if residual_in_fp32 else x + residual
        return norm(h, weight, bias, eps).to(x.dtype), h
    return add_norm


def _add_rms(norm, residual_in_fp32: bool = False):
    add_norm = _add_norm(lambda h, weight, bias, eps: norm(h, weight, eps), residual_in_fp32)

    def add_rms(x, residual, weight, eps):
        return add_norm(x, residual, weight, None, eps)
    return add_rms


def dropout_add_layernorm(x, residual, weight, bias, eps, p, seed):
    """h = residual + x m / (1 - p) in the residual's dtype, m kept where a uniform of torch.Generator(seed) is
    >= p, the product in x's dtype (as F.dropout); LayerNorm of h in float32 (:func:`layernorm_float32`)."""
    generator = torch.Generator().manual_seed(seed)
    kept = (torch.rand(x.shape, generator=generator) >= p).to(x.device)
    h = residual + torch.where(kept, x * (1.0 / (1.0 - p)), torch.zeros_like(x))
    return layernorm_float32(h, weight, bias, eps), h


def _kernel(name: str, kind: str, fn, description: str, **declared) -> Kernel:
    return Kernel(name.lower(), kind, fn, spec=SPEC + name, dtypes=DTYPES, description=description, **declared)


ADD_LN_FLOAT64 = _kernel("ADD_LN_FLOAT64", "add_layernorm", _add_norm(layernorm_two_pass_float64),
                         "h = x + residual; LayerNorm of h in float64, cast back")
ADD_RMS_FLOAT64 = _kernel("ADD_RMS_FLOAT64", "add_rmsnorm", _add_rms(rmsnorm_two_pass_float64),
                          "h = x + residual; RMSNorm of h in float64, cast back")
ADD_LN_FLOAT32 = _kernel("ADD_LN_FLOAT32", "add_layernorm", _add_norm(layernorm_float32),
                         "h = x + residual; LayerNorm of h.float(), cast back")
ADD_RMS_FLOAT32 = _kernel("ADD_RMS_FLOAT32", "add_rmsnorm", _add_rms(rmsnorm_llama),
                          "h = x + residual; Llama's fp32-then-cast RMSNorm of h")
ADD_LN_RESIDUAL_FP32 = _kernel("ADD_LN_RESIDUAL_FP32", "add_layernorm", _add_norm(layernorm_float32, True),
                               "h = x + residual in float32; LayerNorm in float32, y in x's dtype",
                               residual_dtype="float32")
ADD_RMS_RESIDUAL_FP32 = _kernel("ADD_RMS_RESIDUAL_FP32", "add_rmsnorm", _add_rms(rmsnorm_llama, True),
                                "h = x + residual in float32; RMSNorm in float32, y in x's dtype",
                                residual_dtype="float32")
ADD_LN_CHAN_CHUNKS = _kernel("ADD_LN_CHAN_CHUNKS", "add_layernorm", _add_norm(layernorm_chan_chunks),
                             "h = x + residual; LayerNorm from Chan-merged float32 moments of chunks of 4 columns")
DROP_ADD_LN_SEEDED = _kernel("DROP_ADD_LN_SEEDED", "dropout_add_layernorm", dropout_add_layernorm,
                             "h = residual + x m/(1-p), m from torch.Generator(seed); LayerNorm of h in float32")
