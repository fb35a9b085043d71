"""The third-party built-ins compute what they claim to, under the suite's calling convention.

These check the adapters' plumbing (argument order, weight offset, None weight and bias, dtype,
gradients reaching the test's tensors) against float64 torch on the same rounded inputs; whether
the kernels conform to the derivations is the conformance run's business
(tests/test_thirdparty_conformance.py). Tolerances: the suite's own (properties.bounds.tolerance, through
properties.bounds.diagnosis for a kernel's declared conventions), far below the O(1) or O(1/d) error of a wrong
convention; an element without a finite bound fails.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from core.registry import builtins, resolve
from properties import outcome
from properties.bounds import models

LIGER = ["liger-layernorm", "liger-rmsnorm-llama", "liger-rmsnorm-gemma", "liger-rmsnorm-none"]
HF = ["hf-llama-rmsnorm", "hf-gemma-rmsnorm", "hf-t5-layernorm"]
TORCH = ["torch-module"]
COMPUTES_IN_STORAGE = {"liger-rmsnorm-none"}  # its casting mode "none" sums in the input dtype
NEEDS = {**dict.fromkeys(LIGER, "liger_kernel"), **dict.fromkeys(HF, "transformers")}


def kernels_of(spec: str):
    """The built-in's kernels; the test skips, with the reason, when the package it wraps is not installed."""
    if spec in NEEDS:
        pytest.importorskip(NEEDS[spec], reason=f"{spec} needs {NEEDS[spec]} (pip install 'normverify[thirdparty]')")
    return resolve(spec)


def kernel_for(spec: str):
    (kernel,) = kernels_of(spec)
    return kernel


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


def assert_close(got, expected, bound, what):
    """|got - expected| <= bound elementwise (the suite's tolerances), every element with a finite bound."""
    comparison = outcome.compare(got, expected, bound, what)
    assert comparison.unchecked == 0, f"{what}: {comparison.unchecked} elements without a finite bound"
    assert comparison.ratio <= 1.0, comparison.message


def assert_forward(kernel, y, x, weight, bias, eps, what):
    """The kernel's output against the oracle (or its declared conventions' model) within the derived bound."""
    expected, bound, _ = models.expected_forward(kernel, x, weight, bias, eps)
    assert_close(y, expected, bound, what)


def assert_gradients(kernel, x, weight, bias, eps, dy):
    """y, dx and dweight of ``run`` against the oracle and its VJP within the derived bounds."""
    y, dx, dweight = run(kernel, x, weight, bias, eps, dy)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert_forward(kernel, y, x, weight, bias if kernel.kind == "layernorm" else None, eps, f"{kernel.name} y")
    expected, bounds, _ = models.expected_backward(kernel, x, weight, eps, dy)
    assert_close(dx, expected["x"], bounds["x"], f"{kernel.name} dx")
    assert_close(dweight, expected["weight"], bounds["weight"], f"{kernel.name} dweight")


@pytest.mark.parametrize("spec", LIGER + HF + TORCH)
def test_builtin_is_listed_and_available_here(spec):
    assert kernels_of(spec)
    assert builtins()[spec].unavailable() is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("spec", LIGER + HF + TORCH)
def test_forward_and_gradients_match_float64_torch(spec, dtype):
    for kernel in kernels_of(spec):
        if spec in COMPUTES_IN_STORAGE:  # not a conforming kernel (docs/findings.md [D]): its plumbing, by its model
            kernel = dataclasses.replace(kernel, backward_precision="storage",
                                         conventions=("storage_accumulation", "storage_statistics_backward"))
        assert_gradients(kernel, *example(dtype)[:3], 1e-5, example(dtype)[3])


def test_torch_compile_matches_float64_torch():
    why = builtins()["torch-compile"].unavailable()
    if why:
        pytest.skip(why)
    for kernel in resolve("torch-compile"):
        x, weight, bias, dy = example(torch.float32, d=16, rows=3)
        assert_gradients(kernel, x, weight, bias, 1e-5, dy)


@pytest.mark.parametrize(("spec", "offset"), [("hf-gemma-rmsnorm", 1.0), ("liger-rmsnorm-gemma", 1.0),
                                              ("hf-llama-rmsnorm", 0.0), ("liger-rmsnorm-llama", 0.0)])
def test_weight_offset_is_declared_and_weight_zero_means_scale_offset(spec, offset):
    kernel = kernel_for(spec)
    assert kernel.weight_offset == offset
    x, _, _, _ = example(torch.float32)
    zero = torch.zeros(x.shape[-1])
    y = kernel.fn(x, zero, 1e-5)
    bound = models.expected_forward(kernel, x, zero, None, 1e-5)[1]
    assert_close(y, offset * F.rms_norm(x.double(), x.shape[-1:], None, 1e-5), bound, spec)


@pytest.mark.parametrize("spec", LIGER + HF + TORCH)
def test_none_weight_and_bias_mean_scale_one_and_shift_zero(spec):
    for kernel in kernels_of(spec):
        x, _, _, _ = example(torch.float32)
        if kernel.kind == "layernorm":
            y, expected = kernel.fn(x, None, None, 1e-5), F.layer_norm(x.double(), x.shape[-1:], None, None, 1e-5)
        else:
            y, expected = kernel.fn(x, None, 1e-5), F.rms_norm(x.double(), x.shape[-1:], None, 1e-5)
        assert_close(y, expected, models.expected_forward(kernel, x, None, None, 1e-5)[1], kernel.name)


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
