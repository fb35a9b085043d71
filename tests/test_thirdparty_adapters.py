"""The third-party built-ins compute what they claim to, under the suite's calling convention.

These check the adapters' plumbing (argument order, weight offset, None weight and bias, dtype,
gradients reaching the test's tensors) against float64 torch on the same rounded inputs; whether
the kernels conform to the derivations is the conformance run's business
(tests/test_thirdparty_conformance.py). Tolerances: a few unit roundoffs of the storage dtype
times the output's magnitude, far below the O(1) or O(1/d) error of a wrong convention.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from core.registry import builtins, resolve

LIGER = ["liger-layernorm", "liger-rmsnorm-llama", "liger-rmsnorm-gemma", "liger-rmsnorm-none"]
HF = ["hf-llama-rmsnorm", "hf-gemma-rmsnorm", "hf-t5-layernorm"]
TORCH = ["torch-module"]
NEEDS = {**dict.fromkeys(LIGER, "liger_kernel"), **dict.fromkeys(HF, "transformers")}
UNIT_ROUNDOFF = {torch.float32: 2.0**-24, torch.float16: 2.0**-11}


def kernels_of(spec: str):
    """The built-in's kernels; the test skips, with the reason, when the package it wraps is not installed."""
    if spec in NEEDS:
        pytest.importorskip(NEEDS[spec], reason=f"{spec} needs {NEEDS[spec]} (pip install 'normverify[thirdparty]')")
    return resolve(spec)


def kernel_for(spec: str):
    (kernel,) = kernels_of(spec)
    return kernel


def reference(kernel, x, weight, bias, eps, dy):
    """(y, dx, dweight) in float64 through torch, with the kernel's effective weight ``offset + weight``."""
    x64 = x.detach().double().requires_grad_()
    w64 = weight.detach().double().requires_grad_()
    effective = kernel.weight_offset + w64
    if kernel.kind == "layernorm":
        y = F.layer_norm(x64, x.shape[-1:], effective, bias.double(), eps)
    else:
        y = F.rms_norm(x64, x.shape[-1:], effective, eps)
    y.backward(dy.double())
    return y.detach(), x64.grad, w64.grad


def run(kernel, x, weight, bias, eps, dy):
    x = x.clone().requires_grad_()
    weight = weight.clone().requires_grad_()
    args = (x, weight, bias, eps) if kernel.kind == "layernorm" else (x, weight, eps)
    y = kernel.fn(*args)
    y.backward(dy.clone())  # a copy: Liger's in-place backward writes dX into it
    return y, x.grad, weight.grad


def example(dtype, d=48, rows=5, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, d, generator=generator) + 0.5).to(dtype)
    weight = (torch.randn(d, generator=generator) * 0.5).to(dtype)
    bias = torch.randn(d, generator=generator).to(dtype)
    dy = torch.randn(rows, d, generator=generator).to(dtype)
    return x, weight, bias, dy


def assert_close(got, expected, dtype, what, spread=16):
    """|got - expected| <= spread * u * max|expected|: rounding of the storage dtype, not a convention error."""
    tolerance = spread * UNIT_ROUNDOFF[dtype] * float(expected.abs().max())
    error = float((got.detach().double() - expected).abs().max())
    assert error <= tolerance, f"{what}: max error {error:.3g} > {tolerance:.3g}"


@pytest.mark.parametrize("spec", LIGER + HF + TORCH)
def test_builtin_is_listed_and_available_here(spec):
    assert kernels_of(spec)
    assert builtins()[spec].unavailable() is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("spec", LIGER + HF + TORCH)
