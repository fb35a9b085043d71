"""Our kernels compile for a CUDA GPU (sm_90, H100) here, without one: the launches the host code makes
(real arguments, dtypes, constexpr switches, None pointers) are recorded instead of run, then each is
compiled by Triton down to a cubin (Triton ships ptxas). This catches what the interpreter cannot see:
type errors in loop-carried values, constexpr branches, pointer arithmetic the compiler rejects.
"""

from __future__ import annotations

import pytest
import torch

from kernels import dropout_kernel, fused_norm, norm
from kernels.offline_compile import compile_for_cuda, recorded_launches, register_use


def record_launches(host_call) -> list:
    """The launches ``host_call`` makes, recorded (kernels.offline_compile.recorded_launches), not run."""
    with recorded_launches() as launches:
        host_call()
    return launches


def _norm_round_trip(rms: bool, dtype: torch.dtype, affine: bool, d: int, strided: bool) -> None:
    x = torch.empty(4, 2 * d if strided else d, dtype=dtype)[:, ::2] if strided else torch.empty(4, d, dtype=dtype)
    weight = torch.empty(d, dtype=dtype) if affine else None
    bias = torch.empty(d, dtype=dtype) if affine and not rms else None
    y, mean, rstd = norm.forward(x, weight, bias, 1e-5, rms=rms)
    norm.backward(torch.empty_like(y), x, weight, mean, rstd, rms=rms, need_dw=affine, need_db=bias is not None)


CASES = [  # (rms, dtype, affine, d, strided): fused and column-parallel dgamma paths, all dtypes, None pointers
    (False, torch.float16, True, 1000, False),
    (True, torch.bfloat16, True, 20000, False),
    (False, torch.float32, False, 20000, True),
    (True, torch.float32, False, 7, True),
]


@pytest.mark.slow
@pytest.mark.parametrize(("rms", "dtype", "affine", "d", "strided"), CASES)
def test_norm_kernels_compile_for_h100(rms, dtype, affine, d, strided):
    launches = record_launches(lambda: _norm_round_trip(rms, dtype, affine, d, strided))
    assert len(launches) == (3 if affine else 2)  # forward 1; backward 1, + 1 for dgamma/dbeta
    for launch in launches:
        assert "cubin" in compile_for_cuda(launch).asm


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_dropout_kernel_compiles_for_h100(dtype):
    (launch,) = record_launches(lambda: dropout_kernel.dropout(torch.empty(3000, dtype=dtype), 0.1, 2**40))
    assert "cubin" in compile_for_cuda(launch).asm


FUSED_CASES = [  # (rms, dtype, d, residual_in_fp32, p): one block and several, dropout on and off
    (False, torch.float16, 1000, False, 0.1),
    (True, torch.bfloat16, 20000, True, 0.1),
]


def _fused_round_trip(rms: bool, dtype: torch.dtype, d: int, residual_in_fp32: bool, p: float) -> None:
    x, residual, weight = torch.empty(4, d, dtype=dtype), torch.empty(4, d, dtype=dtype), torch.empty(d, dtype=dtype)
    bias = None if rms else torch.empty(d, dtype=dtype)
    residual_dtype = torch.float32 if residual_in_fp32 else dtype
    y, h, mean, rstd = fused_norm.forward(x, residual, weight, bias, 1e-5, rms=rms, residual_dtype=residual_dtype,
                                          p=p, seed=3)
    norm.backward(torch.empty_like(y), h, weight, mean, rstd, rms=rms, need_dw=True, need_db=bias is not None,
                  dresidual=torch.empty_like(h), dx_dtype=residual_dtype, branch=torch.empty_like(x), p=p, seed=3)


