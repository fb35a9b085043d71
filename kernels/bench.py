"""Benchmark: our LayerNorm/RMSNorm (and fused residual add + norm) against torch and Liger-Kernel.

For every (kind, mode, dtype, rows n, width d, provider), on one device:

* ``device_us``: device time per call, the host taken out. On CUDA, ``triton.testing.do_bench_cudagraph``
  (the call captured in a CUDA graph, replayed; median): what the GPU spends, whatever the host costs. Where
  capture fails (a provider that synchronizes), ``triton.testing.do_bench`` (CUDA events; host included when
  host-bound) and ``method`` says so.
* ``wall_us``: host + device per call: a plain loop of calls, synchronized at both ends, divided by the count.
  When ``wall_us`` is far above ``device_us``, the host is the bottleneck (our Python launch path, not the kernel).
* ``gb_per_s``: the bytes the operation must move at least, over ``device_us``:

      forward:                read x, write y                                           2 n d s
      forward + backward:     the forward, then read x and dy, write dx                 5 n d s
      add+norm forward:       read x and the residual, write y and h = x + residual     4 n d s
      add+norm fwd + bwd:     the forward, then read h and dy, write dx (= dresidual)   7 n d s

  The gradients are returned (``torch.autograd.grad``), not accumulated into the leaves' ``.grad``, which would
  copy the add + norm's one gradient of x and the residual (2 n d s more, for every provider; inside a model
  neither is a leaf)

  (s bytes per element; weight, bias and the float32 statistics are O(n + d) and not counted);
* ``roofline``: ``gb_per_s`` over the device's copy bandwidth, measured the same way on a device-to-device copy
  of the same number of bytes (``dst.copy_(src)``, |src| = half the bytes moved, at most 512 MB): 1.0 is as fast
  as a copy;
* ``max_rel_err``: max |ours - torch's float32 reference| / max |reference| over y (and dx, dweight with the
  backward), so a wrong compiled kernel shows in the table, not only a slow one.

On the CPU (``device="cpu"``) everything runs (our kernels in Triton's interpreter), timed by plain loops:
the numbers say nothing about a GPU; that path exists so the benchmark itself is tested without one.
"""

from __future__ import annotations

import csv
import importlib.util
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F

import kernels
from kernels import rows as row_helpers

WIDTHS = (1024, 4096, 16384, 65536)
ROWS = (4096, 16384)
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
KINDS = ("layernorm", "rmsnorm", "add+layernorm", "add+rmsnorm")
MODES = ("forward", "forward+backward")
BYTES_PER_ELEMENT_MOVED = {("norm", "forward"): 2, ("norm", "forward+backward"): 5,
                           ("add", "forward"): 4, ("add", "forward+backward"): 7}
#: max_rel_err above this marks a case as wrong in the table (a few units of the dtype's rounding, d-independent
#: because the reference is float32 on the same rounded inputs and the outputs are O(1))
ERROR_LIMIT = {torch.float32: 1e-3, torch.float16: 1e-2, torch.bfloat16: 5e-2}


@dataclass(frozen=True)
class Measurement:
    kind: str
    mode: str
    dtype: str
    rows: int
    d: int
    provider: str
    device_us: float
    wall_us: float
    gb_per_s: float
    roofline: float
    method: str  # how device_us was measured: cudagraph, events, cpu-loop
    max_rel_err: float = math.nan  # against torch's float32 reference (NaN for torch itself)
    error: str = ""  # why the provider could not run this case (then the times are NaN)


def bytes_moved(kind: str, mode: str, rows: int, d: int, dtype: torch.dtype) -> int:
    """The bytes ``mode`` of ``kind`` must read and write at least (see the module docstring)."""
    family = "add" if kind.startswith("add+") else "norm"
    return BYTES_PER_ELEMENT_MOVED[family, mode] * rows * d * torch.tensor([], dtype=dtype).element_size()


