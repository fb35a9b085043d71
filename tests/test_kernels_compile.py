"""Our kernels compile for a CUDA GPU (sm_90, H100) here, without one: the launches the host code makes
(real arguments, dtypes, constexpr switches, None pointers) are recorded instead of run, then each is
compiled by Triton down to a cubin (Triton ships ptxas). This catches what the interpreter cannot see:
type errors in loop-carried values, constexpr branches, pointer arithmetic the compiler rejects.
"""

from __future__ import annotations

import inspect

import pytest
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction, mangle_type

from kernels import dropout_kernel, fused_norm, norm, rows

H100 = GPUTarget("cuda", 90, 32)


def record_launches(monkeypatch, host_call) -> list[tuple[JITFunction, dict, int]]:
    """Run ``host_call`` with every launch of our kernels (all go through ``kernels.rows.launch``) recorded
    (kernel, bound arguments, num_warps), not executed."""
    launches = []

    def record(kernel, grid, *args, **kwargs):
        names = set(kernel.arg_names)
        bound = inspect.signature(kernel.fn).bind(*args, **{k: v for k, v in kwargs.items() if k in names})
        bound.apply_defaults()
        launches.append((kernel, dict(bound.arguments), kwargs.get("num_warps", 4)))

    monkeypatch.setattr(rows, "launch", record)
    # the launch configuration an H100 (132 SMs) gets, not the interpreter's
    monkeypatch.setattr(rows, "config_for",
                        lambda n_cols, element_size, device: rows.launch_config(n_cols, element_size, "cuda", 132))
    host_call()
    return launches


def compile_for_cuda(kernel: JITFunction, arguments: dict, num_warps: int):
    """Compile as a launch with these arguments would: constexprs and None as constants, 1 kept as a value."""
    signature, constants = {}, {}
    for param in kernel.params:
        value = arguments[param.name]
        if param.is_constexpr or value is None:
            signature[param.name], constants[param.name] = "constexpr", value
        else:
            signature[param.name] = mangle_type(value)
    return triton.compile(ASTSource(kernel, signature, constants), target=H100, options={"num_warps": num_warps})


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
def test_norm_kernels_compile_for_h100(monkeypatch, rms, dtype, affine, d, strided):
    # bfloat16 launches are recorded, never run, so the interpreter's CPU refusal does not apply here.
    monkeypatch.setattr("kernels.rows.check_tensor", lambda *args, **kwargs: None)
    launches = record_launches(monkeypatch, lambda: _norm_round_trip(rms, dtype, affine, d, strided))
    assert len(launches) == (3 if affine else 2)  # forward 1; backward 1, + 1 for dgamma/dbeta
    for kernel, arguments, num_warps in launches:
        assert "cubin" in compile_for_cuda(kernel, arguments, num_warps).asm


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_dropout_kernel_compiles_for_h100(monkeypatch, dtype):
    monkeypatch.setattr("kernels.rows.check_tensor", lambda *args, **kwargs: None)
    launches = record_launches(monkeypatch, lambda: dropout_kernel.dropout(torch.empty(3000, dtype=dtype), 0.1, 2**40))
    ((kernel, arguments, num_warps),) = launches
    assert "cubin" in compile_for_cuda(kernel, arguments, num_warps).asm


FUSED_CASES = [  # (rms, dtype, d, residual_in_fp32, p): one block and several, dropout on and off
    (False, torch.float16, 1000, False, 0.1),
    (True, torch.bfloat16, 20000, True, 0.0),
]


def _fused_round_trip(rms: bool, dtype: torch.dtype, d: int, residual_in_fp32: bool, p: float) -> None:
    x, residual, weight = torch.empty(4, d, dtype=dtype), torch.empty(4, d, dtype=dtype), torch.empty(d, dtype=dtype)
    bias = None if rms else torch.empty(d, dtype=dtype)
    residual_dtype = torch.float32 if residual_in_fp32 else dtype
    y, h, mean, rstd = fused_norm.forward(x, residual, weight, bias, 1e-5, rms=rms, residual_dtype=residual_dtype,
                                          p=p, seed=3)
    norm.backward(torch.empty_like(y), h, weight, mean, rstd, rms=rms, need_dw=True, need_db=bias is not None,
                  dresidual=torch.empty_like(h), dx_dtype=torch.float32)


@pytest.mark.slow
@pytest.mark.parametrize(("rms", "dtype", "d", "residual_in_fp32", "p"), FUSED_CASES)
def test_fused_kernels_compile_for_h100(monkeypatch, rms, dtype, d, residual_in_fp32, p):
    launches = record_launches(monkeypatch, lambda: _fused_round_trip(rms, dtype, d, residual_in_fp32, p))
    assert len(launches) == 3  # forward 1; backward 1, + 1 for dgamma/dbeta
    for kernel, arguments, num_warps in launches:
        assert "cubin" in compile_for_cuda(kernel, arguments, num_warps).asm
