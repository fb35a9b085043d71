"""Contracts of LayerNorm/RMSNorm kernels: {ln,rms}.row_independence, {ln,rms}.layout_invariance,
{ln,rms}.inputs_unmodified.

These are self-consistency claims: accuracy against the oracle (and NaN/inf for finite inputs) is the
business of the forward and Jacobian claims, so a kernel's inaccuracy is not reported here a second time.
Row independence: changing one row leaves every other output row bit-for-bit unchanged (same shapes,
so the same computation); a [B, S, H] input gives the [B*S, H] result within twice the forward bound
(two computations of one value, each within one bound of it).
Layout: a non-contiguous x (or upstream gradient) gives the contiguous call's result within twice the
bound.
Inputs unmodified: x, weight, bias and the upstream gradient are bit-for-bit the same after a forward
and backward; and the outputs are fresh tensors: a second call (on other values) leaves the first call's
output and gradients as they were.
Views into larger buffers (q/k/v split from one projection, a row range of a cache): x, weight, bias and the
upstream gradient with a non-zero storage offset and rows longer than the width give the contiguous call's
result within twice the bound (layout_invariance).
Both draw weight and bias in x's dtype or another the kernel takes; neither judges the output's dtype (the forward
claim's business, like its accuracy).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from core import guard
from core.capabilities import discover, dtype_name
from properties import norms, outcome
from properties.bounds import tolerance
from properties.draws.strategies import CHANNELS_LAST


def rows_that_differ(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Indices of the rows where a and b differ bit for bit (NaN equals NaN)."""
    differ = (a != b) & ~(torch.isnan(a) & torch.isnan(b))
    return differ.reshape(differ.shape[0], -1).any(dim=-1).nonzero().flatten()


def check_changing_one_row(kernel, x: torch.Tensor, changed: torch.Tensor, weight, eps: float, bias=None) -> None:
    """``changed`` differs from x in row 0 only: every other output row is identical."""
    before = norms.forward(kernel, x, weight, bias, eps, allow_nonfinite=True)
    after = norms.forward(kernel, changed, weight, bias, eps, allow_nonfinite=True)
    moved = rows_that_differ(before[1:], after[1:]) + 1
    outcome.exact(moved.numel() == 0, f"changing row 0 changed output rows {moved.tolist()[:8]}",
                  "the statistics mix rows", d=x.shape[-1], dtype=dtype_name(x.dtype))


def check_three_dimensional(kernel, x: torch.Tensor, weight, eps: float, bias=None) -> None:
    """kernel(x[B, S, H]) is kernel(x.reshape(B*S, H)) within twice the forward bound."""
    got = norms.forward(kernel, x, weight, bias, eps, allow_nonfinite=True)
    flat = norms.forward(kernel, x.reshape(-1, x.shape[-1]), weight, bias, eps, allow_nonfinite=True).reshape(x.shape)
    bound = tolerance.forward(kernel, x, weight, bias, eps)
    outcome.conclude(outcome.compare(got, flat, 2 * bound, "[B, S, H] vs [B*S, H] output"),
                     "a 3-D input is not normalized row by row over its last dimension",
                     d=x.shape[-1], dtype=dtype_name(x.dtype))


def check_noncontiguous_x(kernel, x: torch.Tensor, weight, eps: float, bias=None, dy: torch.Tensor | None = None
                          ) -> None:
    """x is a strided view; its output is the contiguous call's within twice the forward bound, and with ``dy`` (a
    kernel with a backward) each gradient is the contiguous call's within twice the backward bound: a backward that
    reads x as if contiguous, or writes dx into ``empty_like(x)`` (x's strides, for a permuted x) as if contiguous,
    fails here."""
    assert not x.is_contiguous(), "the example must be a non-contiguous view"
    got = norms.forward(kernel, x, weight, bias, eps, allow_nonfinite=True)
    bound = tolerance.forward(kernel, x, weight, bias, eps)
    contiguous = norms.forward(kernel, x.contiguous(), weight, bias, eps, allow_nonfinite=True)
    comparisons = [outcome.compare(got, contiguous, 2 * bound, "strided vs contiguous x: output")]
    if dy is not None and discover(kernel).backward:
        laid_out = norms.vjp(kernel, x, weight, bias, eps, dy, allow_nonfinite=True)
        dense = norms.vjp(kernel, x.contiguous(), weight, bias, eps, dy, allow_nonfinite=True)
        bounds = tolerance.backward(kernel, x, weight, eps, dy)
        comparisons += [outcome.compare(g, dense[name], 2 * bounds[name], f"strided vs contiguous x: d{name}")
                        for name, g in laid_out.items()]
    outcome.conclude(comparisons, "the kernel reads x (or writes its gradient) as if it were contiguous (strides "
                     "ignored)", d=x.shape[-1], dtype=dtype_name(x.dtype))


