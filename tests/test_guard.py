"""core.guard: every way a kernel can misbehave becomes one KernelFault line, and the caller goes on."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from torch._functorch import config as functorch_config

from core import guard
from core.guard import KernelFault
from core.registry import Kernel


def layernorm(x, weight, bias, eps):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def kernel_of(fn) -> Kernel:
    return Kernel(name=f"test:{fn.__name__}", kind="layernorm", fn=fn)


@pytest.fixture
def x() -> torch.Tensor:
    return torch.linspace(-1.0, 1.0, 24).reshape(3, 8)


def fault_of(fn, x, **kwargs) -> KernelFault:
    with pytest.raises(KernelFault) as caught:
        guard.call(kernel_of(fn), x, None, None, 1e-5, like=x, **kwargs)
    return caught.value


def test_a_correct_kernel_passes_through(x):
    out = guard.call(kernel_of(layernorm), x, None, None, 1e-5, like=x)
    torch.testing.assert_close(out, layernorm(x, None, None, 1e-5))


def test_raising_kernel_is_an_error_naming_the_exception(x):
    def raises(x, weight, bias, eps):
        raise ValueError("block size too large\nsecond line of a long message")

    fault = fault_of(raises, x)
    assert fault.reason == "raised" and fault.status == "error"
    assert str(fault) == "kernel test:raises raised ValueError: block size too large"
    assert isinstance(fault.__cause__, ValueError)


def test_sys_exit_inside_a_kernel_does_not_end_the_run(x):
    def exits(x, weight, bias, eps):
        raise SystemExit(3)

    assert fault_of(exits, x).reason == "raised"


@pytest.mark.parametrize(("fn", "reason", "words"), [
    (lambda x, w, b, eps: x.sum(-1), "shape", "returned shape (3,) for the output of shape (3, 8)"),
    (lambda x, w, b, eps: layernorm(x, w, b, eps).double(), "dtype", "returned torch.float64"),
    (lambda x, w, b, eps: layernorm(x, w, b, eps).tolist(), "type", "returned list, not a tensor"),
    (lambda x, w, b, eps: layernorm(x, w, b, eps).reshape(-1), "shape", "returned shape (24,)"),
])
def test_unusable_outputs_are_errors(x, fn, reason, words):
    fn.__name__ = reason
    fault = fault_of(fn, x)
    assert (fault.reason, fault.status) == (reason, "error")
    assert words in str(fault)


def test_nan_on_finite_input_is_a_wrong_answer(x):
    def nan_in_row_two(x, weight, bias, eps):
        y = layernorm(x, weight, bias, eps)
        y[1, 3] = float("nan")
        return y

    fault = fault_of(nan_in_row_two, x)
    assert (fault.reason, fault.status) == ("nonfinite", "failed")
    assert "1 NaN/inf values" in str(fault)


def test_nan_is_allowed_when_the_input_has_nan_or_when_asked(x):
    x_nan = x.clone()
    x_nan[0, 0] = float("nan")
    out = guard.call(kernel_of(layernorm), x_nan, None, None, 1e-5, like=x_nan)
    assert out[0].isnan().all() and out[1:].isfinite().all()
    ones = guard.call(lambda t: t / 0.0, x, allow_nonfinite=True, like=x)
    assert ones.isinf().any()


def test_a_hung_kernel_times_out_and_is_not_called_again(x):
    release = threading.Event()
    calls = []

    def hangs(x, weight, bias, eps):
        calls.append(1)
        release.wait(30)
        return layernorm(x, weight, bias, eps)

    started = time.monotonic()
    fault = fault_of(hangs, x, timeout=0.2)
    assert (fault.reason, fault.status) == ("timeout", "error")
    assert "did not return within 0.2 s" in str(fault)
    again = fault_of(hangs, x, timeout=0.2)
    assert "not called again" in str(again)
    assert time.monotonic() - started < 5 and len(calls) == 1
    release.set()


def test_grad_mode_of_the_caller_reaches_the_kernel(x):
    seen = []

    def records_grad_mode(t):
        seen.append(torch.is_grad_enabled())
        return t.clone()

    with torch.no_grad():
        guard.call(records_grad_mode, x, like=x)
    guard.call(records_grad_mode, x, like=x)
    with torch.inference_mode():
        guard.call(records_grad_mode, x, like=x)
    assert seen == [False, True, False]


def test_inference_mode_of_the_caller_reaches_the_kernel(x):
    seen = []

    def records_inference_mode(t):
        seen.append(torch.is_inference_mode_enabled())
        return t.clone()

    with torch.inference_mode():
        guard.call(records_inference_mode, x, like=x)
    guard.call(records_inference_mode, x, like=x)
    assert seen == [True, False]


def test_autocast_of_the_caller_reaches_the_kernel(x):
    """An autocast region is thread-local as grad mode: the kernel runs in the caller's (properties.checks.forward's
    check under autocast relies on it)."""
    seen = []

    def records_autocast(t):
        seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        return t.clone()

    with torch.autocast("cpu", dtype=torch.bfloat16):
        guard.call(records_autocast, x, like=x)
    guard.call(records_autocast, x, like=x)
    assert seen[0] == (True, torch.bfloat16) and seen[1][0] is False


def test_the_callers_context_reaches_the_kernel_and_its_backward(x):
    """torch's configuration overrides are per-thread context variables: the one torch-compile sets at load
    (donated_buffer = False) must hold in the guard's thread, for the forward and for a backward run through
    guard.grad, and a kernel's own context changes must not leak back to the caller."""
    seen = []

    class Records(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            seen.append(functorch_config.donated_buffer)
            return t.clone()

        @staticmethod
        def backward(ctx, g):
            seen.append(functorch_config.donated_buffer)
            return g

    def records(t):
        out = Records.apply(t)
        functorch_config.donated_buffer = True  # the kernel's own override stays in its thread's copy
        return out

    leaf = x.clone().requires_grad_(True)
    with functorch_config.patch(donated_buffer=False):
        y = guard.call(records, leaf, like=x)
        guard.grad(records, y, [leaf], torch.ones_like(y))
        assert functorch_config.donated_buffer is False
    assert seen == [False, False]


def test_grad_returns_checked_gradients(x):
    weight = torch.rand(8, requires_grad=True)
    xr = x.clone().requires_grad_()
    y = guard.call(kernel_of(layernorm), xr, weight, None, 1e-5, like=x)
    dy = torch.randn_like(x)
    dx, dw = guard.grad(kernel_of(layernorm), y, (xr, weight), dy)
    ex, ew = torch.autograd.grad(layernorm(xr, weight, None, 1e-5), (xr, weight), dy)
    torch.testing.assert_close((dx, dw), (ex, ew))


def test_grad_faults_on_no_backward_and_on_a_missing_gradient(x):
    weight = torch.rand(8, requires_grad=True)
    with pytest.raises(KernelFault, match="does not require grad"):
        guard.grad(kernel_of(layernorm), layernorm(x, None, None, 1e-5), (x,), x)
    xr = x.clone().requires_grad_()

    def ignores_weight(x, weight, bias, eps):
        return layernorm(x, None, bias, eps)

    y = ignores_weight(xr, weight, None, 1e-5)
    with pytest.raises(KernelFault, match="no gradient for input 1") as caught:
        guard.grad(kernel_of(ignores_weight), y, (xr, weight), torch.ones_like(x))
    assert caught.value.reason == "missing"


def test_a_backward_that_also_accumulates_into_grad_is_a_wrong_answer(x):
    """A backward adding dweight into weight.grad itself and returning it too (fused wgrad accumulation beside a
    returned gradient, NVIDIA/TransformerEngine#545): loss.backward() would leave it in .grad twice."""
    class AccumulatesToo(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight):
            ctx.save_for_backward(x, weight)
            return x * weight

        @staticmethod
        def backward(ctx, dy):
            x, weight = ctx.saved_tensors
            dweight = (dy * x).sum(0)
            weight.grad = dweight.clone()
            return dy * weight, dweight

    weight = torch.rand(8, requires_grad=True)
    xr = x.clone().requires_grad_()
    with pytest.raises(KernelFault, match=r"wrote into the .grad of input\(s\) \[1\]") as caught:
        guard.grad(kernel_of(layernorm), AccumulatesToo.apply(xr, weight), (xr, weight), torch.ones_like(x))
    assert (caught.value.reason, caught.value.status) == ("accumulated", "failed")


def test_a_seeded_kernel_that_reseeds_the_global_generator_is_a_wrong_answer(x):
    """A dropout kernel calling torch.manual_seed(seed) resets the caller's random stream (every later draw of a
    training loop repeats); one under torch.random.fork_rng leaves it alone."""
    def reseeds(x, p, seed):
        torch.manual_seed(seed)
        return torch.nn.functional.dropout(x, p)

    def forks(x, p, seed):
        with torch.random.fork_rng(devices=[]):
            return reseeds(x, p, seed)

    with pytest.raises(KernelFault, match="changed torch's global random generator") as caught:
        guard.call(Kernel(name="test:reseeds", kind="dropout", fn=reseeds), x, 0.5, 7, like=x)
    assert (caught.value.reason, caught.value.status) == ("rng", "failed")
    state = torch.random.get_rng_state()
    guard.call(Kernel(name="test:forks", kind="dropout", fn=forks), x, 0.5, 7, like=x)
    assert torch.equal(torch.random.get_rng_state(), state)


@pytest.mark.parametrize("leak", ["grad mode", "the default dtype", "the thread count"])
def test_a_kernel_that_leaves_torch_state_changed_is_a_wrong_answer(x, leak):
    """A kernel setting torch's grad mode (torch.set_grad_enabled without restoring it, pytorch/pytorch#113298), the
    default dtype or the thread count changes its caller's program; one that restores them does not."""
    threads, dtype = torch.get_num_threads(), torch.get_default_dtype()

    def leaks(x, weight, bias, eps):
        if leak == "grad mode":
            torch.set_grad_enabled(not torch.is_grad_enabled())
        elif leak == "the default dtype":
            torch.set_default_dtype(torch.float64)
        else:
            torch.set_num_threads(max(1, threads - 1) if threads > 1 else 2)
        return torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)

    try:
        with pytest.raises(KernelFault, match=f"left {leak} ") as caught:
            guard.call(Kernel(name="test:leaks", kind="layernorm", fn=leaks), x, None, None, 1e-5, like=x)
        assert (caught.value.reason, caught.value.status) == ("state", "failed")
        assert (torch.get_default_dtype(), torch.get_num_threads()) == (dtype, threads)  # set back for the next call
    finally:
        torch.set_default_dtype(dtype)
        torch.set_num_threads(threads)
    guard.call(Kernel(name="test:layer_norm", kind="layernorm", fn=layernorm), x, None, None, 1e-5, like=x)


