"""The backward differentiates the forward that was recorded, for every differentiable kind (each kind's jacobian
claim, or dropout's gradient claim, with its own bounds).

A training step does not leave a recorded graph alone between its forward and its backward:

1. **Tensors written in place after the forward.** The residual stream is updated in place (``x += attn(norm(x))``),
   an activation or dropout runs in place on the norm's output, an optimizer step or a weight-tying update writes a
   parameter. Autograd keeps every tensor saved with ``ctx.save_for_backward`` under a version counter: a backward
   that needs a saved tensor written since raises ``RuntimeError: one of the variables needed for gradient
   computation has been modified by an inplace operation`` (torch's own kernels do). A kernel that keeps what it
   needs as a copy gives the gradient at the values the forward saw. A kernel that keeps the tensor itself as an
   attribute (``ctx.x = x``), or derives its mask or xhat from an output it kept that way, silently gives the
   gradient at the *written* values: autograd has no way to know. An output that is a view made inside the
   kernel's autograd Function (``return y.view(x.shape)``, as Liger-Kernel's norms return) cannot be written in place
   at all: autograd raises at the write in grad mode (``torch.relu_(y)``, where torch's own outputs are writable),
   or at the backward when it was written under ``no_grad``. Either refusal passes: a gradient is never silently
   wrong through it (docs/findings.md [L-VIEW]).
2. **A second backward of one graph** (``retain_graph=True``: two losses of one forward, a GAN's two players). Each
   backward gives the gradient for its own upstream gradient; a backward that writes into what it saved (dx into
   the saved x's storage, rstd scaled in place) gives the second one wrong. A kernel that refuses a retained
   graph with an error (torch.compile's donated buffers) is not compared: loud, not silently wrong.
3. **Another forward before the backward** (pipeline parallelism runs several micro-batches' forwards before their
   backwards; activation checkpointing recomputes a forward inside another's backward): the first forward's backward
   gives the first's gradients. A kernel keeping its statistics, mask or seed in module or global state (the latest
   call's) instead of its autograd context gives the other call's.

So, per example: each differentiable input and each output in turn is written in place after the forward
(:func:`write_in_place`, under ``torch.no_grad()`` as an optimizer step is: the graph itself is unchanged), then the
backward either raises autograd's error or gives the fresh graph's gradients within twice their bound (two
computations of one value, each within one bound of it); the graph is backpropagated twice, with upstream gradients
g, then -2 g (exact in binary floating point: the second gradients are -2 times the first, each computation within
its bound, so within 2 + 2 = 4 bounds of -2 times a fresh graph's); and a forward on other values (x written as
above; for a kind with a seed, the next seed) recorded between a forward and its backward leaves that backward's
gradients within twice their bound of the fresh graph's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch

from core import guard
from properties import norms, outcome

# autograd's errors for a graph whose tensors were written in place: a tensor saved with save_for_backward written
# since; an output that is a view made inside the kernel's autograd Function (or a no_grad view) written since
AUTOGRAD_REFUSALS = ("modified by an inplace operation",
                     "its base or another view of its base has been modified inplace")
SECOND_UPSTREAM_SCALE = -2.0  # the second backward's upstream gradients: exact multiples of the first's


def write_in_place(t: torch.Tensor) -> None:
    """t <- t * r + r in place, r a ramp from 0.5 to 1.5 along the last axis: a change no norm is invariant to
    (not a shift, not a uniform scale, not a sign flip; zeros of a dropout output become non-zero), written as an
    optimizer step writes (``torch.no_grad()``: the version counter moves, the graph does not)."""
    with torch.no_grad():
        ramp = torch.linspace(0.5, 1.5, t.shape[-1], dtype=t.dtype, device=t.device) if t.dim() else t.new_tensor(1.0)
        t.mul_(ramp).add_(ramp)


def refused_by_autograd(fault: guard.KernelFault) -> bool:
    """The backward raised one of autograd's errors for a graph written in place (:data:`AUTOGRAD_REFUSALS`)."""
    return fault.reason == "raised" and isinstance(fault.__cause__, RuntimeError) \
        and any(text in str(fault.__cause__) for text in AUTOGRAD_REFUSALS)


