"""Bitwise claims of every norm kind: ``*.batch_invariance`` and ``*.determinism`` (proofs.claims.invariance).

Batch invariance: a window of k rows (of x, the residual and the upstream gradients; of the samples of x [N, C, *])
of a call of n rows, k <= n / 4, called again on its own: its y (and residual_out; q and the dynamic per-row scales)
and dx (and d residual) must have the bits they had in the call (another batch size, and, the window sitting elsewhere
than at the start, other positions). An output that is not per row (a static scale, returned as given) is compared
whole. dweight and dbias are sums over the rows, another sum in another batch, and so are the running buffers a
training call updates (averages over the samples): not compared.
Determinism: the same call repeated (:data:`REPEATS` times on a GPU, twice elsewhere) gives the same bits of every
output and gradient (dx, dweight, dbias, d residual) and of the running buffers it updates.

Both compare the kernel with itself, so its accuracy (and NaN/inf on finite input) is the forward and gradient
claims' business. Each example is a finding (properties.outcome.measured): it fails only where the kernel declares
the property (``Kernel.batch_invariant`` / ``deterministic`` True); otherwise the verdict and its evidence (which
output, batch size, position, max |difference| and units in the last place) are reported.
"""

from __future__ import annotations

import torch

from core import guard
from core.capabilities import discover, dtype_name
from core.registry import Kernel
from properties import norms, outcome

REPEATS = {"cuda": 3, "cpu": 2}
# what each output and gradient is called in the evidence
NAMES = {"y": "y", "residual_out": "residual_out", "x": "dx", "residual": "dresidual", "weight": "dweight",
         "bias": "dbias"}
ROW_GRADIENTS = ("dx", "dresidual")  # a row's own gradients; dweight and dbias sum over the rows
GRADIENTS = tuple(NAMES[role] for role in ("x", "residual", "weight", "bias"))  # the backward's outputs
RUNNING_BUFFERS = ("running_mean", "running_var")  # updated in place by a training call (BatchNorm, InstanceNorm)
_INTEGERS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor:
    """t's bit patterns as int64."""
    return t.detach().contiguous().view(_INTEGERS[t.element_size()]).to(torch.int64)


def ordered_bits(t: torch.Tensor) -> torch.Tensor:
    """t's bit patterns as int64, ordered like the values (sign and magnitude made monotonic, -0 and +0 both 0): two
    floats' distance in units in the last place is the difference of these; an integer tensor's values (INT8 q)."""
    if not t.is_floating_point():
        return t.detach().to(torch.int64)
    bits = _bits(t)
    magnitude = bits & ((1 << (8 * t.element_size() - 1)) - 1)
    return torch.where(bits < 0, -magnitude, magnitude)


