"""The compiled launch path (kernels.rows.launch_compiled): the C launcher reached without Triton's binder must get
the same compiled kernel and the same arguments as Triton's own ``JITFunction.run`` would give it.

Two things can go wrong, and each has a test here: a cache key coarser than Triton's specialization (two
arguments Triton compiles differently sharing one launcher: a misaligned pointer run by a kernel compiled for an
aligned one), and arguments passed in another order or without the constexprs the launcher expects. Both run
without CUDA: the first against Triton's own specialization function, the second with Triton's ``run`` answered by
a recording stand-in for the compiled kernel (CPU tensors, the CUDA stand-ins of kernels.cuda_stand_ins).
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from hypothesis import given
from hypothesis import strategies as st
from triton import knobs
from triton._C.libtriton import native_specialize_impl
from triton.backends.compiler import BaseBackend
from triton.runtime.jit import JITFunction

from kernels import cuda_stand_ins, interpret, norm, rows


def triton_specialization(arg: object) -> tuple:
    """Triton's own specialization of one argument of a kernel parameter with no annotations or exemptions (the
    CUDA backend inherits BaseBackend's): what its launch keys the compiled kernel on."""
    return native_specialize_impl(BaseBackend, arg, False, True, True)


_BUFFER = torch.zeros(64, dtype=torch.float32)
#: Integers at each edge Triton's specialization has: 1, multiples of 16, the int32 / int64 / uint64 ranges.
EDGE_INTEGERS = [0, 1, 2, 15, 16, 17, 32, -16, -1, 2**31 - 16, 2**31 - 1, 2**31, -(2**31), -(2**31) - 16, 2**32,
                 2**63 - 16, 2**63 - 1, 2**63, 2**64 - 16, -(2**63)]
#: Tensors of each dtype at 4-byte steps of address: aligned to 16 bytes or not.
EDGE_TENSORS = [_BUFFER.view(dtype)[offset:] for dtype in (torch.float32, torch.float16, torch.bfloat16)
                for offset in range(0, 10)]
EDGE_ARGUMENTS = [*EDGE_INTEGERS, *EDGE_TENSORS, 0.0, 1.0, 1e-5, True, False, None]


def _same_key_same_specialization(a: object, b: object) -> None:
    if rows.specialization_key((a,)) == rows.specialization_key((b,)):
        assert triton_specialization(a) == triton_specialization(b), (a, b)


def test_equal_keys_mean_equal_triton_specializations_at_the_edges():
    for a in EDGE_ARGUMENTS:
        for b in EDGE_ARGUMENTS:
            _same_key_same_specialization(a, b)


@given(st.integers(-(2**63), 2**64 - 1), st.integers(-(2**63), 2**64 - 1))
def test_equal_keys_mean_equal_triton_specializations_for_any_integers(a, b):
    _same_key_same_specialization(a, b)


class _RecordingCompiledKernel:
    """Stands in Triton's kernel cache for a compiled kernel: its C launcher records what it is called with."""

    function = "cu-function"
    packed_metadata = "packed-metadata"

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def launch_metadata(self, *args) -> None:
        return None

    def run(self, *args) -> None:
        self.calls.append(args)


@pytest.fixture
def recording_compiled_kernel(monkeypatch):
    """Triton's compile step answered by one :class:`_RecordingCompiledKernel` (put in Triton's own cache), on the
    CUDA stand-in device; launchers cached before and after are dropped."""
    if torch.cuda.is_available():
        pytest.skip("the CUDA stand-ins exist only without CUDA; with it, the conformance run launches compiled")
    interpret.enable()
    assert cuda_stand_ins.installed()
    recorder = _RecordingCompiledKernel()

    def do_compile(self, key, signature, device, constexprs, options, attrs, warmup):
        self.device_caches[device][0][key] = recorder
        return recorder

    monkeypatch.setattr(JITFunction, "_do_compile", do_compile)
    rows.clear_launchers()
    yield recorder
    rows.clear_launchers()


def _forward_arguments(x: torch.Tensor, weight: torch.Tensor) -> tuple:
    """The positional arguments of an RMSNorm forward launch (kernels.norm._norm_forward) of x."""
    y, rstd = torch.empty_like(x), torch.empty(x.shape[0])
    return x, y, weight, None, None, rstd, x.stride(0), x.stride(1), y.stride(0), x.shape[1], 1e-5


def _forward_launch(args: tuple) -> None:
    rows.launch_compiled(norm._norm_forward, (args[0].shape[0],), 0, args,
                         {"IS_RMS": True, "HAS_WEIGHT": True, "HAS_BIAS": False, "BLOCK": 64, "SINGLE_BLOCK": True,
                          "num_warps": 2})


def test_direct_launch_passes_what_triton_run_passes(recording_compiled_kernel):
    args = _forward_arguments(torch.randn(3, 48), torch.randn(48))
    _forward_launch(args)  # the first launch of this specialization: Triton's run, which compiles
    _forward_launch(args)  # the cached launcher
    through_triton, direct = recording_compiled_kernel.calls
    # grid, stream, function, packed metadata; then launch metadata and hooks (None: no profiler), then arguments
    assert direct[:6] == through_triton[:6]
    assert direct[6:9] == (None, None, None)
    assert len(direct) == len(through_triton)
    for ours, triton_s in zip(direct[9:], through_triton[9:], strict=True):
        assert ours is triton_s or ours == triton_s, (ours, triton_s)


@triton.jit
def _scaled_copy(X, Y, n, SCALE: tl.constexpr = 2.0, BLOCK: tl.constexpr = 16):
    cols = tl.arange(0, BLOCK)
    tl.store(Y + cols, tl.load(X + cols, mask=cols < n) * SCALE, mask=cols < n)


def test_a_parameter_left_to_its_default_is_passed_as_triton_passes_it(recording_compiled_kernel):
    args = (torch.randn(16), torch.empty(16), 16)
    for _ in range(2):  # Triton's run, then the launcher
        rows.launch_compiled(_scaled_copy, (1,), 0, args, {"BLOCK": 16, "num_warps": 1})
    through_triton, direct = recording_compiled_kernel.calls
    assert direct[9:12] == through_triton[9:12] and direct[12:] == through_triton[12:] == (2.0, 16)


def test_a_new_specialization_goes_through_triton_run(recording_compiled_kernel, monkeypatch):
    calls = []
    monkeypatch.setattr(rows, "_compiled_run", lambda *a, **k: calls.append(a) or recording_compiled_kernel)
    x, weight = torch.randn(3, 48), torch.randn(48)
    _forward_launch(_forward_arguments(x, weight))
    _forward_launch(_forward_arguments(x[:, 1:17], weight[1:17]))  # misaligned x: Triton specializes it apart
    _forward_launch(_forward_arguments(x, weight))
    assert len(calls) == 2


def test_launch_hooks_take_triton_run(recording_compiled_kernel, monkeypatch):
    calls = []
    monkeypatch.setattr(rows, "_compiled_run", lambda *a, **k: calls.append(a) or recording_compiled_kernel)
    args = _forward_arguments(torch.randn(3, 48), torch.randn(48))
    _forward_launch(args)

    def profiler_hook(*args) -> None:
        return None

    knobs.runtime.launch_enter_hook.add(profiler_hook)
    try:
        _forward_launch(args)
    finally:
        knobs.runtime.launch_enter_hook.remove(profiler_hook)
    _forward_launch(args)
    assert len(calls) == 2
