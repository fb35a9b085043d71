"""Our Triton dropout: keep rate, scaling, determinism, gradient, layout, refusals."""

from __future__ import annotations

import math

import pytest
import torch

import kernels


@pytest.fixture(autouse=True)
def _seeded() -> None:
    torch.manual_seed(0)  # every example is the same on every run


def kept_fraction_within_binomial_bounds(kept: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    """Kept count of n Bernoulli(1 - p) draws within `sigmas` standard deviations of n (1 - p)."""
    return abs(kept - n * (1 - p)) <= sigmas * math.sqrt(n * p * (1 - p))


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_keep_rate_and_scaling(p, dtype):
    x = (torch.rand(64, 333) + 0.5).to(dtype)  # nonzero, so a zero output means dropped
    y = kernels.dropout(x, p, seed=17)
    kept = y != 0
    assert kept_fraction_within_binomial_bounds(int(kept.sum()), x.numel(), p)
    expected = (x[kept].double() / (1 - p)).to(dtype)  # x / (1 - p), rounded once to the storage dtype
    assert torch.allclose(y[kept].double(), expected.double(), rtol=2 * torch.finfo(dtype).eps, atol=0)


def test_same_seed_same_mask_other_seed_other_mask():
    x = torch.randn(10, 100)
    a, b, c = kernels.dropout(x, 0.5, 3), kernels.dropout(x, 0.5, 3), kernels.dropout(x, 0.5, 4)
    assert torch.equal(a, b)
    assert not torch.equal(a != 0, c != 0)


def test_mask_depends_on_index_not_layout():
    x = torch.randn(40, 30)
    assert torch.equal(kernels.dropout(x.t().contiguous().t(), 0.3, 9), kernels.dropout(x, 0.3, 9))
    assert torch.equal(kernels.dropout(x.reshape(4, 10, 30), 0.3, 9).reshape(40, 30), kernels.dropout(x, 0.3, 9))


def test_p_zero_is_identity_and_p_one_is_zero():
    x = torch.randn(7, 9)
    assert torch.equal(kernels.dropout(x, 0.0, 1), x)
    assert torch.equal(kernels.dropout(x, 1.0, 1), torch.zeros_like(x))


def test_gradient_is_the_same_mask_and_scale():
    x = torch.randn(8, 50, requires_grad=True)
    y = kernels.dropout(x, 0.25, 123)
    dy = torch.randn(50, 8).t()  # non-contiguous upstream gradient
    before = dy.clone()
    (dx,) = torch.autograd.grad(y, x, dy)
    mask = (y != 0).to(x.dtype)
    assert torch.allclose(dx, dy * mask / 0.75)
    assert torch.equal(dy, before)


def test_inputs_unwritten_and_zero_size():
    x = torch.randn(6, 6)
    saved = x.clone()
    kernels.dropout(x, 0.5, 0)
    assert torch.equal(x, saved)
    assert kernels.dropout(torch.empty(0, 4), 0.5, 0).shape == (0, 4)


@pytest.mark.parametrize(("p", "seed", "error"), [(1.5, 0, ValueError), (-0.1, 0, ValueError), (0.5, 1.0, TypeError)])
def test_bad_arguments_are_refused(p, seed, error):
    with pytest.raises(error, match="dropout"):
        kernels.dropout(torch.randn(3), p, seed)
