"""Rows whose statistics every correct kernel computes exactly, over the whole magnitude range the dtype allows.

At d = 1 LayerNorm's output is beta whatever x is; at d = 2, x = (m + delta, m - delta) gives
+-delta / sqrt(delta^2 + eps) (times gamma, plus beta) for any offset m; a constant row gives beta. The derivation
states these values for all magnitudes (proofs: ln.special_inputs), but rows drawn with a modest offset never show a
kernel whose x_hat keeps a residue growing with |m| (x * rstd - mean * rstd, exact for small |x|, wrong by O(1) at
|m| / delta ~ 1/u). Here the magnitudes go as far as the storage dtype represents x and x - mu and the
suite's condition on very large inputs allows (the sum of x^2 fits the accumulation dtype, |x| <= sqrt(max / d) / 4:
beyond it torch's CPU LayerNorm and ours return NaN, docs/findings.md):

    one       d = 1, x any value of the storage dtype up to that limit
    pair      d = 2, m = +-2^k, delta = 2^(k - j), 1 <= j < p (p the storage precision): m +- delta exact, their sum
              2m exact, x - mu = +-delta exact, delta^2 representable
    constant  d in {4, 8, 64} (powers of two: sum / d and sum * (1/d) are both exact), c = +-2^k (1 + i/8)

On these rows a correct kernel's mean is exact in any summation order, so it computes on x exactly what it computes
on the centred rows x - mu (RMSNorm: on x itself): the bound is the error model's for the centred rows
(``"centred"`` in the example), which stays finite however large m is (the model's bound for x itself is not: its
condition number |m|/delta exceeds 1/u).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import assume
from hypothesis import strategies as st

from core.boundary import HOST, host_generator
from core.capabilities import discover
from core.registry import Kernel
from properties import norms
from properties.bounds import tolerance
from properties.draws.strategies import (
    PRESENT_BIAS_FORMS,
    biases,
    effective_weights,
    epsilons,
    rounded,
    seeds,
    standard_values,
    storage_dtypes,
)

FORMS = ("one", "pair", "constant")
ACCUMULATION_EXPONENT = 127  # log2 of float32's largest value, rounded down: the accumulation dtype of every storage


def precision_bits(dtype: torch.dtype) -> int:
    """p: the significand bits of the storage dtype (24, 11, 8)."""
    return round(-math.log2(torch.finfo(dtype).eps)) + 1


def exponent_range(dtype: torch.dtype, form: str, d: int, power: int = 2) -> tuple[int, int]:
    """(lowest, highest) k of the row's values ~ 2^k for ``form`` (module docstring): x (below twice 2^k) normal and
    finite in the storage dtype, with d |x|^power inside float32 and |x|^power a normal float32 (power 2 for the
    forward's sum of squares; 3 for the gradients, whose terms multiply x_hat, g x_hat and rstd), and a pair's
    delta = 2^(k - j), j < p, inside the same limits."""
    info = torch.finfo(dtype)
    width_bits = math.ceil(math.log2(d))
    top = min(math.floor(math.log2(info.max)) - 1, (ACCUMULATION_EXPONENT - width_bits) // power - 2)
    bottom = max(math.ceil(math.log2(info.tiny)), -(ACCUMULATION_EXPONENT - 1) // power + 2)
    return bottom + (precision_bits(dtype) - 1 if form == "pair" else 0), top


@st.composite
def exact_statistics_rows(draw, kernel: Kernel, upstream: bool = False) -> dict:
    """One example of exact-statistics rows (module docstring): x, centred, weight (and bias), eps (and dy)."""
    device = discover(kernel).device
    dtype = draw(storage_dtypes(kernel))
    form = draw(st.sampled_from(FORMS))
    d = {"one": 1, "pair": 2}.get(form) or draw(st.sampled_from([4, 8, 64]))
    n = draw(st.integers(1, 4))
    bottom, top = exponent_range(dtype, form, d, power=3 if upstream else 2)
    edges = sorted({bottom, top, top - 1, (bottom + top) // 2, min(max(0, bottom), top)})
    exponents = draw(st.lists(st.sampled_from(edges) | st.integers(bottom, top), min_size=n, max_size=n))
    signs = draw(st.lists(st.sampled_from([1.0, -1.0]), min_size=n, max_size=n))
    rows = []
    for k, sign in zip(exponents, signs, strict=True):
        m = sign * 2.0**k
        if form == "one":
            value = m * (1 + float(torch.rand((), generator=host_generator(draw(seeds())), device=HOST)))
            rows.append([value])
        elif form == "pair":
            delta = 2.0 ** (k - draw(st.integers(1, precision_bits(dtype) - 1)))
            rows.append([m + delta, m - delta])
        else:
            rows.append([m * (1 + draw(st.integers(0, 7)) / 8)] * d)
    x = rounded(np.array(rows, dtype=np.float64), dtype, device)
    values = norms.as_float64(x)
    centres = values.mean(-1, keepdims=True) if kernel.record.centred else 0.0
    example = {"x": x, "centred": rounded(values - centres, dtype, device)}
    gamma = draw(effective_weights(d))
    if gamma is None and kernel.weight_offset != 0:
        gamma = torch.ones(d, dtype=torch.float64, device=HOST)
    example["weight"] = None if gamma is None else rounded(gamma - kernel.weight_offset, dtype, device)
    if kernel.record.has_bias:
        beta = draw(biases(d, PRESENT_BIAS_FORMS))
        example["bias"] = rounded(beta, dtype, device)
    example["eps"] = draw(epsilons())
    assume(tolerance.covered(kernel, example["centred"], example["eps"]))
    if upstream:
        example["dy"] = rounded(standard_values((n, d), "normal", draw(seeds())), dtype, device)
        exact = norms.reference_vjp(kernel, x, example["weight"], example["eps"], example["dy"])
        assume(all(norms.representable(g, dtype) for g in exact.values()))
        assume(tolerance.backward_covered(kernel, example["centred"], example["eps"]))
    else:
        assume(norms.representable(norms.reference(kernel, x, example["weight"], example.get("bias"), example["eps"]),
                                   dtype))
    return example
