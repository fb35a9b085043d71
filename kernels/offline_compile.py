"""Our kernels compiled for a CUDA GPU without one: the launches our host code makes are recorded instead of run
(:func:`recorded_launches`), each is compiled by Triton for sm_90 (H100) down to a cubin (:func:`compile_for_cuda`;
Triton ships ptxas), and ptxas reports each kernel's registers and spills (:func:`register_use`).

Used by tests/test_kernels_compile.py (compiler-only errors, no spills where the launch rule says a row fits in
registers) and scripts/register_use.py (the table behind kernels.rows' block caps).
"""

from __future__ import annotations

import inspect
import re
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction, mangle_type

from kernels import rows

H100 = GPUTarget("cuda", 90, 32)
H100_SMS = 132
# ptxas of Triton's bundle that reads the PTX version Triton writes (the plain ptxas there is one CUDA release older)
PTXAS = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas-blackwell"


@dataclass(frozen=True)
class Launch:
    kernel: JITFunction
    arguments: dict  # by parameter name, as bound at the launch (constexprs included)
    num_warps: int


@contextmanager
def recorded_launches() -> Iterator[list[Launch]]:
    """Within: every launch of our kernels (all go through ``kernels.rows.launch``) is recorded, not run, with the
    launch configuration an H100 (132 SMs) gets, and input checks off (bfloat16 launches are never run here, so the
    interpreter's CPU refusal does not apply)."""
    launches: list[Launch] = []

    def record(kernel, grid, *args, **kwargs):
        names = set(kernel.arg_names)
        bound = inspect.signature(kernel.fn).bind(*args, **{k: v for k, v in kwargs.items() if k in names})
        bound.apply_defaults()
        launches.append(Launch(kernel, dict(bound.arguments), kwargs.get("num_warps", 4)))

    saved = rows.launch, rows.config_for, rows.check_tensor
    rows.launch = record
    rows.config_for = lambda n_cols, element_size, device: rows.launch_config(n_cols, element_size, "cuda", H100_SMS)
    rows.check_tensor = lambda *args, **kwargs: None
    try:
        yield launches
    finally:
        rows.launch, rows.config_for, rows.check_tensor = saved


def compile_for_cuda(launch: Launch) -> triton.compiler.CompiledKernel:
    """Compile as the launch would: constexprs and None as constants, 1 kept as a value."""
    signature, constants = {}, {}
    for param in launch.kernel.params:
        value = launch.arguments[param.name]
        if param.is_constexpr or value is None:
            signature[param.name], constants[param.name] = "constexpr", value
        else:
            signature[param.name] = mangle_type(value)
    return triton.compile(ASTSource(launch.kernel, signature, constants), target=H100,
                          options={"num_warps": launch.num_warps})


@dataclass(frozen=True)
class RegisterUse:
    registers: int  # per thread
    spill_bytes: int  # spill stores per thread


def register_use(compiled: triton.compiler.CompiledKernel) -> RegisterUse:
    """ptxas' verbose report of the compiled kernel's PTX for sm_90a: registers per thread and bytes of spill
    stores."""
    with tempfile.TemporaryDirectory() as folder:
        ptx = Path(folder) / "kernel.ptx"
        ptx.write_text(compiled.asm["ptx"])
        done = subprocess.run([str(PTXAS), "-arch=sm_90a", "-v", str(ptx), "-o", str(Path(folder) / "kernel.cubin")],
                   capture_output=True, text=True, check=True)
    report = done.stdout + done.stderr
    registers = re.search(r"Used (\d+) registers", report)
    spills = re.search(r"(\d+) bytes spill stores", report)
    if registers is None or spills is None:
        raise RuntimeError(f"ptxas reported no register use: {report.strip()[-300:]}")
    return RegisterUse(int(registers.group(1)), int(spills.group(1)))
