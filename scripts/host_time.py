"""Host time per call of our Triton norms against torch's, measured on the CPU (issue 30, item 1).

    /work/main/.venv/bin/python scripts/host_time.py [--rows 4] [--d 64] [--dtype float32] [--repeat 200]

What is measured, per kind and mode (inference: the forward under torch.no_grad; forward: with weight and bias
requiring grad, so an autograd graph is recorded; forward+backward):

* ours: everything our code does per call on the host, with the launch stubbed out: every launch of
  our kernels goes through ``kernels.rows.launch``, replaced by a no-op that counts the call. So the
  time is our wrapper only: the autograd Function, the input checks, the allocations, the launch
  arguments; NOT the launch path (specialization key, Triton's driver call) nor any device time.
* ours + Triton (where no CUDA is present, so that ``kernels.cuda_stand_ins`` answers Triton's driver
  queries): the same with the launch path run as on CUDA (``kernels.rows.launch_compiled``: Triton's
  ``JITFunction.run`` on a specialization's first launch, the compiled kernel's launcher after), only
  that C launcher a no-op: a stand-in ``CompiledKernel`` is put in Triton's kernel cache instead of
  compiling.
* torch: ``F.layer_norm`` (with ``h = x + residual`` first for the fused kinds) on CPU tensors of the
  same small shape, so its compute is negligible and the time is torch's dispatch + autograd host path,
  which is what its CUDA path also pays on the host. For RMSNorm too: on CUDA ``F.rms_norm`` is one
  fused operator forward and one backward, like ``layer_norm``, but on the CPU it is decomposed into ~8
  operators forward and ~25 with the backward (even ``aten._fused_rms_norm``), whose host time would
  flatter us; so torch's fused LayerNorm without bias stands for it.

Launches per call: Triton launches (counted by the stub) plus torch operators that would launch a
device kernel (counted by a TorchDispatchMode: every aten operator that is not a view or an
``empty*`` allocation), counted in a separate untimed call on float16 tensors (where a dtype cast
is a launch; float32 times are the default: torch's CPU float16 is emulated).

The inputs are CPU tensors, so the interpreter's support layer is installed (importing ``kernels``
does it) but never reached: the stub stands where the interpreted or compiled launch would start.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from triton.runtime.jit import JITFunction

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import kernels
from kernels import cuda_stand_ins, rows

RUNS = 30
NOT_LAUNCHES = ("empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "detach", "alias",
                "lift_fresh", "_to_copy_noop")


class _LaunchCounter:
    """A no-op stand-in for the Triton launch that counts its calls."""

    def __init__(self) -> None:
        self.count = 0

    def launch(self, kernel, grid, *args, **kwargs):
        self.count += 1


class _StandInCompiledKernel:
    """Put in Triton's kernel cache in place of a compiled kernel: its launcher is a no-op that counts."""

    function = None
    packed_metadata = None

    def __init__(self, counter: _LaunchCounter) -> None:
        self._counter = counter

    def launch_metadata(self, *args) -> None:
        return None

    def run(self, *args) -> None:
        self._counter.count += 1


@contextlib.contextmanager
def stubbed_compiled_launcher() -> Iterator[_LaunchCounter]:
    """Our launches take the CUDA path (``kernels.rows.launch_compiled``: Triton's JITFunction.run on the first
    launch of a specialization, the compiled kernel's launcher after), whose compile step caches a
    :class:`_StandInCompiledKernel`: everything but the C launcher runs."""
    counter = _LaunchCounter()

    def do_compile(self, key, signature, device, constexprs, options, attrs, warmup):
        kernel = self.device_caches[device][0][key] = _StandInCompiledKernel(counter)
        return kernel

    saved = JITFunction._do_compile, rows.launch
    JITFunction._do_compile = do_compile
    rows.launch = lambda kernel, grid, *args, **meta: rows.launch_compiled(kernel, grid, 0, args, meta)
    try:
        yield counter
    finally:
        JITFunction._do_compile, rows.launch = saved
        rows.clear_launchers()


@contextlib.contextmanager
def stubbed_launches() -> Iterator[_LaunchCounter]:
    counter = _LaunchCounter()
    saved_launch, rows.launch = rows.launch, counter.launch
    try:
        yield counter
    finally:
        rows.launch = saved_launch


