"""kernels.LayerNorm / kernels.RMSNorm as drop-ins for torch.nn's, the functional checks, the 'triton' built-in.

Values are compared with the float64 oracle within the suite's tolerances (properties.bounds.tolerance), over the
normalized trailing dimensions flattened into rows.
"""

from __future__ import annotations

import pytest
import torch

import kernels
from core.kernel import Kernel
from core.registry import resolve
from properties import norms, outcome
from properties.bounds import tolerance


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
    y = mine(x)
    assert y.shape == reference(x).shape
    dy = torch.randn_like(y)
    grads = dict(zip(("x", "weight", "bias"), torch.autograd.grad(y, [x, *mine.parameters()], dy), strict=False))
    kind = "layernorm" if isinstance(mine, kernels.LayerNorm) else "rmsnorm"
    eps = mine.eps if mine.eps is not None else torch.finfo(x.dtype).eps
    assert_matches_the_oracle(kind, mine, x, y, dy, grads, eps)


def assert_matches_the_oracle(kind, module, x, y, dy, grads, eps):
    """y and every gradient within the suite's bounds of the float64 oracle, rows = the flattened trailing dims."""
    kernel = Kernel(f"module:{kind}", kind, kernels.layer_norm if kind == "layernorm" else kernels.rms_norm)
    d = module.weight.numel()
    weight, bias = module.weight.detach().reshape(d), getattr(module, "bias", None)
    bias = None if bias is None else bias.detach().reshape(d)
    rows, upstream = x.detach().reshape(-1, d), dy.reshape(-1, d)
    expected = {"y": norms.reference(kernel, rows, weight, bias, eps),
                **norms.reference_vjp(kernel, rows, weight, eps, upstream)}
    bounds = {"y": tolerance.forward(kernel, rows, weight, bias, eps),
              **tolerance.backward(kernel, rows, weight, eps, upstream)}
    for name, got in {"y": y.detach(), **grads}.items():
        comparison = outcome.compare(got.reshape(expected[name].shape), expected[name], bounds[name], name)
        assert comparison.unchecked == 0 and comparison.ratio <= 1.0, comparison.message


def test_module_signatures_follow_torch():
    assert kernels.LayerNorm(8, elementwise_affine=False).weight is None
    assert kernels.LayerNorm(8, bias=False).bias is None
    assert kernels.LayerNorm(8, dtype=torch.float16).weight.dtype == torch.float16
    rms = kernels.RMSNorm([2, 4], eps=None, dtype=torch.float16)
    x = torch.randn(3, 2, 4, dtype=torch.float16)
    eps = torch.finfo(torch.float16).eps  # what eps=None means, as in torch.nn.RMSNorm
    kernel = Kernel("module:rmsnorm", "rmsnorm", kernels.rms_norm)
    rows = x.reshape(3, 8)
    comparison = outcome.compare(rms(x).reshape(3, 8), norms.reference(kernel, rows, None, None, eps),
                                 tolerance.forward(kernel, rows, None, None, eps), "y")
    assert comparison.unchecked == 0 and comparison.ratio <= 1.0, comparison.message


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