def _liger(kind: str) -> Callable | None:
    if importlib.util.find_spec("liger_kernel") is None:
        return None
    if kind == "layernorm":
        from liger_kernel.ops.layer_norm import LigerLayerNormFunction

        return lambda x, r, w, b: LigerLayerNormFunction.apply(x, w, b, 1e-5)
    if kind == "rmsnorm":
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        return lambda x, r, w, b: LigerRMSNormFunction.apply(x, w, 1e-6, 0.0, "llama", False)
    if kind == "add+rmsnorm":
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

        return lambda x, r, w, b: LigerFusedAddRMSNormFunction.apply(x, r, w, 1e-6, 0.0, "llama", False)
    return None


def _torch_add(norm: Callable) -> Callable:
    def fused(x, r, w, b):
        h = x + r
        return norm(h, r, w, b), h
    return fused


def providers(kind: str) -> dict[str, Callable]:
    """name -> fn(x, residual, weight, bias) for ours, torch and (when installed and it has the kind) Liger; the
    add+norm kinds return (y, h)."""
    torch_ln = lambda x, r, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)  # noqa: E731
    torch_rms = lambda x, r, w, b: F.rms_norm(x, (x.shape[-1],), w, 1e-6)  # noqa: E731
    found = {
        "layernorm": {"ours": lambda x, r, w, b: kernels.layer_norm(x, w, b, 1e-5), "torch": torch_ln},
        "rmsnorm": {"ours": lambda x, r, w, b: kernels.rms_norm(x, w, 1e-6), "torch": torch_rms},
        "add+layernorm": {"ours": lambda x, r, w, b: kernels.add_layer_norm(x, r, w, b, 1e-5),
                          "torch": _torch_add(torch_ln)},
        "add+rmsnorm": {"ours": lambda x, r, w, b: kernels.add_rms_norm(x, r, w, 1e-6),
                        "torch": _torch_add(torch_rms)},
    }[kind]
    liger = _liger(kind)
    if liger is not None:
        found["liger"] = liger
    return found


#: rows of the inputs max_rel_err is measured on (the same kernels and launch configuration as the timed case:
#: more rows than our backward has programs on an H100, so each program loops over several rows)
CHECK_ROWS = 2048


class _Case:
    """One call to time or check: ``fn`` on (x, residual, weight, bias), then, with ``dy``, its backward."""

    def __init__(self, fn: Callable, leaves: list[torch.Tensor], dy: torch.Tensor | None) -> None:
        self.fn, self.leaves, self.dy = fn, leaves, dy

    @classmethod
    def drawn(cls, fn: Callable, mode: str, n: int, d: int, dtype: torch.dtype, device: str) -> _Case:
        generator = torch.Generator(device=device).manual_seed(0)
        backward = mode == "forward+backward"

        def draw(*shape: int, positive: bool = False, grad: bool = True) -> torch.Tensor:
            t = (torch.rand if positive else torch.randn)(*shape, generator=generator, device=device)
            return t.to(dtype).requires_grad_(grad)

        leaves = [draw(n, d, grad=backward), draw(n, d, grad=backward), draw(d, positive=True), draw(d)]
        return cls(fn, leaves, draw(n, d, grad=False) if backward else None)

    def in_float32(self, fn: Callable) -> _Case:
        """The same inputs, already rounded to the storage dtype, in float32, for ``fn``."""
        leaves = [t.detach().float().requires_grad_(t.requires_grad) for t in self.leaves]
        return _Case(fn, leaves, None if self.dy is None else self.dy.float())

    def step(self) -> tuple[torch.Tensor, tuple[torch.Tensor | None, ...]]:
        """One call: y and, with the backward, the gradients of (x, residual, weight, bias) (None where unused).

        They are returned by ``torch.autograd.grad``, not accumulated into ``.grad``: where one gradient reaches
        two leaves (x and the residual of an add + norm), accumulating would copy it for the second (2 n d s more
        than a norm moves, for every provider), which no layer inside a model pays, its inputs not being leaves."""
        out = self.fn(*self.leaves)
        y = out[0] if isinstance(out, tuple) else out
        if self.dy is None:
            return y, ()
        return y, torch.autograd.grad(y, self.leaves, self.dy, allow_unused=True)

    def outputs(self) -> list[torch.Tensor]:
        """y (and the gradients of x and weight with the backward): what max_rel_err compares."""
        y, grads = self.step()
        return [y.detach()] if self.dy is None else [y.detach(), grads[0], grads[2]]


