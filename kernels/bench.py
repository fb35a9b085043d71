"""GPU benchmark: GB/s of our LayerNorm/RMSNorm against torch (and Liger-Kernel when installed).

Bandwidth counts the bytes a norm must move at least, over the measured time (median of
``triton.testing.do_bench``):

    forward:            read x, write y                          2 n d s
    forward + backward: the forward, then read x and dy, write dx 5 n d s

(n rows of width d, s bytes per element; weight, bias and the fp32 statistics are O(n + d) and not
counted). Needs a CUDA device; the interpreter's timings say nothing about a GPU.
"""

from __future__ import annotations

import csv
import importlib.util
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F

import kernels

WIDTHS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
KINDS = ("layernorm", "rmsnorm")
MODES = ("forward", "forward+backward")
ROWS = 4096
BYTES_PER_ELEMENT_MOVED = {"forward": 2, "forward+backward": 5}


@dataclass(frozen=True)
class Measurement:
    kind: str
    mode: str
    dtype: str
    rows: int
    d: int
    provider: str
    ms: float
    gb_per_s: float
    error: str = ""  # why the provider could not run this case (then ms and gb_per_s are NaN)


def bytes_moved(mode: str, rows: int, d: int, dtype: torch.dtype) -> int:
    """The bytes ``mode`` must read and write at least (see the module docstring)."""
    return BYTES_PER_ELEMENT_MOVED[mode] * rows * d * torch.tensor([], dtype=dtype).element_size()


def _liger(kind: str) -> Callable | None:
    if importlib.util.find_spec("liger_kernel") is None:
        return None
    if kind == "layernorm":
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction

        return lambda x, w, b, eps: LigerLayerNormFunction.apply(x, w, b, eps)
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    return lambda x, w, b, eps: LigerRMSNormFunction.apply(x, w, eps, 0.0, "llama", False)


def providers(kind: str) -> dict[str, Callable]:
    """name -> fn(x, weight, bias, eps) for ours, torch and (when installed) Liger."""
    if kind == "layernorm":
        found = {"ours": kernels.layer_norm,
                 "torch": lambda x, w, b, eps: F.layer_norm(x, (x.shape[-1],), w, b, eps)}
    else:
        found = {"ours": lambda x, w, b, eps: kernels.rms_norm(x, w, eps),
                 "torch": lambda x, w, b, eps: F.rms_norm(x, (x.shape[-1],), w, eps)}
    liger = _liger(kind)
    if liger is not None:
        found["liger"] = liger
    return found


def _time_ms(fn: Callable, mode: str, rows: int, d: int, dtype: torch.dtype) -> float:
    from triton.testing import do_bench

    x = torch.randn(rows, d, device="cuda", dtype=dtype, requires_grad=mode != "forward")
    weight = torch.rand(d, device="cuda", dtype=dtype, requires_grad=True)
    bias = torch.randn(d, device="cuda", dtype=dtype, requires_grad=True)
    if mode == "forward":
        return do_bench(lambda: fn(x, weight, bias, 1e-5), return_mode="median")
    dy = torch.randn_like(x)
    return do_bench(lambda: fn(x, weight, bias, 1e-5).backward(dy), grad_to_none=[x, weight, bias],
                    return_mode="median")


def run(kinds: Iterable[str] = KINDS, dtypes: Iterable[str] = DTYPES, widths: Iterable[int] = WIDTHS,
        rows: int = ROWS, on_result: Callable[[Measurement], None] | None = None) -> list[Measurement]:
    """Measure every (kind, mode, dtype, width, provider); a provider that fails is recorded with its error."""
    results = []
    for kind in kinds:
        for mode in MODES:
            for dtype_name in dtypes:
                dtype = DTYPES[dtype_name]
                for d in widths:
                    for provider, fn in providers(kind).items():
                        try:
                            ms = _time_ms(fn, mode, rows, d, dtype)
                            error = ""
                        except Exception as failure:  # e.g. Liger's d limit; out of memory
                            ms, error = math.nan, f"{type(failure).__name__}: {str(failure).strip()[:200]}"
                        result = Measurement(kind, mode, dtype_name, rows, d, provider, ms,
                                             bytes_moved(mode, rows, d, dtype) / ms / 1e6, error)
                        results.append(result)
                        if on_result is not None:
                            on_result(result)
    return results


def ours_vs_best(results: list[Measurement]) -> dict[tuple, float]:
    """(kind, mode, dtype, d) -> our GB/s over the better of torch's and Liger's."""
    by_case: dict[tuple, dict[str, float]] = {}
    for r in results:
        if not r.error:
            by_case.setdefault((r.kind, r.mode, r.dtype, r.d), {})[r.provider] = r.gb_per_s
    return {case: speeds["ours"] / max(v for p, v in speeds.items() if p != "ours")
            for case, speeds in by_case.items() if "ours" in speeds and len(speeds) > 1}


def write_csv(results: list[Measurement], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[f.name for f in fields(Measurement)])
        writer.writeheader()
        writer.writerows(asdict(r) for r in results)