def test_grad_faults_on_a_backward_that_raises_or_returns_nan(x):
    class Broken(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t * 2

        @staticmethod
        def backward(ctx, dy):
            if dy.sum() > 0:
                raise RuntimeError("backward kernel crashed")
            return dy * float("nan")

    xr = x.clone().requires_grad_()
    kernel = kernel_of(Broken.apply)
    with pytest.raises(KernelFault, match="raised RuntimeError: backward kernel crashed"):
        guard.grad(kernel, Broken.apply(xr), (xr,), torch.ones_like(x))
    with pytest.raises(KernelFault, match="NaN/inf values in the gradient of input 0") as caught:
        guard.grad(kernel, Broken.apply(xr), (xr,), -torch.ones_like(x))
    assert caught.value.status == "failed"


def test_limited_work_through_a_kernel_shares_its_time_limit_and_hung_state(x):
    release = threading.Event()

    def hangs(x, weight, bias, eps):
        release.wait(30)
        return x

    kernel = kernel_of(hangs)
    assert guard.limited(kernel, lambda: 42, timeout=1) == 42
    with pytest.raises(KernelFault, match="raised ZeroDivisionError"):
        guard.limited(kernel, lambda: 1 / 0, timeout=1)
    with pytest.raises(KernelFault) as nested:
        guard.limited(kernel, lambda: guard.call(lambda t: t.sum(), x, like=x), timeout=1)
    assert str(nested.value) == "kernel <lambda> returned shape () for the output of shape (3, 8)"
    with pytest.raises(KernelFault, match=r"did not return within 0\.2 s"):
        guard.limited(kernel, lambda: kernel.fn(x, None, None, 1e-5), timeout=0.2)
    with pytest.raises(KernelFault, match="not called again"):
        guard.call(kernel, x, None, None, 1e-5, like=x)
    release.set()


def test_memory_a_kernel_never_wrote_reads_as_nan_and_the_modes_are_restored(x):
    """A kernel returning torch.empty (an output it never wrote) gives NaN: a wrong answer, not whatever the allocator
    held; torch's deterministic-algorithms mode, which the filling needs, is on only during the call."""

    def unwritten(t, weight, bias, eps):
        return torch.empty_like(t)

    before = (torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory)
    assert fault_of(unwritten, x).reason == "nonfinite"
    assert (torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory) == before


def test_as_by_default_runs_the_kernel_in_torchs_default_modes(x):
    seen = []

    def records_modes(t, weight, bias, eps):
        seen.append((torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory))
        return t.clone()

    default = (torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory)
    guard.call(kernel_of(records_modes), x, None, None, 1e-5, like=x)
    with guard.as_by_default():
        guard.call(kernel_of(records_modes), x, None, None, 1e-5, like=x)
    assert seen == [(True, True), default]
