"""kernels.interpret: GPU-style Triton kernels, other than ours, run on CPU tensors through the interpreter.

Each test launches a small kernel that hits one gap of Triton's interpreter (see the module docstring of
kernels.interpret) and checks its result against torch.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice
from triton.language.extra.cuda.libdevice import tanh as cuda_tanh
from triton.runtime.jit import JITFunction

from kernels import interpret

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _seeded() -> None:
    torch.manual_seed(0)  # every example is the same on every run
    interpret.enable()  # importing kernels enables it only without CUDA


@triton.jit
def _axpb(X, Y, n, alpha, beta, BLOCK: tl.constexpr):
    """y = alpha * x + beta, with float scalars cast the way GPU kernels do (Liger: eps.to(tl.float32))."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(X + offsets, mask=mask)
    tl.store(Y + offsets, x * alpha.to(tl.float32) + beta.to(tl.float32), mask=mask)


@triton.jit
def _libdevice_math(X, Y, n, BLOCK: tl.constexpr):
    """y = rsqrt(x) + exp(-x) + tanh(x): the dispatching stubs and a backend function imported by name."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(X + offsets, mask=mask, other=1.0)
    tl.store(Y + offsets, libdevice.rsqrt(x) + libdevice.exp(-x) + cuda_tanh(x), mask=mask)


@triton.jit
def _square(x):
    return x * x


@triton.jit
def _row_softmax_of_squares(X, Y, n_cols, stride, BLOCK: tl.constexpr):
    """A 2-D launch (rows x column tiles of 1) calling a compiled @triton.jit helper and tl.max/tl.sum."""
    row = tl.program_id(0) + tl.program_id(1) * tl.num_programs(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.where(mask, _square(tl.load(X + row * stride + cols, mask=mask, other=0.0)), -float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(Y + row * stride + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def _blocked_row_sum(X, Y, n_cols, BLOCK: tl.constexpr):
    """Sum of a row in blocks, with the loop variable used as a tensor (start.to(tl.int64))."""
    acc = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start.to(tl.int64) + tl.arange(0, BLOCK)
        acc += tl.sum(tl.load(X + cols, mask=cols < n_cols, other=0.0), axis=0)
    tl.store(Y, acc)


@triton.jit
def _program_id_i64(axis: tl.constexpr):
    return tl.program_id(axis).to(tl.int64)


#: A module of device functions, called through its alias as FlagGems' kernels call ``tle.program_id``.
tle = types.ModuleType("tests_tle")
tle.program_id = _program_id_i64


@triton.jit
def _copy_through_alias(X, Y, n, BLOCK: tl.constexpr):
    offsets = tle.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offsets, tl.load(X + offsets, mask=offsets < n), mask=offsets < n)


@triton.jit
def _python_logic_on_masks(X, AND, OR, NOT, n, lo, HAS_LO: tl.constexpr, BLOCK: tl.constexpr):
    """Masks combined with Python and/or/not, as FlagGems' backward does (compiled Triton: elementwise)."""
    offsets = tl.arange(0, BLOCK)
    x = tl.load(X + offsets, mask=offsets < n, other=0.0)
    in_range = offsets < n and offsets >= lo if HAS_LO else offsets < n  # constexpr and block operands
    positive = x > 0
    tl.store(AND + offsets, (in_range and positive).to(tl.int8))
    tl.store(OR + offsets, (in_range or positive).to(tl.int8))
    tl.store(NOT + offsets, (not positive).to(tl.int8))
    if n > 0 and lo < n:  # scalars: a scalar condition, as compiled
        tl.store(X + offsets, x * 2, mask=(above := offsets > lo) and in_range if HAS_LO else in_range)
        if HAS_LO:
            tl.store(X + offsets, x * 2, mask=above and in_range)  # bound by the assignment expression


