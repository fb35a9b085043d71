"""kernels.LayerNorm / kernels.RMSNorm as drop-ins for torch.nn's, the functional checks, the 'triton' built-in."""

from __future__ import annotations

import pytest
import torch

import kernels
from core.registry import resolve


@pytest.fixture(autouse=True)
def _seeded() -> None:
    torch.manual_seed(0)  # every example is the same on every run


def _copy_parameters(ours: torch.nn.Module, theirs: torch.nn.Module) -> None:
    with torch.no_grad():
        for name, parameter in theirs.named_parameters():
            parameter.normal_()
            getattr(ours, name).copy_(parameter)


@pytest.mark.parametrize(("ours", "theirs", "shape"), [
    (kernels.LayerNorm, torch.nn.LayerNorm, (3, 4)),
    (kernels.RMSNorm, torch.nn.RMSNorm, 12),
])
def test_modules_match_torch_forward_and_backward(ours, theirs, shape):
    mine, reference = ours(shape), theirs(shape)
    _copy_parameters(mine, reference)
    x = torch.randn(2, 5, 3, 4).reshape(2, 5, -1) if isinstance(shape, int) else torch.randn(2, 5, 3, 4)
    x.requires_grad_()
    y, ry = mine(x), reference(x)
    torch.testing.assert_close(y, ry)
    dy = torch.randn_like(y)
    grads = torch.autograd.grad(y, [x, *mine.parameters()], dy)
    reference_grads = torch.autograd.grad(ry, [x, *reference.parameters()], dy)
    for got, want in zip(grads, reference_grads, strict=True):
        torch.testing.assert_close(got, want)


def test_module_signatures_follow_torch():
    assert kernels.LayerNorm(8, elementwise_affine=False).weight is None
    assert kernels.LayerNorm(8, bias=False).bias is None
    assert kernels.LayerNorm(8, dtype=torch.float16).weight.dtype == torch.float16
    rms = kernels.RMSNorm([2, 4], eps=None, dtype=torch.float16)
    x = torch.randn(3, 2, 4, dtype=torch.float16)
    eps = torch.finfo(torch.float16).eps  # what eps=None means, as in torch.nn.RMSNorm
    reference = torch.nn.functional.rms_norm(x.double(), [2, 4], eps=eps)
    # float32 arithmetic, then one rounding to float16 (unit roundoff 2^-11): within 2^-10 relative
    torch.testing.assert_close(rms(x).double(), reference, rtol=2**-10, atol=2**-20)


def test_wrong_trailing_shape_is_one_line():
    with pytest.raises(ValueError, match="trailing dimensions"):
        kernels.LayerNorm(8)(torch.randn(3, 7))


@pytest.mark.parametrize("call", [
    lambda x: kernels.layer_norm(x, None, None, 1e-5),
    lambda x: kernels.rms_norm(x, None, 1e-6),
    lambda x: kernels.dropout(x, 0.5, 0),
])
def test_bfloat16_on_cpu_is_refused_clearly(call):
    with pytest.raises(TypeError, match="bfloat16 on the CPU") as error:
        call(torch.randn(2, 8, dtype=torch.bfloat16))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(("weight", "bias", "match"), [
    (torch.ones(7), None, r"weight has shape \(7,\)"),
    (None, torch.ones(8, dtype=torch.float64), "float64"),
    (torch.ones(8).to(torch.int32), None, "int32"),
])
def test_bad_parameters_are_refused_clearly(weight, bias, match):
    with pytest.raises((TypeError, ValueError), match=match):
        kernels.layer_norm(torch.randn(2, 8), weight, bias, 1e-5)


def test_the_triton_builtin_declares_its_kernels():
    found = {k.kind: k for k in resolve("triton")}
    assert set(found) == {"layernorm", "rmsnorm", "dropout"}
    expected = (torch.float32, torch.float16, torch.bfloat16) if torch.cuda.is_available() else (
        torch.float32, torch.float16)
    assert all(k.dtypes == expected for k in found.values())
    x = torch.randn(3, 5, requires_grad=True)
    found["layernorm"].fn(x, torch.ones(5), torch.zeros(5), 1e-5).sum().backward()
    assert x.grad is not None
