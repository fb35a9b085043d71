"""properties.bounds.tolerance: the bounds are those of proofs.error_model with the right unit roundoffs, hold for
correct kernels computed in other orders and dtypes, and leave a one-pass variance kernel far behind."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.registry import Kernel
from proofs import error_model
from properties import norms, outcome
from properties.bounds import tolerance

LN = Kernel("simulated-layernorm", "layernorm", lambda x, w, b, eps: x)
RMS = Kernel("simulated-rmsnorm", "rmsnorm", lambda x, w, eps: x)
GEMMA = Kernel("simulated-gemma", "rmsnorm", lambda x, w, eps: x, weight_offset=1.0)


@pytest.mark.parametrize(("storage", "accumulation"), [(torch.float16, torch.float32), (torch.bfloat16, torch.float32),
                                                       (torch.float32, torch.float32), (torch.float64, torch.float64)])
def test_accumulation_dtype_and_unit_roundoffs(storage, accumulation):
    assert tolerance.accumulation_dtype(storage) == accumulation
    u_acc, u_out = tolerance.unit_roundoffs(storage)
    assert u_acc == torch.finfo(accumulation).eps / 2
    assert u_out == torch.finfo(storage).eps / 2


def test_forward_bound_is_the_error_model_with_the_effective_weight():
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(0)).half()
    weight = torch.randn(16, generator=torch.Generator().manual_seed(1)).half()
    expected = error_model.forward_bound(x.double().numpy(), 1.0 + weight.double().numpy(), None, 1e-6,
                                         2.0**-24, 2.0**-11, "rmsnorm")
    np.testing.assert_array_equal(tolerance.forward(GEMMA, x, weight, None, 1e-6), expected)


def _two_pass(x: torch.Tensor, eps: float, accumulate: torch.dtype, kind: str, blocks: int = 1) -> torch.Tensor:
    """A correct kernel: statistics accumulated in ``accumulate`` over ``blocks`` partial sums, output stored."""
    xa = x.to(accumulate)
    d = x.shape[-1]
    partial = torch.stack([c.sum(-1) for c in xa.chunk(blocks, -1)]).sum(0, keepdim=False)[..., None]
    centred = xa - partial / d if kind == "layernorm" else xa
    squares = torch.stack([c.pow(2).sum(-1) for c in centred.chunk(blocks, -1)]).sum(0)[..., None]
    return (centred * torch.rsqrt(squares / d + eps)).to(x.dtype)


@pytest.mark.parametrize("kernel", [LN, RMS], ids=["layernorm", "rmsnorm"])
@pytest.mark.parametrize("storage", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("blocks", [1, 7])
def test_correct_kernels_stay_below_the_forward_bound(kernel, storage, blocks):
    generator = torch.Generator().manual_seed(blocks)
    worst = 0.0
    for d in (1, 2, 3, 64, 1000):
        for offset in (0.0, 10.0, 300.0 if storage != torch.float32 else 3e3):
            for eps in (1e-12, 1e-5, 1e-2):
                x = (offset + torch.randn(4, d, generator=generator, dtype=torch.float64)).to(storage)
                got = _two_pass(x, eps, tolerance.accumulation_dtype(storage), kernel.kind, blocks)
                bound = tolerance.forward(kernel, x, None, None, eps)
                worst = max(worst, outcome.compare(got, norms.reference(kernel, x, None, None, eps), bound, "y").ratio)
    assert worst <= 1.0
    assert worst > 1e-3, "the bound is far looser than the error of a correct kernel"


def test_one_pass_variance_exceeds_the_bound_by_a_wide_margin_at_large_mean_over_std():
    x = (1e4 + torch.randn(4, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)).float()
    mean = x.mean(-1, keepdim=True)
    one_pass = (x - mean) / torch.sqrt((x * x).mean(-1, keepdim=True) - mean * mean + 1e-5)
    bound = tolerance.forward(LN, x, None, None, 1e-5)
    assert outcome.compare(one_pass, norms.reference(LN, x, None, None, 1e-5), bound, "y").ratio > 100


def test_sum_and_matrix_norm_bounds_cover_every_perturbation_within_the_element_bounds():
    generator = np.random.default_rng(0)
    a = generator.normal(size=(6, 6))
    b = np.abs(generator.normal(size=(6, 6)))
    coefficients = generator.normal(size=6)
    for _ in range(200):
        e = b * generator.uniform(-1, 1, size=b.shape)
        assert abs(np.sum(coefficients * e[0])) <= tolerance.of_sum(b[0], coefficients) + 1e-15
        change = abs(np.linalg.norm(a + e, 2) - np.linalg.norm(a, 2))
        assert change <= tolerance.of_matrix_norm(b) + 1e-15
    assert tolerance.of_sum(np.array([np.inf, 1.0]), np.array([0.0, 2.0])) == 2.0


@pytest.mark.parametrize("storage", [torch.float32, torch.float16, torch.bfloat16])
def test_dropout_scaling_bound_covers_scaling_in_the_storage_dtype(storage):
    x = torch.randn(4096, generator=torch.Generator().manual_seed(0)).to(storage)
    for p in (0.1, 0.3, 0.5, 0.9):
        computed = x * torch.tensor(1 / (1 - p), dtype=storage)
        bound = tolerance.dropout_scaling(x, p)
        assert outcome.compare(computed, norms.as_float64(x) / (1 - p), bound, "kept").ratio <= 1.0