class _TorchLaunches(TorchDispatchMode):
    """Counts the aten operators that would launch a device kernel (not views, not empty allocations)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if not func.is_view and name not in NOT_LAUNCHES:
            self.count += 1
            self.names.append(name)
        return func(*args, **(kwargs or {}))


def _cases(n: int, d: int) -> dict[str, tuple[Callable, Callable]]:
    """kind -> (ours(x, r, w, b), torch's(x, r, w, b)); the fused kinds return (y, h) and use r."""
    def torch_add(norm):
        def fused(x, r, w, b):
            h = x + r
            return norm(h, w, b), h
        return fused

    torch_ln = lambda x, w, b: F.layer_norm(x, (d,), w, b, 1e-5)  # noqa: E731
    torch_rms = lambda x, w, b: F.layer_norm(x, (d,), w, None, 1e-6)  # noqa: E731  (see the module docstring)
    return {
        "LayerNorm": (lambda x, r, w, b: kernels.layer_norm(x, w, b, 1e-5), lambda x, r, w, b: torch_ln(x, w, b)),
        "RMSNorm": (lambda x, r, w, b: kernels.rms_norm(x, w, 1e-6), lambda x, r, w, b: torch_rms(x, w, b)),
        "add+LayerNorm": (lambda x, r, w, b: kernels.add_layer_norm(x, r, w, b, 1e-5), torch_add(torch_ln)),
        "add+RMSNorm": (lambda x, r, w, b: kernels.add_rms_norm(x, r, w, 1e-6), torch_add(torch_rms)),
    }


def _step(fn: Callable, mode: str, n: int, d: int, dtype: torch.dtype) -> Callable[[], None]:
    """One call of ``fn`` in ``mode`` on fresh-looking leaves (grads set to None each time, as an optimizer would)."""
    backward = mode == "forward+backward"
    x = torch.randn(n, d, dtype=dtype, requires_grad=backward)
    r = torch.randn(n, d, dtype=dtype, requires_grad=backward)
    w = torch.rand(d, dtype=dtype, requires_grad=True)
    b = torch.randn(d, dtype=dtype, requires_grad=True)
    dy = torch.randn(n, d, dtype=dtype)
    leaves = (x, r, w, b)

    def forward() -> None:
        fn(x, r, w, b)

    def inference() -> None:
        with torch.no_grad():
            fn(x, r, w, b)

    def forward_backward() -> None:
        out = fn(x, r, w, b)
        y = out[0] if isinstance(out, tuple) else out
        y.backward(dy)
        for leaf in leaves:
            leaf.grad = None

    return {"inference": inference, "forward": forward, "forward+backward": forward_backward}[mode]


def _us_per_call(step: Callable[[], None], repeat: int) -> float:
    for _ in range(max(repeat // 10, 10)):
        step()
    best = float("inf")
    for _ in range(RUNS):  # the best run: the least disturbed by other processes on the machine
        start = time.perf_counter()
        for _ in range(repeat):
            step()
        best = min(best, (time.perf_counter() - start) / repeat * 1e6)
    return best


def _launches(step: Callable[[], None], counter: _LaunchCounter) -> tuple[int, int, list[str]]:
    """(Triton launches, torch operators that launch, their names) of one call."""
    before = counter.count
    with _TorchLaunches() as torch_ops:
        step()
    return counter.count - before, torch_ops.count, torch_ops.names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--dtype", choices=["float16", "float32"], default="float32")
    parser.add_argument("--repeat", type=int, default=200, help="calls per run; the best of 30 runs is kept")
    parser.add_argument("--verbose", action="store_true", help="name the torch operators counted as launches")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # torch's CPU compute on one thread: no pool wake-ups in its time
    dtype = getattr(torch, args.dtype)
    print(f"host time per call, CPU tensors [{args.rows}, {args.d}] {args.dtype}, best of {RUNS} runs of "
          f"{args.repeat} calls; ours with the Triton launch stubbed (our wrapper only)")
    with_triton = cuda_stand_ins.installed()
    print(f"{'kind':<14} {'mode':<17} {'ours us':>8} {'torch us':>9} {'ratio':>6}"
          + (f" {'ours+Triton us':>14} {'ratio':>6}" if with_triton else "")
          + "   launches ours (triton+torch)   torch's")
    for kind, (ours, theirs) in _cases(args.rows, args.d).items():
        for mode in ("inference", "forward", "forward+backward"):
            with stubbed_launches() as counter:
                ours_step = _step(ours, mode, args.rows, args.d, dtype)
                ours_us = _us_per_call(ours_step, args.repeat)
                triton_launches, torch_ops, names = _launches(_step(ours, mode, args.rows, args.d, torch.float16),
                                                              counter)
            torch_step = _step(theirs, mode, args.rows, args.d, dtype)
            torch_us = _us_per_call(torch_step, args.repeat)
            _, torch_only, torch_names = _launches(_step(theirs, mode, args.rows, args.d, torch.float16),
                                                   _LaunchCounter())
            triton_cells = ""
            if with_triton:
                with stubbed_compiled_launcher():
                    with_triton_us = _us_per_call(_step(ours, mode, args.rows, args.d, dtype), args.repeat)
                triton_cells = f" {with_triton_us:14.1f} {with_triton_us / torch_us:6.2f}"
            print(f"{kind:<14} {mode:<17} {ours_us:8.1f} {torch_us:9.1f} {ours_us / torch_us:6.2f}{triton_cells}   "
                  f"{triton_launches + torch_ops:>3} ({triton_launches}+{torch_ops}){'':17}{torch_only:>3}")
            if args.verbose:
                print(f"{'':33}ours' torch ops: {names}; torch's: {torch_names}")


if __name__ == "__main__":
    main()