@pytest.mark.slow
@pytest.mark.parametrize(("rms", "dtype", "d", "residual_in_fp32", "p"), FUSED_CASES)
def test_fused_kernels_compile_for_h100(rms, dtype, d, residual_in_fp32, p):
    launches = record_launches(lambda: _fused_round_trip(rms, dtype, d, residual_in_fp32, p))
    assert len(launches) == 3  # forward 1; backward 1, + 1 for dgamma/dbeta (dx and dresidual written together)
    for launch in launches:
        assert "cubin" in compile_for_cuda(launch).asm


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("rms", [False, True], ids=["layernorm", "rmsnorm"])
def test_the_plain_forward_holds_a_row_of_16384_without_spilling(rms, dtype):
    """kernels.rows.FORWARD_MAX_BLOCK: the plain forward reads a row of 16384 once, in one block of 16 warps, and
    ptxas keeps it in registers (a spill would make the single read slower than the looped one it replaces)."""
    d = 16384
    (launch,) = record_launches(lambda: norm.forward(torch.empty(4, d, dtype=dtype), torch.empty(d, dtype=dtype),
                                                     None if rms else torch.empty(d, dtype=dtype), 1e-5, rms=rms))
    assert launch.arguments["BLOCK"] == d and launch.arguments["SINGLE_BLOCK"]
    assert register_use(compile_for_cuda(launch)).spill_bytes == 0


@pytest.mark.slow
def test_the_rmsnorm_backward_holds_a_row_of_16384_in_32_warps_with_little_spilling():
    """kernels.rows.RMS_BACKWARD_MAX_BLOCK and backward_num_warps: RMSNorm's backward row kernel reads a row of 16384
    once (x, dy, gamma and the dgamma accumulator held), in 32 warps of 64 registers a thread; ptxas spills about
    0.5 KB a thread there (2.4-2.8 KB over 16 warps). LayerNorm's keeps blocks of 8192 (measured slower at 16384)."""
    d = 16384
    x, weight = torch.empty(4, d), torch.empty(d)
    row_kernel, _ = record_launches(lambda: norm.backward(torch.empty_like(x), x, weight, None, torch.empty(4),
                                                          rms=True, need_dw=True, need_db=False))
    assert row_kernel.arguments["BLOCK"] == d and row_kernel.arguments["SINGLE_BLOCK"] and row_kernel.num_warps == 32
    assert register_use(compile_for_cuda(row_kernel)).spill_bytes < 1024
    layernorm_row_kernel, _ = record_launches(lambda: norm.backward(
        torch.empty_like(x), x, weight, torch.empty(4), torch.empty(4), rms=False, need_dw=True, need_db=True))
    assert layernorm_row_kernel.arguments["BLOCK"] == 8192 and not layernorm_row_kernel.arguments["SINGLE_BLOCK"]


@pytest.mark.parametrize(("residual_dtype", "p"), [(torch.float16, 0.0), (torch.float16, 0.1), (torch.float32, 0.0)],
                         ids=["same-dtypes", "dropout", "float32-residual"])
def test_the_fused_backward_is_two_launches_with_dropout_and_differing_dtypes(residual_dtype, p):
    """Issue 30: forward 1 launch, backward at most 2 (the row kernel writing dx and dresidual, each in its dtype and
    the branch's masked by dropout, then the dgamma/dbeta sums): no dropout kernel and no cast after them."""
    d = 64
    x = torch.randn(4, d, dtype=torch.float16, requires_grad=True)
    residual = torch.randn(4, d, dtype=residual_dtype, requires_grad=True)
    weight, bias = (torch.ones(d, dtype=torch.float16, requires_grad=True) for _ in range(2))

    def forward_and_backward() -> None:
        y, h = fused_norm.dropout_add_layer_norm(x, residual, weight, bias, 1e-5, p, 3)
        torch.autograd.grad((y, h), (x, residual, weight, bias), (torch.ones_like(y), torch.ones_like(h)))

    names = [launch.kernel.fn.__name__ for launch in record_launches(forward_and_backward)]
    assert names == ["_add_norm_forward", "_norm_backward_input", "_sum_partials"]