def _max_rel_err(kind: str, fn: Callable, mode: str, n: int, d: int, dtype: torch.dtype, device: str) -> float:
    """max |fn - torch in float32| / max |torch| over y (and dx, dweight) on CHECK_ROWS rows of the same width."""
    case = _Case.drawn(fn, mode, min(n, CHECK_ROWS), d, dtype, device)
    got, want = case.outputs(), case.in_float32(providers(kind)["torch"]).outputs()
    return max(((g.float() - w).abs().max() / w.abs().max().clamp_min(1e-30)).item()
               for g, w in zip(got, want, strict=True))


def _wall_us(step: Callable[[], object], device: str, calls: int) -> float:
    """Host + device per call: calls back to back, synchronized at both ends; ``calls`` of them, fewer (at least 3)
    when they would take over 20 ms."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    step()
    sync()
    calls = max(3, min(calls, int(0.02 / max(time.perf_counter() - start, 1e-9))))
    start = time.perf_counter()
    for _ in range(calls):
        step()
    sync()
    return (time.perf_counter() - start) / calls * 1e6


def _device_us(step: Callable[[], object], device: str, calls: int) -> tuple[float, str]:
    """(device time per call, method): a CUDA graph of the call where it can be captured, else CUDA events."""
    if device != "cuda":
        return _wall_us(step, device, calls), "cpu-loop"
    from triton.testing import do_bench, do_bench_cudagraph

    try:
        return do_bench_cudagraph(step, rep=5, return_mode="median") * 1e3, "cudagraph"
    except Exception:  # a provider that synchronizes inside the call cannot be captured
        torch.cuda.synchronize()
        return do_bench(step, warmup=2, rep=5, return_mode="median") * 1e3, "events"


#: the largest copy measured: the copy bandwidth is flat above a few hundred MB, and a full-size copy of the largest
#: case (30 GB moved) would hold 30 GB of the GPU's memory
MAX_COPY_BYTES = 1 << 30


def copy_gb_per_s(n_bytes: int, device: str, calls: int = 10) -> float:
    """The device's copy bandwidth for ``n_bytes`` moved: a device-to-device copy of n_bytes / 2 (at most
    MAX_COPY_BYTES / 2), timed as above."""
    src = torch.empty(max(min(n_bytes, MAX_COPY_BYTES) // 2, 1), dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    us, _ = _device_us(lambda: dst.copy_(src), device, calls)
    return 2 * src.numel() / us / 1e3


def measure(kind: str, mode: str, dtype_name: str, n: int, d: int, provider: str, fn: Callable, device: str,
            copy_bw: float, calls: int) -> Measurement:
    """One measurement; a provider that fails is recorded with its error (e.g. Liger's width limit, out of memory)."""
    dtype = DTYPES[dtype_name]
    try:
        err = math.nan if provider == "torch" else _max_rel_err(kind, fn, mode, n, d, dtype, device)
        case = _Case.drawn(fn, mode, n, d, dtype, device)
        device_us, method = _device_us(case.step, device, calls)
        wall_us = _wall_us(case.step, device, calls)
        error = ""
    except Exception as failure:
        device_us = wall_us = err = math.nan
        method, error = "", f"{type(failure).__name__}: {str(failure).strip().splitlines()[0][:200]}"
        if device == "cuda":
            torch.cuda.empty_cache()
    gb_per_s = bytes_moved(kind, mode, n, d, dtype) / device_us / 1e3
    return Measurement(kind, mode, dtype_name, n, d, provider, device_us, wall_us, gb_per_s, gb_per_s / copy_bw,
                       method, err, error)


#: rows of the warm-up calls: few (little memory in 12 processes), a multiple of 16 as the measured row counts and
#: our backward's program counts are, so that Triton specializes the integer arguments the same way
WARM_UP_ROWS = 256


def warm_up_one(kind: str, dtype_name: str, widths: tuple[int, ...], device: str, rows: int = WARM_UP_ROWS) -> int:
    """Call every provider of ``kind`` once, forward and backward, on ``rows`` rows of each width: the Triton
    kernels this compiles are then in Triton's on-disk cache. Returns the calls made (those that failed are left
    to the measurement, which records why)."""
    made = 0
    for d in widths:
        for fn in providers(kind).values():
            try:
                _Case.drawn(fn, "forward+backward", rows, d, DTYPES[dtype_name], device).step()
                made += 1
            except Exception:  # the measurement of this case records why
                continue
    return made


def warm_up(kinds: Iterable[str], dtypes: Iterable[str], widths: Iterable[int], device: str,
            workers: int) -> list[str]:
    """Compile every kernel the run needs first, in ``workers`` processes at once (one per (kind, dtype)): Triton
    compiles one kernel at a time per process, ~1 s each, and a full run needs ~150 (ours and Liger's), which
    would otherwise dominate it. Spawned processes (CUDA cannot be forked); Triton's cache writes are atomic.
    Returns the (kind, dtype) warm-ups that failed, whose kernels then compile during the run."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    tasks = [(kind, dtype_name, tuple(widths), device) for kind in kinds for dtype_name in dtypes]
    failures = []
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        for task, future in [(task, pool.submit(warm_up_one, *task)) for task in tasks]:
            try:
                future.result()
            except Exception as failure:  # e.g. a worker killed: its kernels compile in the run instead
                failures.append(f"{task[0]} {task[1]}: {type(failure).__name__}: {failure}")
    return failures


def run(kinds: Iterable[str] = KINDS, dtypes: Iterable[str] = DTYPES, widths: Iterable[int] = WIDTHS,
        rows: Iterable[int] = ROWS, device: str = "cuda", calls: int = 20,
        on_result: Callable[[Measurement], None] | None = None) -> list[Measurement]:
    """Measure every (kind, mode, dtype, rows, width, provider) on ``device``."""
    results = []
    copy_bw: dict[int, float] = {}
    for kind in kinds:
        for mode in MODES:
            for dtype_name in dtypes:
                for n in rows:
                    for d in widths:
                        moved = bytes_moved(kind, mode, n, d, DTYPES[dtype_name])
                        if moved not in copy_bw:
                            copy_bw[moved] = copy_gb_per_s(moved, device)
                        for provider, fn in providers(kind).items():
                            result = measure(kind, mode, dtype_name, n, d, provider, fn, device, copy_bw[moved],
                                             calls)
                            results.append(result)
                            if on_result is not None:
                                on_result(result)
    return results


def ours_vs_best(results: list[Measurement]) -> dict[tuple, float]:
    """(kind, mode, dtype, rows, d) -> our GB/s over the better of torch's and Liger's (device time)."""
    by_case: dict[tuple, dict[str, float]] = {}
    for r in results:
        if not r.error:
            by_case.setdefault((r.kind, r.mode, r.dtype, r.rows, r.d), {})[r.provider] = r.gb_per_s
    return {case: speeds["ours"] / max(v for p, v in speeds.items() if p != "ours")
            for case, speeds in by_case.items() if "ours" in speeds and len(speeds) > 1}


def launch_configs(widths: Iterable[int], dtypes: Iterable[str],
                   device: torch.device) -> list[tuple[int, str, row_helpers.LaunchConfig]]:
    """(d, dtype name, configuration): what our kernels get for each width and dtype on ``device``
    (kernels.rows.launch_config)."""
    return [(d, name, row_helpers.config_for(d, DTYPES[name].itemsize, device)) for d in widths for name in dtypes]


def write_csv(results: list[Measurement], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=[f.name for f in fields(Measurement)])
        writer.writeheader()
        writer.writerows(asdict(r) for r in results)