def check_noncontiguous_upstream(kernel, x: torch.Tensor, weight, eps: float, dy: torch.Tensor, bias=None) -> None:
    """dy is a non-contiguous view (:func:`strided`): the gradients are the contiguous dy's within twice the backward
    bound."""
    example = {"x": x, "weight": weight, "bias": bias, "eps": eps}
    _, laid_out, contiguous = gradients_in_both_layouts(kernel, example, {"y": dy})
    conclude_upstream_layouts(kernel, {"y": dy}, laid_out, contiguous, tolerance.backward(kernel, x, weight, eps, dy),
                              d=x.shape[-1], dtype=dtype_name(x.dtype))


def gradients_in_both_layouts(kernel, example: dict, upstream: dict[str, torch.Tensor],
                              contiguous_example: dict | None = None) -> tuple[dict, dict, dict]:
    """(the outputs, the gradients with the upstream gradients as given, with contiguous copies of them) of a kernel
    of any kind (properties.norms.gradients); ``contiguous_example`` for the second call (default ``example``: a kind
    whose call writes buffers passes fresh ones)."""
    assert any(not t.is_contiguous() for t in upstream.values()), "an upstream gradient must be non-contiguous"
    _, laid_out = norms.gradients(kernel, example, upstream, allow_nonfinite=True)
    outputs, contiguous = norms.gradients(kernel, contiguous_example or example,
                                          {name: t.contiguous() for name, t in upstream.items()}, allow_nonfinite=True)
    return outputs, laid_out, contiguous


def conclude_upstream_layouts(kernel, upstream: dict[str, torch.Tensor], laid_out: dict, contiguous: dict,
                              bounds: dict, **point) -> None:
    """Each gradient with the non-contiguous ``upstream`` gradients vs with contiguous ones: within twice its bound
    (two computations of one value, each within one bound of it). The cause named: strides ignored, or, for a kernel
    that declares writing dx into dy (``in_place=("dy",)``) given a dy whose elements share memory, that write."""
    comparisons = [outcome.compare(g, contiguous[name], 2 * bounds[name],
                                   f"d{name}: non-contiguous vs contiguous upstream gradient")
                   for name, g in laid_out.items()]
    cause = "the backward reads the upstream gradient as if it were contiguous (its strides ignored)"
    if "dy" in kernel.in_place and any(_overlapping(t) for t in upstream.values()):
        cause = ("the backward writes dx into the upstream gradient's buffer (declared in_place=('dy',)), whose "
                 "elements share memory (a stride of 0, as autograd passes for loss = y.sum()): the rows' dx "
                 "overwrite each other")
    outcome.conclude(comparisons, cause, **point)


def _overlapping(t: torch.Tensor) -> bool:
    """Whether some of the tensor's elements share memory (a stride of 0 along a dimension of more than one)."""
    return any(stride == 0 and size > 1 for stride, size in zip(t.stride(), t.shape, strict=True))


def fail_on_missing_gradient(kernel, fault: guard.KernelFault, frozen: tuple[str, ...] = (), **point) -> None:
    """A gradient the kernel left out for an input that requires grad (a ``missing`` fault of a kernel that has a
    backward) as a failure of the calling claim, naming the inputs left ``frozen``; any other fault re-raised."""
    if fault.reason != "missing" or not discover(kernel).backward:
        raise fault
    given = f"with {' and '.join(frozen)} not requiring grad: " if frozen else ""
    outcome.exact(False, f"{given}{fault}", "each input that requires grad must get its gradient", **point)


