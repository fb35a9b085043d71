"""torch's batch_norm built-ins as they run on each device (docs/findings.md [R9], [R11]); the CUDA behaviour is
emulated on the CPU so that CI checks the declarations without a GPU, and checked on CUDA where one is present."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from core.registry import resolve
from properties.checks.batchnorm import check_vjp
from properties.outcome import CheckFailure
from properties.run.expectations import BUILTIN_DEVIATIONS, bias_without_weight

# [R11]'s example: one channel of 5 float16 values, dy = x (the exact dx ~ eps / var is small against its terms)
X = [1.5410, -0.2935, -2.1797, 0.5684, -1.0850]


def example(device: str, dtype: torch.dtype = torch.float16) -> dict:
    x = torch.tensor([[X]], dtype=dtype, device=device)
    return {"x": x, "running_mean": None, "running_var": None, "weight": None, "bias": None, "training": True,
            "momentum": 0.1, "eps": 1e-5, "dy": x.clone()}


class CudaBatchNormBackward(torch.autograd.Function):
    """torch 2.11's CUDA batch_norm training backward (aten/src/ATen/native/cuda/Normalization.cuh), on any device:
    float32 statistics, the reduction's terms g (x - mean) each rounded to x's dtype (GradOp's
    ``Float2<scalar_t, accscalar_t>(g, g * c)``) and summed in float32, dx = (g - mean(g) - (x - mean) proj) invstd."""

    @staticmethod
    def forward(ctx, x, eps):
        rows = x.float().transpose(0, 1).reshape(x.shape[1], -1)
        mean, invstd = rows.mean(-1), torch.rsqrt(rows.var(-1, unbiased=False) + eps)
        ctx.save_for_backward(x, mean, invstd)
        shape = (1, -1) + (1,) * (x.dim() - 2)
        return ((x.float() - mean.reshape(shape)) * invstd.reshape(shape)).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, mean, invstd = ctx.saved_tensors
        shape = (1, -1) + (1,) * (x.dim() - 2)
        centred, g = x.float() - mean.reshape(shape), dy.float()
        dims = [d for d in range(x.dim()) if d != 1]
        count = x.numel() // x.shape[1]
        terms = (g * centred).to(x.dtype).float()
        projection = (terms.sum(dims) / count * invstd * invstd).reshape(shape)
        dx = (g - (g.sum(dims) / count).reshape(shape) - centred * projection) * invstd.reshape(shape)
        return dx.to(x.dtype), None


def cuda_formula(x, running_mean, running_var, weight, bias, training, momentum, eps):
    return CudaBatchNormBackward.apply(x, eps)


def test_the_cuda_backward_formula_fails_undeclared_and_passes_as_declared():
    """[R11]: the CUDA formula, emulated on the CPU, fails bn.jacobian with float32 backward sums declared and
    passes with the storage-precision backward that the torch built-ins declare on CUDA."""
    (torch_batchnorm,) = resolve("torch-batchnorm")
    on_cuda = torch_batchnorm.for_device("cuda")
    assert on_cuda.backward_precision == "storage" and on_cuda.affine_precision == "float32"
    emulated = dataclasses.replace(on_cuda, name="cuda-formula", fn=cuda_formula, device="cpu")
    check_vjp(emulated, **example("cpu"))
    undeclared = dataclasses.replace(emulated, backward_precision="float32", conventions=())
    with pytest.raises(CheckFailure, match=r"^dx"):
        check_vjp(undeclared, **example("cpu"))


@pytest.mark.parametrize("dims", [3, 4])
def test_the_cuda_bias_without_weight_deviations_name_cuda_examples_only(dims):
    """[R11]: the two declared deviations (a raise on 3-D x, dbias = 0 on 4-D) apply to CUDA examples with a bias
    and no weight, never to a CPU example, where torch's backward is right."""
    x = torch.randn((2, 3, 4, 5)[:dims])
    cpu = {"x": x, "weight": None, "bias": torch.zeros(3), "eps": 1e-5}
    named = [d for d in BUILTIN_DEVIATIONS if "torch-batchnorm" in d.kernels]
    assert {d.fault for d in named} == {"raised", "value"}
    assert bias_without_weight(cpu) and not any(d.applies(cpu) for d in named)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's CUDA batch_norm needs a CUDA device")
@pytest.mark.cuda
def test_the_cuda_backward_passes_as_declared():
    (kernel,) = resolve("torch-batchnorm")
    check_vjp(kernel.for_device("cuda"), **example("cuda"))
