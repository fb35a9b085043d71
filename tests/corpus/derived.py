"""Broken kernels that only the derived-property claims catch: each is right on every input ``*.forward`` draws
(every row of a call with the same mean and scale, eps in {1e-2, 1e-5, 1e-6, 1e-12}, magnitudes 1e-3 to 1e3) and
wrong in the regime its claim draws (issue 11, point 6). Each is the float32 skeleton of
:func:`corpus.statistics._normalize` with one statistics rule replaced:

    LN_ONE_PASS_AROUND_ONE_SHIFT   one-pass moments around a single shift for the whole tensor: rows whose means
                                   differ (ln.shift_invariance's per-row shifts) cancel catastrophically
    LN_FLUSH_TO_ZERO               statistics with subnormals flushed to zero (fast-math FTZ/DAZ): rows whose
    RMS_FLUSH_TO_ZERO              squares and eps are subnormal (ln/rms.affine at the small end of the exponent
                                   range, ln.variance_insensitivity at the smallest eps) lose their variance

Each docstring says the bug and the claim that must catch it (the manifest, ``tests/corpus/__init__.py``, lists
the same ids, and the claim ``*.forward`` that must not).
"""

from __future__ import annotations

import torch

from core.registry import Kernel
from corpus.statistics import FLOAT32_ARITHMETIC, Moments, Statistics, _normalize

SPEC = "tests/corpus/derived.py:"


def _one_pass_around_one_shift(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
    """One-pass moments E[(x-K)^2] - E[x-K]^2 in float32 around ONE shift K for the whole tensor (its mean), the
    "shifted data" algorithm with the shift computed once per call instead of once per row. Where every row has
    about the same mean (all of ln.forward's draws) x - K is of the order of std and nothing cancels; a row whose
    mean is c std away from K loses ~ u c^2 of its variance. The row's mean itself is its own (a kernel that also
    rebuilt it as K + E[x - K] would err by u |K| rstd on a constant row, which ln.forward's rows of d = 1 show).
    Must fail ln.shift_invariance (rows shifted by different amounts, up to the error model's |mean|/std limit);
    passes ln.forward."""
    centred = x - x.mean()
    first = centred.mean(-1, keepdim=True)
    variance = (centred.square().mean(-1, keepdim=True) - first.square()).clamp_min(0.0)
    return x.mean(-1, keepdim=True), torch.rsqrt(variance + eps)


def _flushed(t: torch.Tensor) -> torch.Tensor:
    """t with its subnormal values replaced by zero (flush-to-zero / denormals-are-zero arithmetic)."""
    return torch.where(t.abs() < torch.finfo(t.dtype).tiny, torch.zeros_like(t), t)


def _flush_to_zero(centre: bool) -> Statistics:
    """Statistics of float32 arithmetic that flushes subnormal operands and results to zero (fast-math FTZ/DAZ,
    as PTX's ``div.full.f32`` and ``rsqrt.approx.ftz.f32`` do): ``centre`` for LayerNorm, else RMSNorm."""

    def statistics(x: torch.Tensor, eps: float, storage: torch.dtype) -> Moments:
        mean = x.mean(-1, keepdim=True) if centre else torch.zeros_like(x[..., :1])
        squares = _flushed((x - mean).square())
        epsilon = _flushed(torch.tensor(eps, dtype=torch.float32))
        return mean, torch.rsqrt(_flushed(squares.mean(-1, keepdim=True)) + epsilon)

    return statistics


def _kernel(name: str, kind: str, statistics: Statistics, description: str) -> Kernel:
    if kind == "layernorm":
        def layernorm(x, weight, bias, eps):
            return _normalize(x, weight, bias, eps, statistics)
        function = layernorm
    else:
        def rmsnorm(x, weight, eps):
            return _normalize(x, weight, None, eps, statistics)
        function = rmsnorm
    return Kernel(name, kind, function, spec=SPEC + name.upper(), description=" ".join(description.split()),
                  dtypes=FLOAT32_ARITHMETIC)


LN_ONE_PASS_AROUND_ONE_SHIFT = _kernel("ln_one_pass_around_one_shift", "layernorm", _one_pass_around_one_shift,
                                       _one_pass_around_one_shift.__doc__)
LN_FLUSH_TO_ZERO = _kernel("ln_flush_to_zero", "layernorm", _flush_to_zero(centre=True), """LayerNorm statistics with
    subnormals flushed to zero (fast-math FTZ/DAZ): a row whose squares (x - mean)^2 and eps are below float32's
    smallest normal (|x - mean| < 1e-19) normalizes by what is left, or divides by 0. ln.forward never draws such a
    row (eps >= 1e-12, or squares far below eps); ln.affine (LN_{eps/a^2}(x) with x at the small end of the exponent
    range) and ln.variance_insensitivity (sigma^2 near the smallest eps) do. Must fail both; passes ln.forward.""")
RMS_FLUSH_TO_ZERO = _kernel("rms_flush_to_zero", "rmsnorm", _flush_to_zero(centre=False), """RMSNorm statistics with
    subnormals flushed to zero (fast-math FTZ/DAZ): a row whose squares x^2 and eps are below float32's smallest
    normal (|x| < 1e-19) normalizes by what is left, or divides by 0. rms.forward never draws such a row;
    rms.affine (RMS_{eps/a^2}(x) with x at the small end of the exponent range) does. Must fail rms.affine; passes
    rms.forward.""")
