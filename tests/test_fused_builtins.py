"""Facts about the torch built-ins of the new kinds that docs/findings.md reports, pinned on their minimal inputs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from core.registry import Kernel, resolve
from proofs import fused_oracles
from properties.checks.groupnorm import check_input_layout
from properties.outcome import CheckFailure


def _errors(offset: float) -> tuple[float, float]:
    """Worst |error| of F.group_norm against the float64 oracle, contiguous and channels-last, at mean/std offset."""
    x = (offset + torch.randn(4, 32, 8, 8, generator=torch.Generator().manual_seed(1))).float()
    exact = fused_oracles.groupnorm(x.double().numpy(), 8, None, None, 1e-5)
    return tuple(float(np.abs(F.group_norm(x.to(memory_format=layout), 8, eps=1e-5).double().numpy() - exact).max())
                 for layout in (torch.contiguous_format, torch.channels_last))


def test_channels_last_group_norm_error_grows_like_a_one_pass_variance():
    """[R5]: the channels-last path's error grows with (mean/std)^2 (x100 per x10 of the offset); the contiguous
    path's stays near u_float32 times the offset."""
    (c10, l10), (c100, l100) = _errors(10.0), _errors(100.0)
    assert l10 > 10 * c10 and l100 > 100 * c100
    assert 50 < l100 / l10 < 400


def test_torch_groupnorm_fails_the_layout_claim_on_offset_rows():
    """gn.layout_invariance catches it where |mean|/std is large: rows near 100 with std 1, float32, G = 2."""
    x = 100 + torch.randn(2, 4, 4, 4, generator=torch.Generator().manual_seed(0))
    (kernel,) = resolve("torch-groupnorm")
    with pytest.raises(CheckFailure, match="channels-last"):
        check_input_layout(kernel, x.to(memory_format=torch.channels_last), 2, None, 1e-5)


def test_group_norm_backward_raises_for_a_bias_without_weight_and_only_that_is_declared():
    """[R3]: F.group_norm's backward raises for weight=None with a bias that needs a gradient; with a weight it
    works. The declared deviation of torch-groupnorm explains that fault on such examples only."""
    from core.guard import KernelFault
    from properties.run.expectations import BUILTIN_DEVIATIONS, bias_without_weight

    x = torch.randn(2, 4, 3, generator=torch.Generator().manual_seed(0), requires_grad=True)
    bias = torch.zeros(4, requires_grad=True)
    with pytest.raises(RuntimeError, match="does not have a device"):
        F.group_norm(x, 2, None, bias, 1e-5).sum().backward()
    F.group_norm(x, 2, torch.ones(4, requires_grad=True), bias, 1e-5).sum().backward()
    (kernel,) = resolve("torch-groupnorm")
    declared = next(d for d in BUILTIN_DEVIATIONS if d.applies is bias_without_weight)
    fault = KernelFault(kernel.name, "raised", "raised RuntimeError: tensor does not have a device")
    assert declared.explains(kernel, "gn.jacobian", fault, {"x": x, "weight": None, "bias": bias})
    assert not declared.explains(kernel, "gn.jacobian", fault, {"x": x, "weight": torch.ones(4), "bias": bias})
    assert not declared.explains(kernel, "gn.forward", fault, {"x": x, "weight": None, "bias": bias})


def sixteen_bit_group_norm_example(dtype: torch.dtype) -> dict:
    generator = torch.Generator().manual_seed(0)
    return {"x": torch.randn(2, 8, 4, 4, generator=generator).to(dtype), "num_groups": 4,
            "weight": (1 + 0.5 * torch.randn(8, generator=generator)).to(dtype),
            "bias": torch.randn(8, generator=generator).to(dtype), "eps": 1e-5,
            "dy": torch.randn(2, 8, 4, 4, generator=generator).to(dtype)}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_group_norm_keeps_its_statistics_in_16_bit_and_its_backward_is_checked_as_declared(dtype):
    """[R7]: ATen's native_group_norm returns mean and rstd in x's 16-bit dtype and the backward rebuilds x_hat from
    them, a storage-precision backward. Undeclared, an example with a weight (outside [R3]'s declared fault, which
    hid it) fails gn.jacobian; torch-groupnorm declares backward_precision="storage" and passes it."""
    from properties.checks.groupnorm import check_vjp

    example = sixteen_bit_group_norm_example(dtype)
    _, mean, rstd = torch.native_group_norm(example["x"], None, None, 2, 8, 16, 4, 1e-5)
    assert mean.dtype == rstd.dtype == dtype
    (kernel,) = resolve("torch-groupnorm")
    assert kernel.backward_precision == "storage"
    check_vjp(kernel, **example)
    undeclared = dataclasses.replace(kernel, backward_precision="float32", conventions=())
    with pytest.raises(CheckFailure, match=r"^dx"):
        check_vjp(undeclared, **example)