def test_forward_and_gradients_match_float64_torch(spec, dtype):
    for kernel in kernels_of(spec):
        x, weight, bias, dy = example(dtype)
        y, dx, dweight = run(kernel, x, weight, bias, 1e-5, dy)
        assert y.dtype == dtype and y.shape == x.shape
        y_ref, dx_ref, dweight_ref = reference(kernel, x, weight, bias, 1e-5, dy)
        assert_close(y, y_ref, dtype, f"{kernel.name} y")
        assert_close(dx, dx_ref, dtype, f"{kernel.name} dx")
        # dweight sums rows x d products: the sum's length enters its rounding error
        assert_close(dweight, dweight_ref, dtype, f"{kernel.name} dweight", spread=16 * x.shape[0])


def test_torch_compile_matches_float64_torch():
    for kernel in resolve("torch-compile"):
        x, weight, bias, dy = example(torch.float32, d=16, rows=3)
        y, dx, dweight = run(kernel, x, weight, bias, 1e-5, dy)
        y_ref, dx_ref, dweight_ref = reference(kernel, x, weight, bias, 1e-5, dy)
        assert_close(y, y_ref, torch.float32, f"{kernel.name} y")
        assert_close(dx, dx_ref, torch.float32, f"{kernel.name} dx")
        assert_close(dweight, dweight_ref, torch.float32, f"{kernel.name} dweight", spread=64)


@pytest.mark.parametrize(("spec", "offset"), [("hf-gemma-rmsnorm", 1.0), ("liger-rmsnorm-gemma", 1.0),
                                              ("hf-llama-rmsnorm", 0.0), ("liger-rmsnorm-llama", 0.0)])
def test_weight_offset_is_declared_and_weight_zero_means_scale_offset(spec, offset):
    kernel = kernel_for(spec)
    assert kernel.weight_offset == offset
    x, _, _, _ = example(torch.float32)
    y = kernel.fn(x, torch.zeros(x.shape[-1]), 1e-5)
    assert_close(y, offset * F.rms_norm(x.double(), x.shape[-1:], None, 1e-5), torch.float32, spec)


@pytest.mark.parametrize("spec", LIGER + HF + TORCH)
def test_none_weight_and_bias_mean_scale_one_and_shift_zero(spec):
    for kernel in kernels_of(spec):
        x, _, _, _ = example(torch.float32)
        if kernel.kind == "layernorm":
            y, expected = kernel.fn(x, None, None, 1e-5), F.layer_norm(x.double(), x.shape[-1:], None, None, 1e-5)
        else:
            y, expected = kernel.fn(x, None, 1e-5), F.rms_norm(x.double(), x.shape[-1:], None, 1e-5)
        assert_close(y, expected, torch.float32, kernel.name)


def test_liger_rmsnorm_default_backward_writes_into_the_upstream_gradient():
    """Liger's ``in_place=True`` default, kept by the built-ins: the finding behind ``rms.inputs_unmodified``."""
    kernel = kernel_for("liger-rmsnorm-llama")
    x, weight, _, dy = example(torch.float32)
    x.requires_grad_()
    upstream = dy.clone()
    kernel.fn(x, weight, 1e-5).backward(upstream)
    assert torch.equal(upstream, x.grad)  # the buffer now holds dX
    assert not torch.equal(upstream, dy)


def test_liger_rmsnorm_with_in_place_false_leaves_the_upstream_gradient_alone():
    """The contrast docs/findings.md [C] draws: the write into dy is Liger's default, not its only mode."""
    pytest.importorskip("liger_kernel", reason="needs liger_kernel (pip install 'normverify[thirdparty]')")
    kernels_of("liger-rmsnorm-llama")  # the interpreter layer, as the built-in enables it
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    x, weight, _, dy = example(torch.float32)
    x.requires_grad_()
    upstream = dy.clone()
    LigerRMSNormFunction.apply(x, weight, 1e-5, 0.0, "llama", False).backward(upstream)
    assert torch.equal(upstream, dy)


def test_liger_runs_on_cpu_tensors_through_the_interpreter_and_refuses_bfloat16():
    kernel = kernel_for("liger-rmsnorm-gemma")
    x = torch.randn(2, 8, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="bfloat16"):
        kernel.fn(x, torch.zeros(8, dtype=torch.bfloat16), 1e-6)
