"""Checks that need a CUDA GPU (marker ``cuda``: skipped without one; scripts/gpu_check.py runs them with -m cuda).
Their CPU counterparts: tests/test_device_discipline.py (the scan) and tests/test_flush_to_zero.py (FTZ emulated)."""

from __future__ import annotations

import pytest
import torch

from core.registry import resolve
from properties.checks.spectral_norm import check_matrix_free_spectral_norm

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _kernel(spec: str, kind: str):
    (kernel,) = [k for k in resolve(spec) if k.kind == kind]
    return kernel


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_matrix_free_spectral_norm_with_per_feature_gamma_runs_on_cuda(kind):
    """issue 25: the derived direction (numpy) was added to the CUDA start as a CPU tensor."""
    generator = torch.Generator(device="cpu").manual_seed(0)
    x = torch.randn(1, 4096, generator=generator, device="cpu").to("cuda")
    weight = (1 + 0.5 * torch.randn(4096, generator=generator, device="cpu")).to("cuda")
    start = torch.randn(1, 4096, generator=generator, device="cpu").to("cuda")
    check_matrix_free_spectral_norm(_kernel("torch", kind), x, 1e-5, start, weight)


def test_compiled_triton_declares_flush_to_zero():
    assert _kernel("triton", "layernorm").flush_to_zero and _kernel("triton", "rmsnorm").flush_to_zero
