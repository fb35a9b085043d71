"""Calling a kernel under test without letting it take the run down.

Every call of a kernel under test goes through :func:`call` (its forward), :func:`grad` (its
backward, through autograd) or :func:`limited` (other work through the kernel: a capability probe,
a matrix-free estimate). A kernel that raises, exceeds the time limit, or returns something
unusable (not a tensor, wrong shape, dtype or device, NaN/inf for finite inputs) raises
:class:`KernelFault` with one line that says which and how; the test reports that claim and the
run goes on.

How a fault is reported (``properties.run.results``): a kernel whose output is NaN/inf on finite
inputs gave a wrong answer, so the claim is **failed** (reason ``nonfinite``); every other reason
(raised, timeout, type, shape, dtype, device, missing) means the claim could not be checked, so
it is an **error**. Both make ``normverify run`` exit 1.

Uninitialized memory: during a call, every tensor torch allocates without initializing it (``torch.empty``,
``empty_like``, ``new_empty``, ``resize_``) is filled with NaN (integers with their maximum), so a kernel that reads
memory it never wrote, or leaves part of an output unwritten, gives NaN (a ``nonfinite`` fault) instead of whatever
the allocator held: zeros, or a previous call's values that happen to be right (:func:`poisoned_allocations`;
:func:`as_by_default` turns it off for claims about a kernel's default behaviour, the bitwise ones).

Time limit: the call runs in a daemon thread that the caller waits for at most ``timeout``
seconds (on CUDA the wait includes a device synchronize, so asynchronous work counts). A thread
cannot be killed, so a kernel that timed out is remembered as hung and every later call to it
fails at once with the same fault instead of hanging again (Hypothesis's shrinking would
otherwise replay the hang for every candidate). Autograd's grad mode, inference mode and autocast regions are
thread-local and are carried into the thread. The default limit is ``NORMVERIFY_CALL_TIMEOUT`` seconds (120).
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, nullcontext

import torch

from core.errors import one_line

DEFAULT_TIMEOUT_S = float(os.environ.get("NORMVERIFY_CALL_TIMEOUT", "120"))

# Reasons that mean "the kernel gave a wrong answer" (the claim fails); all others mean "the claim
# could not be checked" (error).
WRONG_ANSWER_REASONS = frozenset({"nonfinite", "accumulated", "rng", "state"})

# guard.call(dtype=ANY_DTYPE): the output's dtype is not judged (a check about something else, e.g. its inputs)
ANY_DTYPE = "any"
AUTOCAST_DEVICES = ("cpu", "cuda")  # the device types whose autocast regions a call carries into its thread

# id(fn) -> (fn, message) of kernels with a call still running past its time limit. The function
# is kept so that its id cannot be reused by another object.
_hung: dict[int, tuple[Callable, str]] = {}


class KernelFault(Exception):
    """The kernel under test misbehaved.

    ``reason``: raised | timeout | type | shape | dtype | device | nonfinite | missing | accumulated | rng |
    state.
    """

    def __init__(self, kernel: str, reason: str, detail: str) -> None:
        super().__init__(f"kernel {kernel} {detail}")
        self.kernel = kernel
        self.reason = reason

    @property
    def status(self) -> str:
        """The test status this fault gives its claim: ``failed`` (a wrong answer) or ``error``."""
        return "failed" if self.reason in WRONG_ANSWER_REASONS else "error"


def _synchronize(value) -> None:
    """Wait for CUDA work behind ``value`` so that the time limit covers it."""
    tensors = value if isinstance(value, (tuple, list)) else (value,)
    if any(isinstance(t, torch.Tensor) and t.is_cuda for t in tensors):
        torch.cuda.synchronize()


_POISONED = contextvars.ContextVar("normverify_poisoned_allocations", default=True)


@contextmanager
def poisoned_allocations() -> Iterator[None]:
    """Within: torch's uninitialized allocations are filled with NaN (``torch.utils.deterministic.
    fill_uninitialized_memory``), unless :func:`as_by_default` is in force. torch fills only in its
    deterministic-algorithms mode, so that mode is on too, ``warn_only``: an op without a deterministic implementation
    warns and runs as it would (norm kernels use none: their reductions are their own)."""
    if not _POISONED.get():
        yield
        return
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.utils.deterministic.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.utils.deterministic.fill_uninitialized_memory = before[2]


@contextmanager
def as_by_default() -> Iterator[None]:
    """Within: kernel calls run in torch's default modes, uninitialized memory not filled (the bitwise claims
    measure a kernel's determinism as it runs by default: the deterministic-algorithms mode would change it)."""
    token = _POISONED.set(False)
    try:
        yield
    finally:
        _POISONED.reset(token)


