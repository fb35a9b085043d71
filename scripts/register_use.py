"""Registers and spills of our norm kernels compiled for an H100, without a GPU (issue 30: the block caps of
kernels.rows).

    /work/main/.venv/bin/python scripts/register_use.py [--width 8192 --width 16384] [--dtype bfloat16 ...]

For each width and dtype, the launches a forward and backward of LayerNorm, RMSNorm and their fused add + norm
(with and without dropout, the residual in float32 or in x's dtype) make are recorded (kernels.offline_compile),
compiled by Triton for sm_90 and assembled by Triton's bundled ptxas, which reports each kernel's registers per
thread and bytes of spill stores. A row program of 16 warps may hold 128 registers a thread; past that ptxas spills
to local memory, and a kernel that reads its row once to keep it in registers loses the point of it.
"""

from __future__ import annotations

import argparse

import torch

from kernels import fused_norm, norm
from kernels.offline_compile import compile_for_cuda, recorded_launches, register_use

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def host_calls(d: int, dtype: torch.dtype) -> dict[str, object]:
    """Name -> a call of our host code whose launches are the kernels to measure."""

    def plain(rms: bool):
        def call():
            x, weight = torch.empty(4, d, dtype=dtype), torch.empty(d, dtype=dtype)
            bias = None if rms else torch.empty(d, dtype=dtype)
            y, mean, rstd = norm.forward(x, weight, bias, 1e-5, rms=rms)
            norm.backward(torch.empty_like(y), x, weight, mean, rstd, rms=rms, need_dw=True, need_db=not rms)
        return call

    def fused(rms: bool, p: float, residual_dtype: torch.dtype):
        def call():
            x, weight = torch.empty(4, d, dtype=dtype), torch.empty(d, dtype=dtype)
            residual = torch.empty(4, d, dtype=residual_dtype)
            bias = None if rms else torch.empty(d, dtype=dtype)
            fused_norm.forward(x, residual, weight, bias, 1e-5, rms=rms, residual_dtype=residual_dtype, p=p, seed=1)
        return call

    calls = {"layernorm": plain(False), "rmsnorm": plain(True)}
    for rms, name in ((False, "add+layernorm"), (True, "add+rmsnorm")):
        for p in (0.0, 0.1):
            for residual_dtype in {dtype, torch.float32}:
                label = f"{name}{' dropout' if p else ''}{' residual fp32' if residual_dtype != dtype else ''}"
                calls[label] = fused(rms, p, residual_dtype)
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, action="append", help="row width d (repeatable; default 8192, 16384)")
    parser.add_argument("--dtype", choices=DTYPES, action="append", help="(repeatable; default bfloat16, float32)")
    args = parser.parse_args()
    print(f"{'d':>6} {'dtype':9} {'call':30} {'kernel':26} {'BLOCK':>6} {'warps':>5} {'registers':>9} {'spills':>6}")
    for d in args.width or [8192, 16384]:
        for dtype_name in args.dtype or ["bfloat16", "float32"]:
            for label, call in host_calls(d, DTYPES[dtype_name]).items():
                with recorded_launches() as launches:
                    call()
                for launch in launches:
                    use = register_use(compile_for_cuda(launch))
                    print(f"{d:>6} {dtype_name:9} {label:30} {launch.kernel.fn.__name__:26} "
                          f"{launch.arguments.get('BLOCK') or '-':>6} {launch.num_warps:>5} {use.registers:>9} "
                          f"{use.spill_bytes:>6}", flush=True)


if __name__ == "__main__":
    main()