def offset_group_norm_example(device: str) -> dict:
    """float16 [2, 8, 256], 2 groups, |mean|/std = 30 (the reproduction of docs/findings.md [R7])."""
    x = 30 + torch.randn(2, 8, 256, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return {"x": x.half().to(device), "num_groups": 2, "weight": None, "bias": None, "eps": 1e-5}


def group_norm_with_16_bit_statistics(x, num_groups, weight, bias, eps):
    """torch 2.11's CUDA GroupNorm forward, on any device: mean and rstd rounded to x's dtype, then
    a = rstd gamma and b = beta - a mean from them, y = x a + b (docs/findings.md [R7])."""
    n, channels = x.shape[:2]
    grouped = x.float().reshape(n, num_groups, -1)
    mean = grouped.mean(-1).to(x.dtype).float()
    rstd = torch.rsqrt(grouped.var(-1, unbiased=False) + eps).to(x.dtype).float()
    per_channel = (channels // num_groups,)
    a = rstd.repeat_interleave(*per_channel, dim=1) * (1 if weight is None else weight.float())
    b = (0 if bias is None else bias.float()) - a * mean.repeat_interleave(*per_channel, dim=1)
    shape = (n, channels) + (1,) * (x.dim() - 2)
    return (x.float() * a.reshape(shape) + b.reshape(shape)).to(x.dtype)


def test_the_cuda_group_norm_forward_is_declared_on_cuda_only():
    """[R7]: torch-groupnorm declares affine_precision="storage" for the device its tensors are on, CUDA, whatever
    torch.cuda.is_available() says; on the CPU torch's forward uses float32 statistics and passes undeclared."""
    from properties.checks.groupnorm import check_forward

    (kernel,) = resolve("torch-groupnorm")
    assert kernel.affine_precision == "float32" and kernel.for_device("cuda").affine_precision == "storage"
    check_forward(kernel, **offset_group_norm_example("cpu"))


def test_the_declared_16_bit_affine_map_covers_the_cuda_forward_and_nothing_looser():
    """[R7]: the CUDA formula, emulated on the CPU, fails gn.forward undeclared (the float32 statistics' bound) and
    passes with affine_precision="storage"; rounding a and b once more (to 8 bits less) fails even declared."""
    from properties.checks.groupnorm import check_forward

    example = offset_group_norm_example("cpu")
    undeclared = Kernel("cuda-formula", "groupnorm", group_norm_with_16_bit_statistics)
    with pytest.raises(CheckFailure, match=r"^y"):
        check_forward(undeclared, **example)
    check_forward(dataclasses.replace(undeclared, affine_precision="storage"), **example)

    def coarser(x, num_groups, weight, bias, eps):
        return group_norm_with_16_bit_statistics(x.to(torch.bfloat16), num_groups, weight, bias, eps).to(x.dtype)

    with pytest.raises(CheckFailure, match=r"^y"):
        check_forward(Kernel("coarser", "groupnorm", coarser, affine_precision="storage"), **example)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's CUDA group_norm needs a CUDA device")
def test_the_cuda_group_norm_forward_passes_as_declared():
    from properties.checks.groupnorm import check_forward

    (kernel,) = resolve("torch-groupnorm")
    check_forward(kernel.for_device("cuda"), **offset_group_norm_example("cuda"))


def test_the_group_norm_float16_rstd_overflow_is_declared_and_shows_on_the_cpu():
    """[R7]: gn.degenerate's float16 [2, 1] x with one group and eps = 1e-12 gave NaN on the H100 (rstd = 1/sqrt(eps)
    overflows float16); the CPU keeps float16 statistics for the backward, so its dx is NaN there (y is 0, right).
    The declared deviation names such examples, on either device; eps = 1e-5 or float32 x is not one."""
    from properties.run.expectations import BUILTIN_DEVIATIONS, float16_group_rstd_overflows

    example = {"x": torch.tensor([[1.541016], [-0.293457]], dtype=torch.float16), "num_groups": 1, "eps": 1e-12}
    assert float16_group_rstd_overflows(example)
    assert not float16_group_rstd_overflows({**example, "eps": 1e-5})
    assert not float16_group_rstd_overflows({**example, "x": example["x"].float()})
    (deviation,) = [d for d in BUILTIN_DEVIATIONS if d.kernels == ("torch-groupnorm",) and d.fault == "nonfinite"]
    assert deviation.applies(example)
    x = example["x"].clone().requires_grad_(True)
    y = torch.nn.functional.group_norm(x, 1, None, None, 1e-12)
    (dx,) = torch.autograd.grad(y, x, torch.ones_like(y))
    assert torch.equal(y, torch.zeros_like(y)) and torch.isnan(dx).all()
