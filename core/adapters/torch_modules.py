"""The ``torch-module`` and ``torch-compile`` built-ins: ``torch.nn.LayerNorm`` / ``torch.nn.RMSNorm`` modules.

``torch-module`` runs the modules eagerly through the generic module path
(:mod:`core.adapters.modules`), ``torch-compile`` the same modules under
``torch.compile(dynamic=True)`` (TorchInductor; on a CPU it generates C++ and needs a C++
compiler). A compilation that would exceed Dynamo's recompile limit raises instead of
silently falling back to eager, so a pass is always a pass of the compiled code. Buffer donation
is turned off (``torch._functorch.config.donated_buffer = False``, process-wide, when the built-in
loads): with it, a compiled backward refuses ``retain_graph=True``, which the suite uses to take
several VJPs of one output; it changes memory use, not the numbers.
"""

from __future__ import annotations

import dataclasses
import os
import shutil

from core.kernel import Builtin, Kernel


def _load(spec: str, compile: bool) -> list[Kernel]:
    import torch
    import torch._functorch.config as functorch_config

    from core.adapters._thirdparty import COMPILED_TRITON
    from core.adapters.aten_statistics import LAYER_NORM
    from core.adapters.modules import kernel_from_module_class

    if compile:
        functorch_config.donated_buffer = False
    how = "torch.compile(nn.{})" if compile else "nn.{}"
    # Inductor compiles to Triton on a CUDA GPU, whose rsqrt flushes subnormals: on an H200 (torch 2.11) both compiled
    # modules returned NaN at the small end of ln/rms.affine, where var + eps is subnormal, as compiled Triton does
    flushes = COMPILED_TRITON if compile else ()
    return [
        dataclasses.replace(
            kernel_from_module_class(torch.nn.LayerNorm, spec, "layernorm", name=f"{spec}:layernorm",
                                     compile=compile, description=how.format("LayerNorm")),
            # eager nn.LayerNorm is aten.native_layer_norm; Inductor's decomposition (torch/_refs) casts mean and
            # rstd to the input dtype on the CPU too (docs/findings.md [F])
            **{**LAYER_NORM, "on_cuda": LAYER_NORM["on_cuda"] + flushes}, compiles_per_width=compile),
        dataclasses.replace(
            kernel_from_module_class(torch.nn.RMSNorm, spec, "rmsnorm", name=f"{spec}:rmsnorm", compile=compile,
                                     description=how.format("RMSNorm")), on_cuda=flushes, compiles_per_width=compile),
    ]


def _compile_unavailable() -> str | None:
    """Why torch.compile cannot run here (None: it can). On a CPU, Inductor compiles C++ with a compiler on PATH and
    caches it on disk under keys without ATen's forced capability: under ATEN_CPU_CAPABILITY a kernel built for another
    capability is loaded (garbage values, a corrupted heap: docs/findings.md [T1]), and such a run poisons the native
    runs' cache: torch-compile is unavailable while ATEN_CPU_CAPABILITY is set. A CUDA device compiles Triton code."""
    compilers = ("g++", "c++", "clang++")
    forced = os.environ.get("ATEN_CPU_CAPABILITY", "")
    if forced:  # decided without importing torch (`normverify list` imports nothing heavy)
        return (f"torch.compile's on-disk cache ignores ATEN_CPU_CAPABILITY={forced}: kernels built for another "
                f"capability are loaded (garbage values or a corrupted heap, docs/findings.md [T1]); unset it")
    if any(shutil.which(c) for c in compilers):
        return None
    import torch

    if torch.cuda.is_available():
        return None
    return f"torch.compile on a CPU needs a C++ compiler ({', '.join(compilers)}); none is on PATH"


BUILTINS = [
    Builtin("torch-module", "torch.nn.LayerNorm and torch.nn.RMSNorm modules (eager)",
            lambda: _load("torch-module", compile=False)),
    Builtin("torch-compile", "torch.nn.LayerNorm and torch.nn.RMSNorm under torch.compile (TorchInductor)",
            lambda: _load("torch-compile", compile=True), _compile_unavailable),
]