def check_empty_batch_of(kernel, example: dict, upstream: dict[str, torch.Tensor]) -> None:
    """A kernel of a row kind on x (and the residual, the upstream gradients) with no rows: every output (y,
    residual_out) and, with a backward, the gradient of every input of x's shape are of x's shape, dweight and dbias
    exactly 0 (sums over no rows); an error fails (an empty batch is a legal input: a mixture-of-experts layer that
    routes no token to an expert)."""
    x = example["x"]
    point = {"d": x.shape[-1], "dtype": dtype_name(x.dtype)}
    meaning = "an empty batch (no rows) must give empty outputs and zero parameter gradients"
    try:
        outputs = norms.call(kernel, example, any_dtype=True)
        grads = norms.gradients(kernel, example, upstream)[1] if discover(kernel).backward else {}
    except guard.KernelFault as fault:
        if fault.reason != "raised":
            raise
        outcome.exact(False, f"on x of shape {tuple(x.shape)}: {fault}", meaning, **point)
        return
    shaped = {**outputs, **{f"d{name}": g for name, g in grads.items() if name in ("x", "residual")}}
    wrong = [f"{name} has shape {tuple(t.shape)}, not x's {tuple(x.shape)}"
             for name, t in shaped.items() if t.shape != x.shape]
    wrong += [f"d{name} is not 0: {grads[name].flatten()[:4].tolist()}" for name in ("weight", "bias")
              if name in grads and not bool((grads[name] == 0).all())]
    outcome.exact(not wrong, f"on x of shape {tuple(x.shape)}: " + "; ".join(wrong), meaning, **point)


UPSTREAM = "upstream gradient"  # the name of y's upstream gradient among a check's inputs


@dataclass(frozen=True)
class Snapshot:
    """An input as the caller passed it: a copy of its values, and the tensor's dtype, layout and storage."""

    values: torch.Tensor
    dtype: torch.dtype
    layout: tuple
    data_ptr: int

    @classmethod
    def of(cls, t: torch.Tensor) -> Snapshot:
        return cls(t.clone(), t.dtype, (tuple(t.shape), t.stride(), t.storage_offset()), t.data_ptr())

    def change(self, t: torch.Tensor) -> str:
        """How ``t`` (the same tensor object) differs now, in words; '' where it is as it was."""
        if t.dtype != self.dtype:
            return f"its dtype ({dtype_name(self.dtype)} -> {dtype_name(t.dtype)})"
        if (tuple(t.shape), t.stride(), t.storage_offset()) != self.layout or t.data_ptr() != self.data_ptr:
            return "its storage or layout (.data rebound, resize_, set_)"
        return "" if torch.equal(self.values, t) else "its values"


def read_only(kernel, inputs: dict[str, torch.Tensor | None]) -> dict[str, Snapshot]:
    """Snapshots of the inputs a kernel must leave as they are: all given ones but y's upstream gradient (named
    :data:`UPSTREAM`) when it declares ``in_place=("dy",)`` (its backward writes dx there:
    :func:`check_dx_written_into_dy`)."""
    return {name: Snapshot.of(t) for name, t in inputs.items()
            if t is not None and not (name == UPSTREAM and "dy" in kernel.in_place)}


def changed_inputs(before: dict[str, Snapshot], inputs: dict[str, torch.Tensor | None]) -> list[str]:
    """The inputs that differ from their snapshots, each with how: written values, or the caller's tensor given
    another dtype or storage (a kernel casting a parameter through ``.data``, peft's
    prepare_model_for_kbit_training's class, changes what its caller holds though torch.equal sees the same values)."""
    return [f"{name} ({how})" for name, snapshot in before.items() if (how := snapshot.change(inputs[name]))]


def conclude_refused(call: Callable[[], object], returned: str, meaning: str, **point) -> None:
    """An input the contract forbids: ``call()`` must raise (a KernelFault ``raised``); returning anything fails,
    with ``returned`` saying what came back. Any other fault (a timeout, a wrong shape) is re-raised."""
    try:
        call()
    except guard.KernelFault as fault:
        if fault.reason != "raised":
            raise
        outcome.exact(True, "", **point)
        return
    outcome.exact(False, returned, meaning, **point)


def check_dx_written_into_dy(kernel, dy: torch.Tensor, dx: torch.Tensor, x: torch.Tensor) -> None:
    """A kernel that declares ``in_place=("dy",)`` leaves dx in dy after its backward."""
    if "dy" in kernel.in_place:
        outcome.exact(torch.equal(dy, dx), "the upstream gradient does not hold dx after the backward",
                      "the kernel declares in_place=('dy',): its backward writes dx into dy",
                      d=x.shape[-1], dtype=dtype_name(x.dtype))