def check_recorded_graph(kernel, examples: Callable[[], dict], upstream: Mapping[str, torch.Tensor],
                         bounds: Mapping[str, np.ndarray], **point) -> None:
    """The two properties of the module docstring for a kernel of any differentiable kind: ``examples()`` gives the
    arguments of one call (fresh running buffers for a kind whose call writes them), ``upstream`` the upstream
    gradient of each output, ``bounds`` the backward bound of each input's gradient."""
    norms.require_backward(kernel)
    fresh = norms.gradients(kernel, examples(), upstream, allow_nonfinite=True)[1]
    comparisons = []
    present = [name for name in kernel.record.differentiable if examples().get(name) is not None]
    for written in (*present, *kernel.record.outputs):  # norms.record's leaves, then the kernel's outputs
        leaves, outputs = norms.record(kernel, examples(), allow_nonfinite=True)
        write_in_place({**leaves, **outputs}[written])
        try:
            grads = norms.backward(kernel, leaves, outputs, upstream, allow_nonfinite=True)
        except guard.KernelFault as fault:
            if refused_by_autograd(fault):
                continue  # autograd refuses the stale graph, as for torch's kernels: never a silently wrong gradient
            raise
        comparisons += [outcome.compare(g, fresh[name], 2 * bounds[name],
                                        f"d{name} after {written} was written in place following the forward")
                        for name, g in grads.items()]
    comparisons += _second_backward(kernel, examples(), upstream, fresh, bounds)
    comparisons += _backward_after_another_forward(kernel, examples, upstream, fresh, bounds)
    if not comparisons:  # every write refused by autograd, and a retained graph refused: loud, nothing silently wrong
        outcome.exact(True, "", **point)
        return
    outcome.conclude(comparisons, "the backward does not differentiate the recorded forward: it reads a tensor "
                                  "written in place after the forward, kept without autograd's version check "
                                  "(ctx.x = x, not ctx.save_for_backward), a second backward of one graph "
                                  "(retain_graph=True) is not the gradient for its upstream gradient, or it reads "
                                  "state a later forward replaced (the latest call's statistics, mask or seed)",
                     **point)


def _backward_after_another_forward(kernel, examples: Callable[[], dict], upstream: Mapping[str, torch.Tensor],
                                    fresh: dict, bounds: Mapping) -> list:
    """Comparisons of a forward's gradients, backpropagated after a second forward (its x written as
    :func:`write_in_place` writes, its seed the next one) was recorded, with a fresh graph's."""
    leaves, outputs = norms.record(kernel, examples(), allow_nonfinite=True)
    other = examples()
    other["x"] = other["x"].clone()
    write_in_place(other["x"])
    if other.get("seed") is not None:
        other["seed"] = other["seed"] + 1
    norms.record(kernel, other, allow_nonfinite=True)  # kept alive until the first backward ran
    grads = norms.backward(kernel, leaves, outputs, upstream, allow_nonfinite=True)
    return [outcome.compare(g, fresh[name], 2 * bounds[name],
                            f"d{name} after another forward was recorded before this forward's backward")
            for name, g in grads.items()]


def _second_backward(kernel, example: dict, upstream: Mapping[str, torch.Tensor], fresh: dict, bounds: Mapping
                     ) -> list:
    """Comparisons of the second backward of one graph (upstream gradients -2 g) with -2 times a fresh graph's
    gradients, after a first backward with g and retain_graph=True; none where the kernel refuses a retained graph
    with an error (torch.compile's donated buffers do): loud, never a silently wrong gradient."""
    leaves, outputs = norms.record(kernel, example, allow_nonfinite=True)
    scaled = {name: SECOND_UPSTREAM_SCALE * g for name, g in upstream.items()}
    try:
        norms.backward(kernel, leaves, outputs, upstream, allow_nonfinite=True, retain_graph=True)
        second = norms.backward(kernel, leaves, outputs, scaled, allow_nonfinite=True)
    except guard.KernelFault as fault:
        if fault.reason != "raised":
            raise
        return []
    factor = abs(SECOND_UPSTREAM_SCALE)
    return [outcome.compare(g, SECOND_UPSTREAM_SCALE * norms.as_float64(fresh[name]), 2 * factor * bounds[name],
                            f"d{name} of a second backward of one graph, upstream gradients scaled by "
                            f"{SECOND_UPSTREAM_SCALE:g}") for name, g in second.items()]
