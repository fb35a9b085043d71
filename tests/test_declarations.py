"""Declarations of what real kernels do by design, checked as declared (core.kernel.Kernel):

* ``no_gradient=("weight",)``: a frozen-weight kernel (no dW, as Unsloth's RMSNorm backward) has its dx checked
  and no weight gradient asked for; undeclared, the missing gradient is a failure, not a silent pass;
* ``in_place=("dy",)``: a backward writing dx into dy (Liger's ``in_place=True``) passes ``inputs_unmodified``
  when declared, fails it when not, and fails it when declared but dy does not hold dx.
"""

from __future__ import annotations

import pytest
import torch

from core.errors import UsageError
from core.kernel import Kernel
from properties.checks.contracts import check_inputs_unmodified
from properties.checks.gradients import check_vjp


def _rms(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    return x.float() * rstd, rstd


class FrozenWeightRMSNorm(torch.autograd.Function):
    """A correct RMSNorm whose backward returns dx only (the weight is frozen by design)."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        xhat, rstd = _rms(x, eps)
        ctx.save_for_backward(xhat, rstd, weight)
        return (xhat * weight.float()).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        xhat, rstd, weight = ctx.saved_tensors
        g = dy.float() * weight.float()
        dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
        return dx.to(dy.dtype), None, None


class DxIntoDyRMSNorm(FrozenWeightRMSNorm):
    """The same backward, writing dx into dy's buffer and returning it (``write`` False: returns a fresh dx)."""

    write = True

    @staticmethod
    def backward(ctx, dy):
        dx, _, _ = FrozenWeightRMSNorm.backward(ctx, dy)
        if not DxIntoDyRMSNorm.write:
            return dx, None, None
        dy.copy_(dx)
        return dy, None, None


def kernel(function, **declared) -> Kernel:
    return Kernel(function.__name__, "rmsnorm", lambda x, w, eps: function.apply(x, w, eps), dtypes=(torch.float32,),
                  device="cpu", **declared)


def example():
    generator = torch.Generator().manual_seed(0)
    return (torch.randn(4, 8, generator=generator), torch.randn(8, generator=generator) + 1.5,
            torch.randn(4, 8, generator=generator))


def test_a_declared_frozen_weight_has_its_dx_checked():
    x, weight, dy = example()
    check_vjp(kernel(FrozenWeightRMSNorm, no_gradient=("weight",)), x, weight, 1e-5, dy)


def test_an_undeclared_missing_weight_gradient_fails_the_jacobian_claim():
    x, weight, dy = example()
    with pytest.raises(AssertionError, match=r"no gradient for input 1 .* requires grad must get its gradient"):
        check_vjp(kernel(FrozenWeightRMSNorm), x, weight, 1e-5, dy)


def test_an_in_place_write_into_dy_is_checked_as_declared(monkeypatch):
    x, weight, dy = example()
    check_inputs_unmodified(kernel(DxIntoDyRMSNorm, no_gradient=("weight",), in_place=("dy",)), x, weight, 1e-5, dy)
    with pytest.raises(AssertionError, match="wrote into upstream gradient"):
        check_inputs_unmodified(kernel(DxIntoDyRMSNorm, no_gradient=("weight",)), x, weight, 1e-5, dy.clone())
    monkeypatch.setattr(DxIntoDyRMSNorm, "write", False)
    with pytest.raises(AssertionError, match="does not hold dx"):
        check_inputs_unmodified(kernel(DxIntoDyRMSNorm, no_gradient=("weight",), in_place=("dy",)), x, weight, 1e-5,
                                dy.clone())


def test_unknown_declarations_are_usage_errors():
    with pytest.raises(UsageError, match="no_gradient must be a subset"):
        kernel(FrozenWeightRMSNorm, no_gradient=("x",))
    with pytest.raises(UsageError, match="in_place"):
        kernel(FrozenWeightRMSNorm, in_place=("x",))
    with pytest.raises(UsageError, match="on_cuda may declare"):
        kernel(FrozenWeightRMSNorm, on_cuda=(("kind", "layernorm"),))


LAYER_NORM_BUILTINS = ("torch-fused", "torch-module")


@pytest.mark.parametrize("spec", LAYER_NORM_BUILTINS)
def test_builtin_declarations_follow_the_device_the_kernel_runs_on_not_the_host(spec, monkeypatch):
    """ATen's CPU layer_norm keeps 16-bit statistics, its CUDA one float32 (core.adapters.aten_statistics): a CPU
    run on a host with a GPU (torch.cuda.is_available() True) keeps the CPU declaration, and the same kernel on a
    CUDA device gets the CUDA one (the storage backward's convention going with it)."""
    from core.registry import resolve

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    layer_norms = [k for k in resolve(spec) if k.kind in ("layernorm", "add_layernorm", "dropout_add_layernorm")]
    assert layer_norms
    for found in layer_norms:
        assert found.backward_precision == "storage" and found.device is None, found.name
        on_cuda = found.for_device("cuda:0")
        assert (on_cuda.backward_precision, on_cuda.conventions, on_cuda.device) == ("float32", (), "cuda:0")
        assert found.for_device("cpu") is found


def _builtin_norms() -> list[Kernel]:
    """Every kernel of every built-in that loads here, dropout's aside (it has no norm)."""
    from core.registry import builtins, resolve

    return [kernel for name, builtin in builtins().items() if builtin.unavailable() is None
            for kernel in resolve(name) if kernel.record.norm is not None]


def test_every_builtin_on_cuda_has_its_plain_norm_view_and_storage_widths():
    """issue 25: torch-groupnorm declares affine_precision="storage" on CUDA, and the LayerNorm view the GroupNorm,
    BatchNorm and fused draws derive for their bounds kept it, so gn.jacobian and gn.inputs_unmodified raised
    UsageError on a GPU only. Every built-in, as it runs on CUDA, has a plain-norm view (Kernel.as_plain_norm) that
    keeps its precisions and drops what only its own kind may declare, and the storage-backward width limit
    computes for it."""
    from properties.draws.strategies import storage_backward_width

    kernels = _builtin_norms()
    assert {"torch-groupnorm", "torch-batchnorm", "torch-fused:add_layernorm"} <= {k.name for k in kernels}
    for kernel in kernels:
        for device in ("cpu", "cuda:0"):
            declared = kernel.for_device(device)
            plain = declared.as_plain_norm()
            assert plain.kind == declared.record.plain_norm and plain.record.plain, kernel.name
            assert (plain.backward_precision, plain.conventions, plain.flush_to_zero, plain.reduction) == (
                declared.backward_precision, declared.conventions, declared.flush_to_zero, declared.reduction)
            for dtype in (torch.float16, torch.bfloat16):
                width = storage_backward_width(declared, dtype)
                assert (width is None) == (declared.backward_precision != "storage"), kernel.name