def check_inputs_unmodified(kernel, x: torch.Tensor, weight, eps: float, dy: torch.Tensor, bias=None,
                            inference: bool = False) -> None:
    """x, weight, bias and dy are the same, bit for bit, after the forward and (when there is one) the backward;
    a kernel that declares ``in_place=("dy",)`` must instead leave dx in dy. ``inference``: the forward alone, under
    torch.inference_mode() (a serving stack's path, which may work in place of its own)."""
    inputs = {"x": x, "weight": weight, "bias": bias, UPSTREAM: dy}
    before = read_only(kernel, inputs)
    norms.forward(kernel, x, weight, bias, eps, allow_nonfinite=True, any_dtype=True, inference=inference)
    written_by_forward = bool(changed_inputs(before, inputs))
    # no backward after a written input (autograd refuses it) or for an inference-mode call
    if discover(kernel).backward and not written_by_forward and not inference:
        grads = norms.vjp(kernel, x, weight, bias, eps, dy, same_tensors=True, allow_nonfinite=True, any_dtype=True)
        check_dx_written_into_dy(kernel, dy, grads["x"], x)
    changed = changed_inputs(before, inputs)
    outcome.exact(not changed, f"the kernel wrote into {', '.join(changed)}", "inputs must be read-only",
                  d=x.shape[-1], dtype=dtype_name(x.dtype))


LAYOUTS = ("every other column", "transposed")  # the views strided() makes of any tensor's values
# and those an upstream gradient also comes in: autograd's dy of (y * v).sum() is v expanded over the rows, of
# y.sum() one value expanded to y's shape (stride 0: a kernel reading dy as contiguous reads past its storage)
UPSTREAM_LAYOUTS = (*LAYOUTS, "broadcast over the first axis", "one value")
# and of x [N, C, *]'s kinds, where a convolution's backward hands dy in channels-last memory
CHANNEL_UPSTREAM_LAYOUTS = (*UPSTREAM_LAYOUTS, "channels last")
# the views of a [B, S, d] tensor whose rows are not all evenly spaced: sequence-first activations seen batch-first
# (row stride 2d inside a batch), and the first S positions of a longer sequence (rows contiguous inside a batch,
# stride d, the batches (S + 1) d apart: a kernel that addresses row r at r * stride(-2) reads the wrong ones)
SEQUENCE_LAYOUTS = ("leading axes swapped", "a slice of a longer sequence")


def strided(t: torch.Tensor, layout: str) -> torch.Tensor:
    """t (at least 2 elements, 2-D or more) as a non-contiguous view (:data:`UPSTREAM_LAYOUTS`): "every other
    column", the last axis every other element of a twice-wide buffer; "transposed", the axes' memory order
    reversed (the transpose of a column-major copy, for [n, d]); "broadcast over the first axis", t's first slice
    expanded along the first axis (stride 0), "one value", t's first element expanded to t's shape (every stride
    0): these two hold t's values only where they equal that slice or element, so they replace them; "channels
    last", a 4-D or 5-D t's channels-last memory format (else "transposed"); "leading axes swapped", a [B, S, ...]
    view of an [S, B, ...] tensor (its rows unevenly spaced); "a slice of a longer sequence", the first S positions
    of a [..., S + 1, d] tensor whose last position is NaN. Where a layout would be contiguous (a first axis of one,
    one channel) the next one that is not is taken."""
    if layout == "a slice of a longer sequence":
        if t.dim() < 3 or math.prod(t.shape[:-2]) < 2:
            return strided(t, "transposed")
        longer = torch.full((*t.shape[:-2], t.shape[-2] + 1, t.shape[-1]), math.nan, dtype=t.dtype, device=t.device)
        longer[..., : t.shape[-2], :] = t
        return longer[..., : t.shape[-2], :]
    if layout == "leading axes swapped":
        view = t.transpose(0, 1).contiguous().transpose(0, 1) if t.dim() >= 3 else t
        return view if not view.is_contiguous() else strided(t, "transposed")
    if layout == "channels last":
        view = t.contiguous(memory_format=CHANNELS_LAST[t.dim()]) if t.dim() in CHANNELS_LAST else t
        return view if not view.is_contiguous() else strided(t, "transposed")
    if layout == "transposed":
        axes = tuple(reversed(range(t.dim())))
        view = t.permute(axes).contiguous().permute(axes)
        return view if not view.is_contiguous() else strided(t, "every other column")
    if layout == "broadcast over the first axis":
        return t[:1].expand_as(t) if t.shape[0] > 1 else strided(t, "one value")
    if layout == "one value":
        return t.reshape(-1)[0].expand(t.shape)
    wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
    wide[..., ::2] = t
    return wide[..., ::2]


