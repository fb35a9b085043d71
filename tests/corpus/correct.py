"""Correct LayerNorm/RMSNorm kernels, written the ways real implementations are: the conformance suite must
pass every one of them on every applicable claim (the manifest's ``expect`` is empty for each).

    LN_TWO_PASS_FLOAT64   two-pass mean and variance in float64, cast back to the input dtype
    RMS_TWO_PASS_FLOAT64  mean of squares in float64, cast back
    LN_WELFORD            float32 Welford over column chunks (at most 16, of 128 or more), merged with Chan's formula
    RMS_LLAMA             fp32-then-cast as Llama's RMSNorm: x.float(), normalize and scale, .to(dtype)
    RMS_GEMMA             Gemma's RMSNorm: float32 throughout, scale (1 + weight), declared weight_offset = 1

The textbook autograd-only versions (statistics.py: LN_TEXTBOOK, RMS_TEXTBOOK), the fused autograd.Function
ones (fused.py: LN_FUSED, RMS_FUSED), dropout with its own generator (dropout.py: DROPOUT_BERNOULLI) and the
``torch`` built-in are the other correct kernels of the corpus.
"""

from __future__ import annotations

import torch

from core.registry import Kernel
from corpus.statistics import FLOAT32_ARITHMETIC

SPEC = "tests/corpus/correct.py:"


def _affine(y: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None) -> torch.Tensor:
    """y * weight + bias in y's dtype, each optional."""
    if weight is not None:
        y = y * weight.to(y.dtype)
    return y if bias is None else y + bias.to(y.dtype)


def layernorm_two_pass_float64(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                               eps: float) -> torch.Tensor:
    """LN(x) = gamma (x - mu) / sqrt(sigma^2 + eps) + beta, everything in float64 (mu, then sigma^2 as the
    mean of (x - mu)^2), rounded once to x's dtype at the end."""
    x64 = x.double()
    mean = x64.mean(-1, keepdim=True)
    variance = (x64 - mean).square().mean(-1, keepdim=True)
    return _affine((x64 - mean) * torch.rsqrt(variance + eps), weight, bias).to(x.dtype)


def rmsnorm_two_pass_float64(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """RMS(x) = gamma x / sqrt(mean(x^2) + eps) in float64, rounded once to x's dtype at the end."""
    x64 = x.double()
    return _affine(x64 * torch.rsqrt(x64.square().mean(-1, keepdim=True) + eps), weight, None).to(x.dtype)


WELFORD_MIN_CHUNK = 128
WELFORD_MAX_CHUNKS = 16


def _welford_mean_variance(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row mean and population variance over column chunks (as a kernel's column blocks: at most 16, of at least
    128 columns), each chunk's (n, mean, M2) merged in turn with Chan et al.'s formula:
    for partial results (n_a, mean_a, M2_a) and (n_b, mean_b, M2_b) with delta = mean_b - mean_a,
    n = n_a + n_b, mean = mean_a + delta n_b / n, M2 = M2_a + M2_b + delta^2 n_a n_b / n; variance = M2 / n."""
    count, mean, m2 = 0, torch.zeros_like(x[..., :1]), torch.zeros_like(x[..., :1])
    chunk_width = max(WELFORD_MIN_CHUNK, -(-x.shape[-1] // WELFORD_MAX_CHUNKS))
    for chunk in x.split(chunk_width, dim=-1):
        chunk_count = chunk.shape[-1]
        chunk_mean = chunk.mean(-1, keepdim=True)
        chunk_m2 = (chunk - chunk_mean).square().sum(-1, keepdim=True)
        total = count + chunk_count
        delta = chunk_mean - mean
        mean = mean + delta * (chunk_count / total)
        m2 = m2 + chunk_m2 + delta.square() * (count * chunk_count / total)
        count = total
    return mean, m2 / count


def layernorm_welford(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                      eps: float) -> torch.Tensor:
    """LayerNorm with float32 chunked Welford statistics (:func:`_welford_mean_variance`), cast back."""
    xf = x.float()
    mean, variance = _welford_mean_variance(xf)
    return _affine((xf - mean) * torch.rsqrt(variance + eps), weight, bias).to(x.dtype)


def rmsnorm_llama(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """fp32-then-cast, as Llama's RMSNorm: ``x.to(float32)``, x * rsqrt(mean(x^2) + eps) * weight, ``.to(dtype)``.
    (Hugging Face's LlamaRMSNorm multiplies by the weight after the cast, rounding twice; that one is a
    third-party built-in, not a corpus kernel.)"""
    hidden = x.to(torch.float32)
    variance = hidden.pow(2).mean(-1, keepdim=True)
    hidden = hidden * torch.rsqrt(variance + eps)
    return _affine(hidden, weight, None).to(x.dtype)


def rmsnorm_gemma(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """Gemma's RMSNorm: x / sqrt(mean(x^2) + eps) * (1 + weight), all in float32, cast back at the end
    (no weight: scale 1)."""
    xf = x.float()
    normalized = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    return (normalized if weight is None else normalized * (1.0 + weight.float())).to(x.dtype)


def _describe(fn) -> str:
    return " ".join(fn.__doc__.split())


LN_TWO_PASS_FLOAT64 = Kernel("ln_two_pass_float64", "layernorm", layernorm_two_pass_float64,
                             spec=SPEC + "LN_TWO_PASS_FLOAT64", description=_describe(layernorm_two_pass_float64))
RMS_TWO_PASS_FLOAT64 = Kernel("rms_two_pass_float64", "rmsnorm", rmsnorm_two_pass_float64,
                              spec=SPEC + "RMS_TWO_PASS_FLOAT64", description=_describe(rmsnorm_two_pass_float64))
LN_WELFORD = Kernel("ln_welford", "layernorm", layernorm_welford, spec=SPEC + "LN_WELFORD",
                    description=_describe(layernorm_welford), dtypes=FLOAT32_ARITHMETIC)
RMS_LLAMA = Kernel("rms_llama", "rmsnorm", rmsnorm_llama, spec=SPEC + "RMS_LLAMA", description=_describe(rmsnorm_llama),
                   dtypes=FLOAT32_ARITHMETIC)
RMS_GEMMA = Kernel("rms_gemma", "rmsnorm", rmsnorm_gemma, spec=SPEC + "RMS_GEMMA", weight_offset=1.0,
                   description=_describe(rmsnorm_gemma), dtypes=FLOAT32_ARITHMETIC)
