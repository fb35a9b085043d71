"""Flush-to-zero (issue 25, item 2): compiled CUDA arithmetic that flushes subnormals to zero, emulated in numpy/torch
on the CPU (tests/corpus/derived.py: squares, their mean and eps flushed; here var + eps flushed too), declared by
``Kernel.flush_to_zero``.

Where FTZ changes the result (proofs.error_model.underflow): t = var + eps below float32's smallest normal
N = 2^-126 becomes 0 and rstd = 1/sqrt(0) = inf; above it a flush removes at most N per operation, which the model's
underflow term eta = N bounds. Undeclared, such a kernel is caught on the subnormal-specific draws (the smallest end
of ln/rms.affine's and ln.variance_insensitivity's exponent range); declared, those draws are not made and the
identity claims give no false alarm."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from corpus.statistics import _normalize
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.adapters import _thirdparty, torch_modules, triton_ours
from core.guard import KernelFault
from core.registry import Kernel
from proofs import error_model
from properties.checks.affine import check_affine
from properties.checks.variance import check_normalized_variance
from properties.draws.regime_strategies import affine_examples, exponent_range, rows_with_variance_near_eps

N32 = 2.0**-126
U32 = 2.0**-24


def flushed(t: torch.Tensor) -> torch.Tensor:
    """t with subnormal values replaced by zero (FTZ results, DAZ operands)."""
    return torch.where(t.abs() < torch.finfo(t.dtype).tiny, torch.zeros_like(t), t)


def ftz_statistics(centre: bool):
    """float32 statistics that flush every subnormal: squares, their mean, eps and t = var + eps (so rstd = inf
    where t < N, as compiled Triton's tl.rsqrt does)."""
    def statistics(x: torch.Tensor, eps: float, storage: torch.dtype):
        mean = x.mean(-1, keepdim=True) if centre else torch.zeros_like(x[..., :1])
        variance = flushed(flushed((x - mean).square()).mean(-1, keepdim=True))
        epsilon = flushed(torch.full((), eps, dtype=torch.float32, device=x.device))
        return mean, torch.rsqrt(flushed(variance + epsilon))
    return statistics


def ftz_kernel(kind: str, declared: bool) -> Kernel:
    statistics = ftz_statistics(centre=kind == "layernorm")

    def layernorm(x, weight, bias, eps):
        return _normalize(x, weight, bias, eps, statistics)

    def rmsnorm(x, weight, eps):
        return _normalize(x, weight, None, eps, statistics)

    function = layernorm if kind == "layernorm" else rmsnorm
    kernel = Kernel(f"{kind}_ftz", kind, function, dtypes=(torch.float32,), device="cpu")
    return dataclasses.replace(kernel, flush_to_zero=declared)


def test_underflow_follows_the_declaration():
    assert error_model.underflow(U32) == 2.0**-150
    assert error_model.underflow(U32, flush_to_zero=True) == N32
    assert error_model.underflow(2.0**-53, flush_to_zero=True) == np.finfo(np.float64).tiny


def test_the_ftz_bound_is_inf_exactly_where_var_plus_eps_flushes():
    """A row of 8 with var = eps = 2^-128: t = 2^-127 < N flushes (rstd = inf under FTZ, numpy emulation); the FTZ
    bound is inf there and finite from flush_to_zero_floor on, where the IEEE bound was finite all along."""
    z = np.array([[1.0, -1.0] * 4])
    for s2, flushes in ((2.0**-127, True), (error_model.flush_to_zero_floor(8, U32), False)):
        x, eps = z * math.sqrt(s2 / 2), s2 / 2
        t = np.float32(np.mean(np.float32(x) ** 2)) + np.float32(eps)
        assert (abs(t) < np.finfo(np.float32).tiny) == flushes
        ftz = error_model.forward_bound(x, None, None, eps, U32, U32, "ln", "worst-case", flush_to_zero=True)
        ieee = error_model.forward_bound(x, None, None, eps, U32, U32, "ln", "worst-case")
        assert np.isfinite(ieee).all()
        assert np.isfinite(ftz).all() != flushes


def test_a_flush_to_zero_kernel_draws_no_subnormal_var_plus_eps():
    """The smallest end of the exponent range starts at flush_to_zero_floor for a declared kernel: 2^(2e) >= the
    floor > N, so neither eps/a^2 nor var + eps is subnormal; undeclared, it reaches 2^(2e) = 2^-128."""
    for d in (2, 64, 8192):
        lowest, _ = exponent_range(torch.float32, d, "smallest", flush_to_zero=True)
        assert 4.0**lowest >= error_model.flush_to_zero_floor(d, U32) > N32
    assert 4.0 ** exponent_range(torch.float32, 2, "smallest")[0] < N32


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_an_undeclared_flush_to_zero_kernel_fails_its_affine_identity_at_the_small_end(kind):
    """a = 2^54, eps/a^2 = 1e-5 / 2^108 (subnormal), x ~ 2^-62: the flushed statistics normalize by rstd = inf."""
    z = torch.randn(2, 64, generator=torch.Generator(device="cpu").manual_seed(0), dtype=torch.float64)
    example = {"x": (2.0**-62 * z).float(), "transformed": (2.0**-8 * z).float(), "a": 2.0**54, "eps": 1e-5}
    with pytest.raises(AssertionError):
        check_affine(ftz_kernel(kind, declared=False), **example)


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_a_declared_flush_to_zero_kernel_passes_the_affine_identity_at_the_small_end(kind, data):
    kernel = ftz_kernel(kind, declared=True)
    check_affine(kernel, **data.draw(affine_examples(kernel, "smallest", dtypes=(torch.float32,))))


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(data=st.data())
def test_a_declared_flush_to_zero_kernel_passes_variance_insensitivity_at_the_small_end(data):
    kernel = ftz_kernel("layernorm", declared=True)
    check_normalized_variance(kernel, **data.draw(rows_with_variance_near_eps(kernel, "smallest",
                                                                              dtypes=(torch.float32,))))


def test_an_undeclared_flush_to_zero_kernel_fails_variance_insensitivity_at_the_smallest_eps():
    """eps = 2^-128 (subnormal) and var = eps: t = 2^-127 flushes to 0."""
    z = torch.tensor([[1.0, -1.0] * 4], dtype=torch.float64, device="cpu")
    with pytest.raises((AssertionError, KernelFault)):  # NaN for finite input: a failed claim
        check_normalized_variance(ftz_kernel("layernorm", declared=False), (2.0**-64 * z).float(), 2.0**-128)


@pytest.mark.parametrize("cuda", [True, False])
def test_our_triton_built_ins_declare_flush_to_zero_where_they_compile(monkeypatch, cuda):
    """Compiled (a CUDA GPU visible: ours run there) Triton flushes subnormals; the interpreter on the CPU does not."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    norms = [k for k in triton_ours._load() if k.kind != "dropout"]
    assert [k.flush_to_zero for k in norms] == [cuda, cuda]


def _on(kernel: Kernel, device: str) -> bool:
    return kernel.for_device(device).flush_to_zero


def test_third_party_triton_and_torch_compile_flush_on_the_device_they_run_on():
    """Liger's Triton kernels and torch.compile's modules (Inductor's Triton on a CUDA GPU, NaN at the small end of the
    affine identity on an H200 as compiled Triton gives; its C++ on the CPU) declare flush-to-zero for a CUDA device
    only (Kernel.on_cuda): the same kernel run on the CPU of a GPU host (the interpreter, --device cpu) does not
    flush. Eager modules never do."""
    from core.registry import resolve

    liger = resolve("liger-rmsnorm-llama") + resolve("liger-groupnorm") + resolve("liger-fused-add-rmsnorm-llama")
    compiled = torch_modules._load("torch-compile", compile=True)
    for kernel in liger + compiled:
        assert (_on(kernel, "cuda"), _on(kernel, "cuda:1"), _on(kernel, "cpu")) == (True, True, False), kernel.name
    assert not any(_on(k, "cuda") for k in torch_modules._load("torch-module", compile=False))
    assert _thirdparty.COMPILED_TRITON == (("flush_to_zero", True),)