_KERNEL_DEFAULT_DTYPE: contextvars.ContextVar[torch.dtype | None] = contextvars.ContextVar(
    "normverify_kernel_default_dtype", default=None)


@contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Within: every kernel call runs with torch's default dtype set to ``dtype`` (and set back after it; the suite's
    own tensors keep the caller's): a program that set ``torch.set_default_dtype`` (float64 in scientific code,
    bfloat16 in some training scripts) calls kernels so."""
    token = _KERNEL_DEFAULT_DTYPE.set(dtype)
    try:
        yield
    finally:
        _KERNEL_DEFAULT_DTYPE.reset(token)


def _refuse_if_hung(kernel_fn: Callable, name: str) -> None:
    if id(kernel_fn) in _hung:
        raise KernelFault(name, "timeout", _hung[id(kernel_fn)][1])


def _modes() -> dict[str, object]:
    """The torch state a call must leave as it found it: the thread's grad mode, inference mode and autocast regions,
    the process's default dtype, deterministic-algorithms mode and intra-op thread count."""
    return {"grad mode": torch.is_grad_enabled(), "inference mode": torch.is_inference_mode_enabled(),
            **{f"autocast on {device}": (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
               for device in AUTOCAST_DEVICES},
            "the default dtype": torch.get_default_dtype(),
            "the deterministic-algorithms mode": torch.are_deterministic_algorithms_enabled(),
            "the thread count": torch.get_num_threads()}


def _changed_modes(before: dict[str, object], after: dict[str, object]) -> str:
    """What differs between two :func:`_modes`, in words ('' for nothing)."""
    return ", ".join(f"{name} ({before[name]} -> {after[name]})" for name in before if after[name] != before[name])


def _restore_process_modes(modes: dict[str, object]) -> None:
    """Set back the process-wide parts of :func:`_modes` a call changed (the thread's own go with its contexts and
    its thread; the deterministic-algorithms mode with poisoned_allocations)."""
    if torch.get_default_dtype() != modes["the default dtype"]:
        torch.set_default_dtype(modes["the default dtype"])
    if torch.get_num_threads() != modes["the thread count"]:
        torch.set_num_threads(modes["the thread count"])


def _run_limited(thunk: Callable[[], object], kernel_fn: Callable, timeout: float | None, name: str) -> object:
    """``thunk()`` within ``timeout`` seconds; any exception it raises becomes a KernelFault ``raised``.

    A timeout marks ``kernel_fn`` as hung (see the module docstring). The thread runs in a copy of the caller's
    context, with the caller's grad mode, inference mode and autocast regions: what the caller set for the kernel
    holds in it (torch's configuration overrides, such as torch-compile's ``donated_buffer = False``, are context
    variables of the thread that set them).
    """
    _refuse_if_hung(kernel_fn, name)
    box: dict = {}
    grad_enabled, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
    autocast = [(device, torch.get_autocast_dtype(device)) for device in AUTOCAST_DEVICES
                if torch.is_autocast_enabled(device)]
    context = contextvars.copy_context()

    def target() -> None:
        try:
            # inference_mode(False) would turn grad mode on: entered only when the caller is in inference mode
            with torch.inference_mode() if inference else nullcontext(), torch.set_grad_enabled(grad_enabled), \
                    ExitStack() as autocasts:
                for device, dtype in autocast:  # thread-local as grad mode: the caller's autocast regions
                    autocasts.enter_context(torch.autocast(device, dtype=dtype))
                before = torch.get_default_dtype()
                if _KERNEL_DEFAULT_DTYPE.get() is not None:
                    torch.set_default_dtype(_KERNEL_DEFAULT_DTYPE.get())
                try:
                    entered = _modes()
                    box["value"] = thunk()
                    _synchronize(box["value"])
                    box["left"] = _changed_modes(entered, _modes())
                    _restore_process_modes(entered)
                finally:
                    torch.set_default_dtype(before)
        except BaseException as error:  # reported in the caller's thread
            box["error"] = error

    with poisoned_allocations():  # set and restored here: a hung call's thread never leaves them set
        if timeout is None:
            target()
        else:
            worker = threading.Thread(target=context.run, args=(target,), name=f"normverify-call-{name}",
                                      daemon=True)
            worker.start()
            worker.join(timeout)
            if worker.is_alive():
                detail = f"did not return within {timeout:g} s (hung?)"
                _hung[id(kernel_fn)] = (kernel_fn, f"{detail}; it is not called again in this run")
                raise KernelFault(name, "timeout", detail)
    if "error" in box:
        error = box["error"]
        if isinstance(error, (KeyboardInterrupt, KernelFault)):  # a fault found by a nested guarded call stays as is
            raise error
        raise KernelFault(name, "raised", f"raised {one_line(error)}") from error
    if box["left"]:
        raise KernelFault(name, "state", f"left {box['left']} changed after the call (the caller's state: a kernel "
                                         "must restore what it sets, pytorch/pytorch#113298)")
    return box["value"]


def _check_tensor(name: str, out: object, like: torch.Tensor | None, what: str,
                  dtype: torch.dtype | None = None) -> torch.Tensor:
    if not isinstance(out, torch.Tensor):
        raise KernelFault(name, "type", f"returned {type(out).__name__}, not a tensor, for {what}")
    if like is not None:
        if out.shape != like.shape:
            raise KernelFault(name, "shape", f"returned shape {tuple(out.shape)} for {what} of shape "
                                             f"{tuple(like.shape)}")
        expected = dtype or like.dtype
        if expected != ANY_DTYPE and out.dtype != expected:
            raise KernelFault(name, "dtype", f"returned {out.dtype} for {what} of dtype {like.dtype}"
                                             + ("" if expected == like.dtype else f" (expected {expected})"))
        if out.device != like.device:
            raise KernelFault(name, "device", f"returned a tensor on {out.device} for {what} on {like.device}")
    return out


def _check_finite(name: str, out: torch.Tensor, inputs: Sequence[object], what: str) -> None:
    """NaN/inf in ``out`` is a fault when every floating-point tensor in ``inputs`` is finite (an FP8 output, which
    torch.isfinite does not take, judged in float32: exact)."""
    if out.is_floating_point() and out.element_size() == 1:
        out = out.float()
    if not out.is_floating_point() or bool(torch.isfinite(out).all()):
        return
    if all(bool(torch.isfinite(a).all()) for a in inputs if isinstance(a, torch.Tensor) and a.is_floating_point()):
        bad = int((~torch.isfinite(out)).sum())
        raise KernelFault(name, "nonfinite", f"returned {bad} NaN/inf values in {what} for finite inputs")


def _name(kernel) -> str:
    return getattr(kernel, "name", getattr(kernel, "__name__", repr(kernel)))


def limited(kernel, work: Callable[[], object], *, timeout: float | None = DEFAULT_TIMEOUT_S) -> object:
    """``work()``, some computation through ``kernel`` (a probe, a matrix-free estimate), under the kernel's time limit.

    An exception from ``work`` is a KernelFault ``raised``; a timeout marks the kernel as hung, so
    that neither ``work`` nor any later call of the kernel waits for it again. The result is not checked.
    """
    return _run_limited(work, getattr(kernel, "fn", kernel), timeout, _name(kernel))


def _draws_a_mask(kernel) -> bool:
    record = getattr(kernel, "record", None)
    return bool(record is not None and record.dropout)


def _global_generators(tensors: Sequence) -> list[tuple[str, torch.Tensor]]:
    """(device, state) of torch's global generators a call on ``tensors`` could touch: the CPU's, and each CUDA
    device's among them."""
    devices = sorted({t.device.index or 0 for t in tensors if isinstance(t, torch.Tensor) and t.is_cuda})
    return [("cpu", torch.random.get_rng_state()),
            *((f"cuda:{index}", torch.cuda.get_rng_state(index)) for index in devices)]


@contextmanager
def leaves_global_rng_alone(kernel, tensors: Sequence) -> Iterator[None]:
    """Within: a call or backward of a kind that draws a dropout mask from its seed must leave torch's global
    generators as they were (a kernel reseeding them with ``torch.manual_seed(seed)`` resets the caller's random
    stream: every later draw of the training loop repeats; a kernel drawing from them makes its mask depend on the
    caller's state, not only on its seed). An ``rng`` fault, a wrong answer, where one changed."""
    if not _draws_a_mask(kernel):
        yield
        return
    before = _global_generators(tensors)
    yield
    after = dict(_global_generators(tensors))
    changed = [device for device, state in before if not torch.equal(after[device], state)]
    if changed:
        raise KernelFault(_name(kernel), "rng", f"changed torch's global random generator ({', '.join(changed)}): "
                          "a seeded kernel must draw its mask from its seed alone and leave the caller's random "
                          "stream as it was (torch.random.fork_rng, or a torch.Generator of its own)")


def call(kernel, *args, like: torch.Tensor | None = None, allow_nonfinite: bool = False,
         timeout: float | None = DEFAULT_TIMEOUT_S, dtype: torch.dtype | None = None,
         returns: tuple[str, ...] = ("output",), **kwargs) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """``kernel.fn(*args, **kwargs)``, checked against ``like`` (whose shape, dtype and device the output must have;
    ``dtype``: the output's dtype when it is not like's, e.g. by a declared output-dtype rule; ANY_DTYPE: not judged).

    ``returns`` names what the kernel's contract returns: one output (the default), or several (a fused kind's
    ("y", "residual_out")), then a tuple or list of that many tensors, the first judged against ``like``, all given
    back as a tuple; anything else is a ``type`` fault naming the contract. ``kernel`` is a
    :class:`core.registry.Kernel` or a plain callable. Non-finite outputs are a fault only when every tensor argument
    is finite and ``allow_nonfinite`` is false. A kind drawing a dropout mask must leave torch's global generators
    alone (:func:`leaves_global_rng_alone`).
    """
    name = _name(kernel)
    fn = getattr(kernel, "fn", kernel)
    with leaves_global_rng_alone(kernel, (*args, *kwargs.values())):
        out = limited(kernel, lambda: fn(*args, **kwargs), timeout=timeout)
    if len(returns) > 1:
        if not (isinstance(out, (tuple, list)) and len(out) == len(returns)
                and all(isinstance(t, torch.Tensor) for t in out)):
            what = f"a {type(out).__name__} of {len(out)}" if isinstance(out, (tuple, list)) else type(out).__name__
            raise KernelFault(name, "type", f"returned {what}, not the {len(returns)} tensors "
                                            f"({', '.join(returns)}) of its contract")
        first, rest = out[0], tuple(out[1:])
    else:
        first, rest = out, ()
    first = _check_tensor(name, first, like, f"the {returns[0]}", dtype)
    if not allow_nonfinite:
        _check_finite(name, first, args, f"the {returns[0]}")
    return (first, *rest) if len(returns) > 1 else first


def grad(kernel, outputs: torch.Tensor | Sequence[torch.Tensor], inputs: Sequence[torch.Tensor],
         grad_outputs: torch.Tensor | Sequence[torch.Tensor], *, allow_nonfinite: bool = False,
         timeout: float | None = DEFAULT_TIMEOUT_S, retain_graph: bool = False) -> tuple[torch.Tensor, ...]:
    """The kernel's backward: ``torch.autograd.grad(outputs, inputs, grad_outputs)``, one gradient per input
    (``outputs`` one tensor or several, each with its upstream gradient in ``grad_outputs``; ``retain_graph``: the
    graph kept for another backward).

    Each gradient must be a tensor with its input's shape, dtype and device (an input the outputs do not depend on
    is a ``missing`` fault), finite when the inputs and ``grad_outputs`` are; the backward must leave the inputs'
    ``.grad`` as it was (``torch.autograd.grad`` does: a backward that accumulates into ``.grad`` itself is an
    ``accumulated`` fault, a wrong answer). The first output must require grad (a
    kernel with no backward is a ``missing`` fault); a kind drawing a dropout mask must leave torch's global
    generators alone (:func:`leaves_global_rng_alone`).
    """
    name = _name(kernel)
    _refuse_if_hung(getattr(kernel, "fn", kernel), name)
    outputs = (outputs,) if isinstance(outputs, torch.Tensor) else tuple(outputs)
    grad_outputs = (grad_outputs,) if isinstance(grad_outputs, torch.Tensor) else tuple(grad_outputs)
    if not outputs[0].requires_grad:
        raise KernelFault(name, "missing", "returned an output that does not require grad (no backward)")
    inputs = tuple(inputs)
    held = [x.grad for x in inputs]
    with leaves_global_rng_alone(kernel, inputs):
        grads = limited(kernel, lambda: torch.autograd.grad(outputs, inputs, grad_outputs, allow_unused=True,
                                                            retain_graph=retain_graph), timeout=timeout)
    written = [index for index, (x, before) in enumerate(zip(inputs, held, strict=True)) if x.grad is not before]
    if written:
        raise KernelFault(name, "accumulated", f"wrote into the .grad of input(s) {written} in its backward besides "
                          "returning their gradients: under loss.backward() autograd adds the returned gradient to "
                          ".grad again, so a training step gets it twice")
    for index, (g, x) in enumerate(zip(grads, inputs, strict=True)):
        what = f"the gradient of input {index}"
        if g is None:
            raise KernelFault(name, "missing", f"returned no gradient for input {index} (shape {tuple(x.shape)})")
        _check_tensor(name, g, x, what)
        if not allow_nonfinite:
            _check_finite(name, g, (*inputs, *grad_outputs), what)
    return grads