# the layouts x [N, C, *] comes in beside contiguous and channels-last memory (each a view whose storage holds NaN
# between its elements): pytorch/pytorch#63224 (BatchNorm of a permuted input), FlagGems#296 (instance_norm addressing
# x as if contiguous)
CHANNEL_INPUT_LAYOUTS = ("channels innermost", "transposed", "a slice of more channels", "every other sample",
                         "every other element")


def channel_input(t: torch.Tensor, layout: str) -> torch.Tensor:
    """t [N, C, *] (2 elements or more) as a view holding its values in a larger storage of NaN
    (:data:`CHANNEL_INPUT_LAYOUTS`): "channels innermost", the memory of [N, *, C] (a sequence model's [N, L, C]
    activation transposed to [N, C, L]; channels-last for 4-D and 5-D t); "transposed", every axis's memory order
    reversed; "a slice of more channels", channels 1 to C of [N, C + 2, *] (a split of a concatenation along C);
    "every other sample", samples 0, 2, ... of [2 N, C, *]; "every other element", the last axis every other
    element. Where a layout would be contiguous (one channel, one sample, a last axis of one) the next one that is
    not is taken; a t whose every layout is (one non-unit axis) gets "a slice of more channels": a storage offset."""
    start = CHANNEL_INPUT_LAYOUTS.index(layout)
    for name in CHANNEL_INPUT_LAYOUTS[start:] + CHANNEL_INPUT_LAYOUTS[:start]:
        view = _channel_view(t, name)
        if not view.is_contiguous():
            return view
    return _channel_view(t, "a slice of more channels")


def _channel_view(t: torch.Tensor, layout: str) -> torch.Tensor:
    nan = float("nan")
    if layout in ("channels innermost", "transposed"):
        order = (0, *range(2, t.dim()), 1) if layout == "channels innermost" else tuple(reversed(range(t.dim())))
        storage = torch.full([t.shape[a] for a in order], nan, dtype=t.dtype, device=t.device)
        view = storage.permute(tuple(order.index(a) for a in range(t.dim())))
    elif layout == "a slice of more channels":
        storage = torch.full((t.shape[0], t.shape[1] + 2, *t.shape[2:]), nan, dtype=t.dtype, device=t.device)
        view = storage[:, 1:1 + t.shape[1]]
    elif layout == "every other sample":
        view = torch.full((2 * t.shape[0], *t.shape[1:]), nan, dtype=t.dtype, device=t.device)[::2]
    else:
        view = torch.full((*t.shape[:-1], 2 * t.shape[-1]), nan, dtype=t.dtype, device=t.device)[..., ::2]
    view.copy_(t)
    return view


def inside_a_larger_buffer(t: torch.Tensor, layout: str = "offset") -> torch.Tensor:
    """The values of t as a view into a larger buffer filled with NaN elsewhere: ``"offset"``, a non-zero storage
    offset with rows 3 elements longer than the width (row stride d + 3, like q of a fused qkv); ``"every other
    element"``, stride 2 in the last dimension as well; ``"odd offset"``, contiguous from the buffer's second element
    (``buf[1:].view(shape)``: a pointer not aligned for 16-byte vector loads, which a kernel checking only
    is_contiguous() faults on with "misaligned address", flashinfer-ai/flashinfer#634). A kernel that reads outside
    the view reads NaN."""
    if layout == "odd offset":
        view = torch.full((t.numel() + 1,), float("nan"), dtype=t.dtype, device=t.device)[1:].view(t.shape)
        view.copy_(t)
        return view
    step = 2 if layout == "every other element" else 1
    d = t.shape[-1]
    buffer = torch.full((*t.shape[:-1], step * d + 3), float("nan"), dtype=t.dtype, device=t.device)
    view = buffer[..., 1:1 + step * d:step]
    view.copy_(t)
    return view