def bit_difference(a: torch.Tensor, b: torch.Tensor) -> tuple[int, float, int]:
    """(how many elements differ in their bits, the largest |a - b| among them, the largest distance in units in
    the last place); (0, 0.0, 0) for bit-identical tensors (-0 is not +0; NaN equals NaN only with the same bits)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        raise ValueError(f"compared {tuple(a.shape)} {a.dtype} with {tuple(b.shape)} {b.dtype}")
    differ = _bits(a) != _bits(b)
    count = int(differ.sum())
    if not count:
        return 0, 0.0, 0
    gap = (a.double() - b.double()).abs()[differ]
    ulps = (ordered_bits(a) - ordered_bits(b)).abs()[differ]
    return count, float(gap.nan_to_num(nan=float("inf")).max()), int(ulps.max())


def _difference_text(name: str, count: int, gap: float, ulps: int, where: str) -> str:
    return f"{name} {where}: {count} element(s) differ, max |difference| {gap:.3g} ({ulps} ulp)"


def run(kernel: Kernel, example: dict, dy: torch.Tensor | None, dh: torch.Tensor | None
        ) -> dict[str, torch.Tensor]:
    """The kernel's outputs, (where it has a backward) its gradients, by the evidence's names (:data:`NAMES`), and the
    running buffers as the call left them, for copies of the inputs (a kernel declaring an in-place residual update
    writes residual_out into its residual, a training call its running buffers: the next call must get the same
    inputs). ``dy`` None: a forward-only kind (the quantized outputs). Called in torch's default modes
    (core.guard.as_by_default): determinism as the kernel has it by default."""
    example = {role: value.clone() if isinstance(value, torch.Tensor) else value for role, value in example.items()}
    buffers = {name: example[name] for name in RUNNING_BUFFERS if example.get(name) is not None}
    with guard.as_by_default():
        if dy is None or not discover(kernel).backward:
            return {**norms.call(kernel, example, allow_nonfinite=True, any_dtype=True), **buffers}
        upstream = {"y": dy, **({"residual_out": dh} if dh is not None else {})}
        outputs, grads = norms.gradients(kernel, example, upstream, allow_nonfinite=True, any_dtype=True)
    return {**outputs, **{NAMES[name]: g for name, g in grads.items()}, **buffers}


def _describe(kernel: Kernel, example: dict) -> str:
    """The call: its rows (samples of x [N, C, *]), their shape and dtype, the mode of a kind with running
    statistics, the format and kind of scale of a quantized kind."""
    x = example["x"]
    rows = "rows" if kernel.record.scope == "row" else "samples"
    mode = "" if "training" not in example else ", training" if example["training"] else ", eval"
    if "quant_dtype" in example:
        mode += f", {dtype_name(example['quant_dtype'])} q, {'dynamic' if example['scale'] is None else 'static'} scale"
    return f"{x.shape[0]} {rows} of shape {tuple(x.shape[1:])}, {dtype_name(x.dtype)}{mode}"


def _parts(kernel: Kernel, found: dict[str, bool]) -> tuple[bool | None, bool | None]:
    """(forward held, backward held) from each compared output's verdict (the running buffers are the forward's);
    None for a part not compared."""
    forward = [held for name, held in found.items() if name not in GRADIENTS]
    backward = [held for name, held in found.items() if name in GRADIENTS]
    return (all(forward) if forward else None), (all(backward) if backward else None)


def _window(t: torch.Tensor | None, rows: slice, n: int) -> torch.Tensor | None:
    """t's rows ``rows`` where t is per row (its first dimension x's n), else t whole (a static scale)."""
    return t[rows] if t is not None and t.dim() and t.shape[0] == n else t


def check_batch_invariance(kernel: Kernel, window: tuple[int, int], dy: torch.Tensor | None = None,
                           dh: torch.Tensor | None = None, **example) -> None:
    """Rows offset to offset + k - 1 of the call (``window`` = (offset, k)), called again on their own as a batch of
    k, give the same bits of the outputs and of the row gradients (``dy`` None: forward only)."""
    offset, k = window
    rows, n = slice(offset, offset + k), example["x"].shape[0]
    alone = {role: value[rows] if role in ("x", "residual") and value is not None else value
             for role, value in example.items()}
    batch = run(kernel, example, dy, dh)
    again = run(kernel, alone, _window(dy, rows, n), _window(dh, rows, n))
    compared = [name for name in batch if name in kernel.record.outputs or name in ROW_GRADIENTS]
    call = _describe(kernel, example)
    where = f"rows {offset}..{offset + k - 1} of a call of {call} vs the same rows as a call of {k}"
    found, differences = {}, []
    for name in compared:
        count, gap, ulps = bit_difference(_window(batch[name], rows, n), again[name])
        found[name] = not count
        if count:
            differences.append(_difference_text(name, count, gap, ulps, where))
    forward, backward = _parts(kernel, found)
    outcome.measured("batch invariant", kernel.batch_invariant, forward, backward,
                     differences or [f"{', '.join(compared)} bit-identical: {where}"],
                     "the kernel's reduction order depends on the batch size or the row's position",
                     d=example["x"].shape[-1], dtype=dtype_name(example["x"].dtype), rows=example["x"].shape[0])


def check_determinism(kernel: Kernel, dy: torch.Tensor | None = None, dh: torch.Tensor | None = None,
                      **example) -> None:
    """Repeated identical calls give the bits of the first of every output, gradient and updated running buffer
    (``dy`` None: forward only)."""
    first = run(kernel, example, dy, dh)
    repeats = REPEATS.get(example["x"].device.type, REPEATS["cpu"])
    found, differences = dict.fromkeys(first, True), []
    for call in range(2, repeats + 1):
        again = run(kernel, example, dy, dh)
        for name, value in first.items():
            count, gap, ulps = bit_difference(again[name], value)
            if count:
                found[name] = False
                differences.append(_difference_text(name, count, gap, ulps, f"of call {call} vs call 1 on "
                                                    f"{_describe(kernel, example)}"))
    forward, backward = _parts(kernel, found)
    what = f"{', '.join(first)} bit-identical in {repeats} calls on {_describe(kernel, example)}"
    outcome.measured("deterministic", kernel.deterministic, forward, backward, differences or [what],
                     "the kernel's order of operations varies between calls (atomics, an unseeded choice)",
                     d=example["x"].shape[-1], dtype=dtype_name(example["x"].dtype), rows=example["x"].shape[0])
