"""Bitwise claims of every norm kind: ``*.batch_invariance`` and ``*.determinism`` (proofs.claims.invariance).

Batch invariance: a window of k rows (of x, the residual and the upstream gradients) of a call of n rows, k <= n / 4,
called again on its own: its y (and residual_out) and dx (and d residual) must have the bits they had in the call
(another batch size, and, the window sitting elsewhere than at the start, other positions). dweight and dbias are
sums over the rows, another sum in another batch: not compared.
Determinism: the same call repeated (:data:`REPEATS` times on a GPU, twice elsewhere) gives the same bits of every
output and gradient (dx, dweight, dbias, d residual).

Both compare the kernel with itself, so its accuracy (and NaN/inf on finite input) is the forward and gradient
claims' business. Each example is a finding (properties.outcome.measured): it fails only where the kernel declares
the property (``Kernel.batch_invariant`` / ``deterministic`` True); otherwise the verdict and its evidence (which
output, batch size, position, max |difference| and units in the last place) are reported.
"""

from __future__ import annotations

import torch

from core.capabilities import discover, dtype_name
from core.registry import Kernel
from properties import norms, outcome

REPEATS = {"cuda": 3, "cpu": 2}
# what each output and gradient is called in the evidence
NAMES = {"y": "y", "residual_out": "residual_out", "x": "dx", "residual": "dresidual", "weight": "dweight",
         "bias": "dbias"}
ROW_GRADIENTS = ("dx", "dresidual")  # a row's own gradients; dweight and dbias sum over the rows
_INTEGERS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor:
    """t's bit patterns as int64."""
    return t.detach().contiguous().view(_INTEGERS[t.element_size()]).to(torch.int64)


def ordered_bits(t: torch.Tensor) -> torch.Tensor:
    """t's bit patterns as int64, ordered like the values (sign and magnitude made monotonic, -0 and +0 both 0): two
    floats' distance in units in the last place is the difference of these."""
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


def run(kernel: Kernel, example: dict, dy: torch.Tensor, dh: torch.Tensor | None) -> dict[str, torch.Tensor]:
    """The kernel's outputs and (where it has a backward) its gradients, by the evidence's names (:data:`NAMES`), for
    copies of the inputs (a kernel declaring an in-place residual update writes residual_out into its residual: the
    next call must get the same inputs)."""
    example = {role: value.clone() if isinstance(value, torch.Tensor) else value for role, value in example.items()}
    upstream = {"y": dy, **({"residual_out": dh} if dh is not None else {})}
    if not discover(kernel).backward:
        return norms.call(kernel, example, allow_nonfinite=True, any_dtype=True)
    outputs, grads = norms.gradients(kernel, example, upstream, allow_nonfinite=True, any_dtype=True)
    return {**outputs, **{NAMES[name]: g for name, g in grads.items()}}


def _describe(kernel: Kernel, x: torch.Tensor) -> str:
    rows = "samples" if kernel.record.grouped else "rows"
    return f"{x.shape[0]} {rows} of shape {tuple(x.shape[1:])}, {dtype_name(x.dtype)}"


def _parts(kernel: Kernel, found: dict[str, bool]) -> tuple[bool | None, bool | None]:
    """(forward held, backward held) from each compared output's verdict; None for a part not compared."""
    forward = [held for name, held in found.items() if name in kernel.record.outputs]
    backward = [held for name, held in found.items() if name not in kernel.record.outputs]
    return (all(forward) if forward else None), (all(backward) if backward else None)


def check_batch_invariance(kernel: Kernel, window: tuple[int, int], dy: torch.Tensor,
                           dh: torch.Tensor | None = None, **example) -> None:
    """Rows offset to offset + k - 1 of the call (``window`` = (offset, k)), called again on their own as a batch of
    k, give the same bits of the outputs and of the row gradients."""
    offset, k = window
    rows = slice(offset, offset + k)
    alone = {role: value[rows] if role in ("x", "residual") and value is not None else value
             for role, value in example.items()}
    batch = run(kernel, example, dy, dh)
    again = run(kernel, alone, dy[rows], None if dh is None else dh[rows])
    compared = [name for name in batch if name in kernel.record.outputs or name in ROW_GRADIENTS]
    call = _describe(kernel, example["x"])
    where = f"rows {offset}..{offset + k - 1} of a call of {call} vs the same rows as a call of {k}"
    found, differences = {}, []
    for name in compared:
        count, gap, ulps = bit_difference(batch[name][rows], again[name])
        found[name] = not count
        if count:
            differences.append(_difference_text(name, count, gap, ulps, where))
    forward, backward = _parts(kernel, found)
    outcome.measured("batch invariant", kernel.batch_invariant, forward, backward,
                     differences or [f"{', '.join(compared)} bit-identical: {where}"],
                     "the kernel's reduction order depends on the batch size or the row's position",
                     d=example["x"].shape[-1], dtype=dtype_name(example["x"].dtype), rows=example["x"].shape[0])


def check_determinism(kernel: Kernel, dy: torch.Tensor, dh: torch.Tensor | None = None, **example) -> None:
    """Repeated identical calls give the bits of the first of every output and gradient."""
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
                                                    f"{_describe(kernel, example['x'])}"))
    forward, backward = _parts(kernel, found)
    what = f"{', '.join(first)} bit-identical in {repeats} calls on {_describe(kernel, example['x'])}"
    outcome.measured("deterministic", kernel.deterministic, forward, backward, differences or [what],
                     "the kernel's order of operations varies between calls (atomics, an unseeded choice)",
                     d=example["x"].shape[-1], dtype=dtype_name(example["x"].dtype), rows=example["x"].shape[0])