def check_views_into_larger_buffers(kernel, x: torch.Tensor, weight, eps: float, dy: torch.Tensor,
                                    bias=None) -> None:
    """x, weight, bias and dy are views with a storage offset (and larger row strides): the output and the
    gradients are the contiguous call's within twice their bounds."""
    contiguous = {name: t if t is None else t.contiguous() for name, t in (("x", x), ("weight", weight),
                                                                         ("bias", bias), ("dy", dy))}
    got = norms.forward(kernel, x, weight, bias, eps, allow_nonfinite=True, any_dtype=True)
    expected = norms.forward(kernel, contiguous["x"], contiguous["weight"], contiguous["bias"], eps,
                             allow_nonfinite=True, any_dtype=True)
    comparisons = [outcome.compare(got, expected, 2 * tolerance.forward(kernel, x, weight, bias, eps),
                                   "output: views vs contiguous")]
    if discover(kernel).backward:
        grads = norms.vjp(kernel, x, weight, bias, eps, dy, allow_nonfinite=True, any_dtype=True)
        reference = norms.vjp(kernel, contiguous["x"], contiguous["weight"], contiguous["bias"], eps, contiguous["dy"],
                              allow_nonfinite=True, any_dtype=True)
        bounds = tolerance.backward(kernel, x, weight, eps, dy)
        comparisons += [outcome.compare(grads[name], reference[name], 2 * bounds[name], f"d{name}: views vs contiguous")
                        for name in grads]
    outcome.conclude(comparisons, "the kernel ignores a storage offset or a stride of an input (it reads the buffer "
                                  "around the view)", d=x.shape[-1], dtype=dtype_name(x.dtype))


def check_outputs_of_a_call_fresh(kernel, other: torch.Tensor, inference: bool = False, **example) -> None:
    """Any kind: a second call with x replaced by ``other`` leaves every output of the first call as it was (no
    output buffer or workspace reused across calls); ``inference``: both calls under torch.inference_mode(), where a
    serving path may return a static buffer. Each call gets its own copy of a residual (a declared in-place update
    writes it)."""
    def call(x: torch.Tensor) -> dict[str, torch.Tensor]:
        fresh = {name: example[name].clone() for name in ("residual",) if example.get(name) is not None}
        return norms.call(kernel, {**example, **fresh, "x": x}, allow_nonfinite=True, any_dtype=True,
                          inference=inference)

    first = call(example["x"])
    kept = {name: (value, value.clone()) for name, value in first.items()}
    call(other)
    changed = [name for name, (value, copy) in kept.items() if not torch.equal(value.nan_to_num(), copy.nan_to_num())]
    mode = "under inference_mode" if inference else "with grad mode on"
    outcome.exact(not changed, f"a second call {mode} changed the first call's {', '.join(changed)}",
                  "outputs must be fresh tensors (a reused output buffer or workspace is overwritten by the next call)",
                  d=example["x"].shape[-1], dtype=dtype_name(example["x"].dtype))


def check_outputs_fresh(kernel, x: torch.Tensor, other: torch.Tensor, weight, eps: float, dy: torch.Tensor,
                        bias=None) -> None:
    """A second call on ``other`` leaves the output (and gradients) of the first call on x as they were: no output
    buffer is reused across calls, none is a view of an input."""
    first = norms.forward(kernel, x, weight, bias, eps, allow_nonfinite=True)
    kept = {"output": (first, first.clone())}
    backward = discover(kernel).backward
    if backward:
        grads = norms.vjp(kernel, x, weight, bias, eps, dy, allow_nonfinite=True)
        kept.update({f"d{name}": (g, g.clone()) for name, g in grads.items()})
    norms.forward(kernel, other, weight, bias, eps, allow_nonfinite=True)
    if backward:
        norms.vjp(kernel, other, weight, bias, eps, dy, allow_nonfinite=True)
    changed = [name for name, (value, copy) in kept.items() if not torch.equal(value.nan_to_num(), copy.nan_to_num())]
    outcome.exact(not changed, f"a second call changed the first call's {', '.join(changed)}",
                  "outputs must be fresh tensors (a reused output buffer or workspace is overwritten by the next call)",
                  d=x.shape[-1], dtype=dtype_name(x.dtype))