@triton.jit
def _python_if_on_a_block(X, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n
    if mask:
        tl.store(X + offsets, 1.0, mask=mask)


@triton.jit
def _store_rows(Y, d, BLOCK: tl.constexpr):
    """Writes a row of d ones into Y per program, with no mask on the rows: a grid too large writes past Y."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    tl.store(Y + row * d + cols, tl.full((BLOCK,), 1.0, tl.float32), mask=cols < d)


@triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"])
@triton.jit
def _autotuned_copy(X, Y, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offsets, tl.load(X + offsets, mask=offsets < n), mask=offsets < n)


def test_autotuned_kernels_take_their_first_config():
    x = torch.randn(100)
    y = torch.empty_like(x)
    _autotuned_copy[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, y, 100)
    assert torch.equal(y, x)
    assert len(_autotuned_copy.configs) == 2


def test_float_scalar_arguments_are_fp32_scalars():
    x = torch.randn(100)
    y = torch.empty_like(x)
    _axpb[(2,)](x, y, 100, 2.5, -1.25, BLOCK=64)
    assert torch.equal(y, x * 2.5 - 1.25)


def test_libdevice_functions_compute():
    x = torch.rand(50) + 0.5
    y = torch.empty_like(x)
    _libdevice_math[(1,)](x, y, 50, BLOCK=64)
    torch.testing.assert_close(y, x.rsqrt() + torch.exp(-x) + torch.tanh(x))


def test_compiled_helper_and_reductions_in_a_2d_grid():
    x = torch.randn(6, 10)
    y = torch.empty_like(x)
    _row_softmax_of_squares[(3, 2)](x, y, 10, x.stride(0), BLOCK=16)
    torch.testing.assert_close(y, torch.softmax(x * x, dim=-1))


def test_loop_variables_are_tensors():
    x = torch.randn(1000)
    y = torch.empty(1)
    _blocked_row_sum[(1,)](x, y, 1000, BLOCK=128)
    # float32 sum of 1000 terms: within 1000 u sum|x| of the exact (float64) sum
    assert abs(y[0].item() - x.double().sum().item()) <= 1000 * 2.0**-24 * x.abs().sum().item()


def test_helpers_reached_through_a_module_alias():
    x = torch.randn(40)
    y = torch.empty_like(x)
    _copy_through_alias[(3,)](x, y, 40, BLOCK=16)
    assert torch.equal(y, x)
    assert isinstance(tle.program_id, JITFunction)  # restored after the launch


@triton.jit
def _plus_one(x):
    return x + 1.0


@triton.jit
def _plus_two(x):
    return x + 2.0


_helper = _plus_one  # the helper _apply_helper calls; a test rebinds it


@triton.jit
def _apply_helper(X, Y, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    tl.store(Y + cols, _helper(tl.load(X + cols)))


def test_a_helper_rebound_between_launches_is_the_one_called(monkeypatch):
    """The replacements a launch makes are found once per kernel and found again when a name they replaced holds
    another value (a helper redefined or monkeypatched): never a stale helper."""
    x, y = torch.randn(8), torch.empty(8)
    _apply_helper[(1,)](x, y, BLOCK=8)
    assert torch.equal(y, x + 1)
    monkeypatch.setitem(globals(), "_helper", _plus_two)
    _apply_helper[(1,)](x, y, BLOCK=8)
    assert torch.equal(y, x + 2)


_late = types.ModuleType("late_helpers")  # a helpers module that gains a @triton.jit function after a first launch
_late.plus_one = _plus_one


@triton.jit
def _apply_late_helper(X, Y, LATER: tl.constexpr, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + cols)
    if LATER:
        x = _late.plus_two(x)
    tl.store(Y + cols, _late.plus_one(x))


def test_a_helper_added_to_a_walked_module_after_a_launch_is_found(monkeypatch):
    x, y = torch.randn(8), torch.empty(8)
    _apply_late_helper[(1,)](x, y, LATER=False, BLOCK=8)
    monkeypatch.setattr(_late, "plus_two", _plus_two, raising=False)
    _apply_late_helper[(1,)](x, y, LATER=True, BLOCK=8)
    assert torch.equal(y, x + 3)


def test_a_launch_returns_a_kernel_that_launches_again():
    """Launchers that cache what run() returns and relaunch it (FlagGems' LibEntry: kernel[grid](*args))."""
    x = torch.randn(40)
    y = torch.empty_like(x)
    kernel = _axpb.run(x, y, 40, 2.0, 1.0, grid=(3,), warmup=False, BLOCK=16)
    assert torch.equal(y, x * 2.0 + 1.0)
    kernel[(3,)](x, y, 40, -1.0, 0.5)  # the non-constexpr arguments; BLOCK as first launched
    assert torch.equal(y, x * -1.0 + 0.5)
    kernel[(1,)](x, y, 40, 3.0, 0.0, 64)  # every argument
    assert torch.equal(y, x * 3.0)


@pytest.mark.parametrize("has_lo", [True, False])
def test_and_or_not_on_block_tensors_are_elementwise(has_lo):
    n, lo, block = 13, 4, 16
    x = torch.randn(n)
    x_before = x.clone()
    results = [torch.empty(block, dtype=torch.int8) for _ in range(3)]
    _python_logic_on_masks[(1,)](x, *results, n, lo, HAS_LO=has_lo, BLOCK=block)
    offsets = torch.arange(block)
    in_range = (offsets < n) & (offsets >= lo) if has_lo else offsets < n
    positive = torch.cat([x_before, torch.zeros(block - n)]) > 0
    assert [r.bool().tolist() for r in results] == [(in_range & positive).tolist(), (in_range | positive).tolist(),
                                                     (~positive).tolist()]
    doubled = in_range[:n] & (offsets[:n] > lo) if has_lo else in_range[:n]
    assert torch.equal(x, torch.where(doubled, 2 * x_before, x_before))  # stored twice with HAS_LO: the same


def test_truth_value_of_a_block_is_an_error_naming_the_line():
    lines, first = inspect.getsourcelines(_python_if_on_a_block.fn)
    line = first + next(i for i, text in enumerate(lines) if "if mask:" in text)
    with pytest.raises(interpret.LogicOnBlockTensor, match=rf"test_interpret\.py:{line}: the truth value of a block"):
        _python_if_on_a_block[(1,)](torch.zeros(8), 5, BLOCK=8)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the stand-ins exist only without CUDA")
def test_cuda_host_queries_have_small_stand_ins():
    """A launcher written for a GPU: one program per SM, the device's context, Triton's driver queries."""
    x = torch.randn(50)
    y = torch.empty_like(x)
    programs = torch.cuda.get_device_properties(x.device).multi_processor_count
    with torch.cuda.device(x.device.index):
        _copy_through_alias[(programs,)](x, y, 50, BLOCK=16)
    assert torch.equal(y[: programs * 16], x[: programs * 16]) and programs == 4
    driver = triton.runtime.driver.active
    assert driver.get_current_device() == torch.cuda.current_device() == 0
    assert driver.utils.get_device_properties(0)["multiprocessor_count"] == 4
    assert torch.empty(1, device=driver.get_active_torch_device()).device.type == "cpu"
    assert not torch.cuda.is_available()  # nothing claims a GPU


@pytest.mark.skipif(torch.cuda.is_available(), reason="the stand-ins exist only without CUDA")
def test_cuda_stand_ins_leave_with_disable():
    try:
        interpret.disable()
        with pytest.raises(AssertionError, match="not compiled with CUDA"):
            torch.cuda.get_device_properties(0)
        with pytest.raises(RuntimeError, match="active drivers"):
            triton.runtime.driver.active  # noqa: B018
    finally:
        interpret.enable()


def test_an_out_of_bounds_store_is_an_error_naming_the_line_not_a_corrupted_heap():
    """FlagGems' LayerNorm backward on 3-D input stores S*d gradient values into a dW of d (an abort, before)."""
    y = torch.zeros(2, 8)
    _store_rows[(2,)](y, 8, BLOCK=8)
    assert torch.equal(y, torch.ones(2, 8))
    lines, first = inspect.getsourcelines(_store_rows.fn)
    line = first + next(i for i, text in enumerate(lines) if "tl.store(" in text)
    with pytest.raises(interpret.OutOfBounds, match=rf"test_interpret\.py:{line}: a store of 8 element\(s\) outside"):
        _store_rows[(3,)](torch.zeros(2, 8), 8, BLOCK=8)


def test_bfloat16_is_refused_in_one_line():
    x = torch.randn(8, dtype=torch.bfloat16)
    with pytest.raises(interpret.InterpreterUnsupported, match="cannot compute in bfloat16"):
        _axpb[(1,)](x, torch.empty_like(x), 8, 1.0, 0.0, BLOCK=8)


def _language_attributes() -> dict[tuple[str, str], object]:
    """Every attribute the interpreter may patch (dunders only those it does: __dict__ & co. are new each time)."""
    modules = {"tl": tl, "tl.core": tl.core, "tl.math": tl.math, "tl.tensor": tl.tensor}
    patched_dunders = {"__repr__", "__str__", "__bool__", "__index__"}
    return {(where, name): getattr(obj, name) for where, obj in modules.items() for name in dir(obj)
            if not name.startswith("__") or name in patched_dunders}


def test_triton_language_is_left_as_found():
    """After interpreted launches (with a nested helper) the compiled path sees the real triton.language."""
    before = _language_attributes()
    _row_softmax_of_squares[(1, 1)](torch.randn(1, 4), torch.empty(1, 4), 4, 4, BLOCK=4)
    _blocked_row_sum[(1,)](torch.randn(10), torch.empty(1), 10, BLOCK=4)
    after = _language_attributes()
    assert [key for key, value in before.items() if after.get(key) is not value] == []
    assert isinstance(tl.sum, JITFunction) and isinstance(globals()["_square"], JITFunction)
    assert "range" not in globals()


def test_enable_disable_and_context_manager():
    was_enabled = interpret.is_enabled()
    try:
        interpret.disable()
        assert JITFunction.run is not interpret._jit_run
        with interpret.enabled():
            x = torch.ones(4)
            y = torch.empty_like(x)
            _axpb[(1,)](x, y, 4, 3.0, 0.0, BLOCK=4)
            assert torch.equal(y, 3 * x)
        assert not interpret.is_enabled()
    finally:
        if was_enabled:
            interpret.enable()


@pytest.mark.parametrize(("symbol", "expected"), [("__nv_rsqrtf", "rsqrt"), ("__nv_expf", "exp"),
                                                  ("__nv_erf", "erf"), ("__ocml_tanh_f32", "tanh"),
                                                  ("__nv_fdiv_rn", "fdiv")])
def test_libdevice_symbols_map_to_numpy(symbol, expected):
    assert expected in interpret._libdevice_base_name(symbol)
    assert expected in interpret.LIBDEVICE_MATH


def test_kernels_decorated_under_triton_interpret_get_the_same_fixes():
    """With TRITON_INTERPRET=1 at import, @triton.jit gives InterpretedFunctions; the gaps are closed for them too."""
    script = (
        "import torch, test_interpret as t\n"
        "from triton.runtime.interpreter import InterpretedFunction\n"
        "assert isinstance(t._axpb, InterpretedFunction)\n"
        "t.test_float_scalar_arguments_are_fp32_scalars()\n"
        "t.test_libdevice_functions_compute()\n"
        "t.test_compiled_helper_and_reductions_in_a_2d_grid()\n"
        "t.test_loop_variables_are_tensors()\n"
        "t.test_bfloat16_is_refused_in_one_line()\n"
        "t.test_and_or_not_on_block_tensors_are_elementwise(True)\n"
        "t.test_truth_value_of_a_block_is_an_error_naming_the_line()\n"
    )
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
