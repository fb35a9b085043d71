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


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_the_compiled_launch_gives_what_triton_s_run_gives(dtype):
    """kernels.rows.launch_compiled: the first launch of a specialization through Triton's run, the next ones straight
    to the launcher (tests/test_kernels_launch.py checks the key and the arguments on the CPU). On the GPU: the same
    bits both ways, forward and backward; and a misaligned view (another specialization: a kernel compiled for
    16-byte aligned pointers would read it wrongly or fault) close to its aligned copy (the layout Triton picks, and
    with it the order of a sum, may follow the alignment)."""
    import kernels
    from kernels import rows

    rows.clear_launchers()
    generator = torch.Generator(device="cpu").manual_seed(0)
    base = torch.randn(65 * 1000 + 1, generator=generator).to(device="cuda", dtype=dtype)
    x = base[: 64 * 1000].view(64, 1000).requires_grad_()
    weight = torch.randn(1000, generator=generator).to(device="cuda", dtype=dtype).requires_grad_()
    bias = torch.randn(1000, generator=generator).to(device="cuda", dtype=dtype)
    dy = torch.randn(64, 1000, generator=generator).to(device="cuda", dtype=dtype)

    def forward_backward(x_in):
        y = kernels.layer_norm(x_in, weight, bias, 1e-5)
        return (y, *torch.autograd.grad(y, (x_in, weight), dy))

    first, second = forward_backward(x), forward_backward(x)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    misaligned = base[1: 1 + 64 * 1000].view(64, 1000).detach().requires_grad_()  # 2 or 4 bytes off 16
    aligned = misaligned.detach().clone().requires_grad_()
    eps = torch.finfo(dtype).eps  # a few units in the last place: another order of the same sums
    for a, b in zip(forward_backward(misaligned), forward_backward(aligned), strict=True):
        torch.testing.assert_close(a, b, rtol=8 * eps, atol=8 * eps * b.abs().max().item())
    assert len(rows._launchers) >= 4  # forward and backward kernels, aligned and misaligned x
