"""Kernels of every norm kind behind one interface, and their float64 references.

A kind is a prologue, then the plain norm at the prologue's output h (core.kinds): h = x (LayerNorm, RMSNorm,
GroupNorm over its grouped view), h = x + residual or residual + dropout(x) (the fused kinds, which return
residual_out = h beside y). Each claim family is written once for all of them: :func:`call` and :func:`gradients`
call the kernel (always through :mod:`core.guard`; a malformed return is a ``KernelFault``), :func:`reference`
and :func:`reference_vjp` give the float64 oracle of :mod:`proofs.oracles` (:mod:`proofs.fused_oracles` for the
grouped view) at the kernel's h, on the same rounded inputs. Examples are dicts keyed by the roles of the kind's
signature (core.kinds.ROLES). The effective scale is ``kernel.weight_offset + weight`` (docs/ARCHITECTURE.md,
weight conventions); RMSNorm has no bias.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pytest
import torch

from core import boundary, guard
from core.capabilities import custom_backward, discover, refused_width
from core.errors import one_line
from core.registry import Kernel
from proofs import batchnorm_oracles, fused_oracles, oracles


def output_dtype(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None) -> torch.dtype:
    """The dtype the kernel's output must have (core.kernel.OUTPUT_DTYPE_RULES): x's (torch's rule, the default),
    torch.promote_types(x, weight) (``output_dtype="promoted"``) or the weight's (``"weight"``); x's without a
    weight."""
    if weight is None or kernel.output_dtype == "input":
        return x.dtype
    return torch.promote_types(x.dtype, weight.dtype) if kernel.output_dtype == "promoted" else weight.dtype


def residual_dtype(kernel: Kernel, residual: torch.Tensor | None, x: torch.Tensor) -> torch.dtype:
    """The dtype residual_out must have: float32 when declared (``residual_dtype="float32"``), else the residual's
    (x's without one: a first layer's call, residual_out = x)."""
    if kernel.residual_dtype == "float32":
        return torch.float32
    return x.dtype if residual is None else residual.dtype


def call(kernel: Kernel, example: Mapping, allow_nonfinite: bool = False, any_dtype: bool = False,
         recording: bool = False, inference: bool = False) -> dict[str, torch.Tensor]:
    """The kernel's outputs for ``example`` (keyed by role), by name: {"y"} or {"y", "residual_out"} (the kind's
    ``outputs``; the quantized-output kinds' {"q", "scale"(, "residual_out")}, q in the example's ``quant_dtype``).
    y is judged as every norm's output (core.guard: shape and device of x, finite for finite inputs,
    the dtype of :func:`output_dtype` unless ``any_dtype``: for checks about something else, which compare the
    kernel with itself); residual_out's dtype and values are the claims' business. Any other return is a
    ``KernelFault``. ``recording``: called as in a training step, on copies of the kind's differentiable inputs that
    require grad (but a parameter declared ``no_gradient``), grad mode on; the outputs detached. ``inference``: called
    as a serving stack calls it, under ``torch.inference_mode()`` (grad mode off: a kernel's inference-only path).
    Neither: grad mode on, no input requiring grad (an evaluation without ``no_grad``)."""
    if inference:
        with torch.inference_mode():
            return call(kernel, example, allow_nonfinite, any_dtype)
    if recording:
        leaves = _leaves(kernel, example)
        with torch.enable_grad():
            got = call(kernel, {**example, **leaves}, allow_nonfinite, any_dtype)
        return {name: t.detach() for name, t in got.items()}
    x = example["x"]
    names = kernel.record.outputs
    dtype = guard.ANY_DTYPE if any_dtype else output_dtype(kernel, x, example.get("weight"))
    if kernel.record.quantized and not any_dtype:  # q is in the requested format
        dtype = example["quant_dtype"]
    returns = names if len(names) > 1 else ("output",)  # one output: guard's messages name it "the output"
    got = guard.call(kernel, *kernel.record.arguments(example), like=x, allow_nonfinite=allow_nonfinite, dtype=dtype,
                     returns=returns)
    return dict(zip(names, got if len(names) > 1 else (got,), strict=True))


def forward(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
            eps: float = 1e-5, allow_nonfinite: bool = False, any_dtype: bool = False,
            recording: bool = False, inference: bool = False) -> torch.Tensor:
    """A plain norm kernel's output y for x (:func:`call`; ``recording``: as in a training step; ``inference``:
    under ``torch.inference_mode()``)."""
    example = {"x": x, "weight": weight, "bias": bias, "eps": eps}
    return call(kernel, example, allow_nonfinite, any_dtype, recording, inference)["y"]


def _leaves(kernel: Kernel, example: Mapping, frozen: tuple[str, ...] = (), same_tensors: bool = False
            ) -> dict[str, torch.Tensor]:
    """The kind's differentiable inputs present in ``example`` as autograd leaves: copies in their layouts
    (:func:`copy_in_its_layout`; the tensors themselves with ``same_tensors``), each requiring grad unless ``frozen``
    or declared ``no_gradient``."""
    leaves = {name: (example[name] if same_tensors else copy_in_its_layout(example[name]))
              for name in kernel.record.differentiable if example.get(name) is not None}
    for name, leaf in leaves.items():
        leaf.requires_grad_(name not in kernel.no_gradient and name not in frozen)
    return leaves


def record(kernel: Kernel, example: Mapping, *, frozen: tuple[str, ...] = (), same_tensors: bool = False,
           allow_nonfinite: bool = False, any_dtype: bool = False
           ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(the autograd leaves, the kernel's outputs) of one forward call recorded with grad mode on: the leaves are the
    kind's differentiable inputs present in the example (copies unless ``same_tensors``), each requiring grad unless
    ``frozen`` or declared ``no_gradient``; the outputs as :func:`call` gives them, graph attached."""
    leaves = _leaves(kernel, example, frozen, same_tensors)
    return leaves, _call_on(kernel, example, leaves, allow_nonfinite, any_dtype)


def _call_on(kernel: Kernel, example: Mapping, leaves: Mapping[str, torch.Tensor], allow_nonfinite: bool,
             any_dtype: bool) -> dict[str, torch.Tensor]:
    """The kernel's outputs for the example with ``leaves`` in place of its inputs, recorded with grad mode on."""
    with torch.enable_grad():
        return call(kernel, {**example, **leaves}, allow_nonfinite, any_dtype)


def backward(kernel: Kernel, leaves: Mapping[str, torch.Tensor], outputs: Mapping[str, torch.Tensor],
             upstream: Mapping[str, torch.Tensor], *, same_tensors: bool = False, allow_nonfinite: bool = False,
             retain_graph: bool = False) -> dict[str, torch.Tensor]:
    """{input: gradient} of the recorded call (:func:`record`) for the upstream gradients ``upstream`` of its
    outputs, for the leaves that require grad; ``retain_graph``: the graph kept for another backward. The upstream
    gradients are copies with their strides unless ``same_tensors``: a kernel that writes its dX into dy (Liger's
    in_place=True) must not change the dy the caller's reference is computed from; inputs_unmodified is the claim
    about that."""
    differentiated = {name: leaf for name, leaf in leaves.items() if leaf.requires_grad}
    given = {name: upstream[name] if same_tensors else copy_with_strides(upstream[name]) for name in outputs}
    flowing = [name for name in outputs if name == "y" or outputs[name].requires_grad]
    with torch.enable_grad():
        grads = guard.grad(kernel, [outputs[name] for name in flowing], list(differentiated.values()),
                           [_in_dtype(given[name], outputs[name]) for name in flowing],
                           allow_nonfinite=allow_nonfinite, retain_graph=retain_graph)
    return dict(zip(differentiated, grads, strict=True))


def gradients(kernel: Kernel, example: Mapping, upstream: Mapping[str, torch.Tensor], *, same_tensors: bool = False,
              allow_nonfinite: bool = False, any_dtype: bool = False, frozen: tuple[str, ...] = ()
              ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(the outputs, detached; {input: gradient}) of the kernel's backward for the upstream gradients ``upstream``
    of its outputs ({"y": dy} and, for the fused kinds, {"residual_out": dh}: L = <y, dy> + <residual_out, dh>):
    :func:`record`, then :func:`backward`.

    The gradients are taken for the kind's differentiable inputs present in the example (core.kinds.DIFFERENTIABLE),
    but for the parameters the kernel declares no gradient for (``kernel.no_gradient``, a frozen weight) and the
    inputs named in ``frozen`` (that do not require grad in this call): those are passed but not differentiated, and
    absent from the result. They are taken with respect to copies of the inputs,
    and the upstream gradients are copies with their strides, unless ``same_tensors``: then the given tensors
    themselves are the autograd leaves and upstream gradients (so that a kernel writing into them writes into the
    caller's tensors), and are given back without requires_grad. ``allow_nonfinite``: NaN/inf values and gradients
    are not a fault (for checks about something else); ``any_dtype``: nor is y's dtype."""
    leaves = _leaves(kernel, example, frozen, same_tensors)
    try:  # the leaves made first: with same_tensors they are the caller's tensors, given back without requires_grad
        outputs = _call_on(kernel, example, leaves, allow_nonfinite, any_dtype)
        grads = backward(kernel, leaves, outputs, upstream, same_tensors=same_tensors,
                         allow_nonfinite=allow_nonfinite)
    finally:
        if same_tensors:
            for leaf in leaves.values():
                leaf.requires_grad_(False)
    return {name: t.detach() for name, t in outputs.items()}, grads


def _in_dtype(gradient: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    """An upstream gradient in its output's dtype (autograd's rule): as given when it is (its strides kept)."""
    return gradient if gradient.dtype == output.dtype else gradient.to(output.dtype)


def vjp(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
        dy: torch.Tensor, *, same_tensors: bool = False, allow_nonfinite: bool = False,
        any_dtype: bool = False, frozen: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    """A plain norm kernel's gradients {"x": dx, "weight": dweight, "bias": dbias} (present, differentiated ones:
    not those ``frozen``) for upstream gradient dy (:func:`gradients`)."""
    example = {"x": x, "weight": weight, "bias": bias, "eps": eps}
    return gradients(kernel, example, {"y": dy}, same_tensors=same_tensors, allow_nonfinite=allow_nonfinite,
                     any_dtype=any_dtype, frozen=frozen)[1]


def copy_in_its_layout(t: torch.Tensor) -> torch.Tensor:
    """A detached copy of t that a kernel reads as it reads t: a view (every other column of a wider buffer, a
    storage offset, a transpose, a slice of a longer sequence) is the same view of a copy of its base, so that the
    backward of a call on it gets x with t's strides and offset (``clone()`` makes a gapped view contiguous, and a
    kernel that ignores strides or the offset would be checked on a contiguous x). A view with overlapping elements
    (a stride 0) is cloned: it cannot be a leaf whose elements are separate inputs."""
    base = t._base
    overlapping = any(step == 0 and size > 1 for size, step in zip(t.shape, t.stride(), strict=True))
    if base is None or overlapping:
        return t.detach().clone()
    return base.detach().clone().as_strided(t.size(), t.stride(), t.storage_offset())


def copy_with_strides(t: torch.Tensor) -> torch.Tensor:
    """A copy of t with t's strides (``clone()`` makes a gapped view, such as every other column, contiguous)."""
    return strided_copy(t, t.stride())


def strided_copy(values: torch.Tensor, stride: tuple[int, ...] | list[int]) -> torch.Tensor:
    """A fresh tensor of ``values``' shape with ``stride``, holding ``values``. Strides may overlap: an axis of
    stride 0 (an expanded tensor, as autograd's upstream gradient of ``y.sum()``) holds one slice, ``values``' first
    along that axis (the others equal to it in a tensor that had that layout)."""
    shape = values.shape
    span = 1 + sum((size - 1) * step for size, step in zip(shape, stride, strict=True)) if values.numel() else 0
    storage = values.new_zeros(span)
    one_slice = tuple(slice(0, 1) if step == 0 else slice(None) for step in stride)
    torch.as_strided(storage, values[one_slice].shape, stride).copy_(values[one_slice])
    return torch.as_strided(storage, shape, stride)


def representable(values: np.ndarray, dtype: torch.dtype) -> bool:
    """Whether every exact value fits the storage dtype, |v| <= its largest finite number.

    Where one does not (a zero row with eps = 1e-12 has Jacobian entries ~ 1/sqrt(eps) = 1e6, beyond
    float16's 65504), inf is the correctly rounded result, and no claim about those values can be checked
    in that dtype: the strategies leave such examples out rather than call the kernel wrong.
    """
    return bool(np.all(np.abs(values) <= torch.finfo(dtype).max))


_width_refusals: dict[tuple[str, int], str] = {}  # (kernel name, d) -> the refusal's text, '' when it takes d


def require_width(kernel: Kernel, example: Mapping) -> None:
    """Skip the calling test, with the kernel's own error, when the kernel refuses the width of the example's rows
    with a clear error naming a limit (core.capabilities.refused_width: rows too wide for its one block); any other
    fault is left to the test's check (an error or a failure). Probed once per kernel and width, on the example."""
    key = (kernel.name, int(example["x"].shape[-1]))
    if key not in _width_refusals:
        try:
            call(kernel, example, allow_nonfinite=True, any_dtype=True)
            _width_refusals[key] = ""
        except guard.KernelFault as fault:
            _width_refusals[key] = one_line(fault.__cause__) if refused_width(fault) else ""
    if _width_refusals[key]:
        pytest.skip(f"{kernel.name} refuses rows of {key[1]} columns: {_width_refusals[key]}")


_float64_refusals: dict[str, str] = {}  # kernel name -> its error for float64 x, '' when it takes float64


def require_float64(kernel: Kernel, example: Mapping) -> None:
    """Skip the calling test, with the kernel's own error, when it refuses float64 x (an error; Triton kernels summing
    in float32 refuse it), or with its declaration when it declares dtypes without float64: probed once per kernel,
    on the example. A kernel that takes float64 and returns another dtype, NaN or garbage is left to the test's
    check."""
    if kernel.dtypes is not None and torch.float64 not in kernel.dtypes:
        declared = ", ".join(str(dtype).removeprefix("torch.") for dtype in kernel.dtypes)
        pytest.skip(f"{kernel.name} declares its dtypes ({declared}), not float64")
    if kernel.name not in _float64_refusals:
        try:
            call(kernel, example, allow_nonfinite=True, any_dtype=True)
            _float64_refusals[kernel.name] = ""
        except guard.KernelFault as fault:
            _float64_refusals[kernel.name] = one_line(fault.__cause__ or fault) if fault.reason == "raised" else ""
    if _float64_refusals[kernel.name]:
        pytest.skip(f"{kernel.name} refuses float64 x: {_float64_refusals[kernel.name]}")


def require_backward(kernel: Kernel) -> None:
    """Skip the calling test, with the probed reason, when autograd gives no gradient through the kernel."""
    caps = discover(kernel)
    if not caps.backward:
        pytest.skip(caps.backward_reason)


def require_double_backward(kernel: Kernel) -> None:
    """Skip the calling test, with the probed reason, unless the kernel's gradient is itself differentiable
    (core.capabilities: ``double_backward``; a backward that autograd cannot differentiate, a forward-only kernel)
    and, for a kernel whose backward is a custom autograd.Function, declared so (``Kernel.second_derivatives``)."""
    require_backward(kernel)
    caps = discover(kernel)
    if not caps.double_backward:
        pytest.skip(caps.double_backward_reason)
    if custom_backward(kernel) and not kernel.second_derivatives:
        pytest.skip(f"{kernel.name}'s backward is a custom autograd.Function, which autograd differentiates as "
                    "written, with what its forward saved held constant: second derivatives are checked where it "
                    "declares them (Kernel(second_derivatives=True), core.kernel)")


# The second-order target of each output's upstream gradient: dS/d dy, and for the fused kinds dS/d dh
UPSTREAM_TARGETS = {"y": "dy", "residual_out": "dh"}


def second_order(kernel: Kernel, example: Mapping, dy: torch.Tensor | Mapping[str, torch.Tensor],
                 upstream: Mapping[str, torch.Tensor | None]) -> dict[str, torch.Tensor]:
    """The gradient of the kernel's gradient: {"dy": dS/d dy (and "dh": dS/d dh for the fused kinds), "x": dS/dx,
    "residual": dS/dresidual (fused kinds), "weight": dS/dweight (when the kernel differentiates its weight)} of
    S = sum over the first-order gradients g_name the kernel returns for upstream gradient ``dy`` (y's; or a mapping
    {"y": dy, "residual_out": dh}) of <g_name, upstream[name]> (upstream keyed "x", "residual", "weight", "bias";
    None or absent: left out of S), through autograd with ``create_graph=True``, under the kernel's time limit
    (core.guard.limited). A second derivative autograd finds no path to (the backward's graph does not reach that
    input: statistics saved detached) is zeros, a value the claim compares; NaN/inf for finite inputs is a
    ``nonfinite`` fault."""
    output_grads = dy if isinstance(dy, Mapping) else {"y": dy}
    leaves, outputs = record(kernel, example)
    differentiated = {name: leaf for name, leaf in leaves.items() if leaf.requires_grad}
    upstream_leaves = {name: _in_dtype(copy_with_strides(g), outputs[name]).requires_grad_(True)
                       for name, g in output_grads.items()}
    targets = {**{UPSTREAM_TARGETS[name]: leaf for name, leaf in upstream_leaves.items()},
               **{name: differentiated[name] for name in ("x", "residual", "weight") if name in differentiated}}

    def work() -> tuple:
        with torch.enable_grad():
            first = torch.autograd.grad([outputs[name] for name in upstream_leaves], list(differentiated.values()),
                                        list(upstream_leaves.values()), create_graph=True, allow_unused=True)
            terms = [(g * upstream[name].to(g.dtype)).sum() for name, g in zip(differentiated, first, strict=True)
                     if g is not None and g.requires_grad and upstream.get(name) is not None]
            if not terms:
                return (None,) * len(targets)
            return torch.autograd.grad(sum(terms), list(targets.values()), allow_unused=True)

    second = guard.limited(kernel, work)
    got = {name: torch.zeros_like(target) if g is None else g.detach()
           for (name, target), g in zip(targets.items(), second, strict=True)}
    finite = [t for t in (*example.values(), *output_grads.values(), *upstream.values()) if isinstance(t, torch.Tensor)]
    if all(bool(torch.isfinite(t).all()) for t in finite):
        for name, g in got.items():
            if not bool(torch.isfinite(g).all()):
                raise guard.KernelFault(kernel.name, "nonfinite",
                                        f"returned NaN/inf in the second derivative dS/d{name} for finite inputs")
    return got


# The inputs left frozen (not requiring grad) by the tests of gradients with only some inputs requiring grad: the
# parameters (frozen norm weights, as in LoRA fine-tuning), x (a norm over frozen embeddings), or one parameter (a
# backward reading ctx.needs_input_grad at the wrong index drops one, or returns the gradients packed by which are
# needed: DIOPI#1322)
FROZEN_SUBSETS = (("weight", "bias"), ("x",), ("x", "bias"), ("weight",), ("bias",))


def skip_unless_a_strict_subset(kernel: Kernel, frozen: tuple[str, ...], inputs: tuple[str, ...]) -> None:
    """Skip the calling test, with the reason, unless the kernel takes every input of ``frozen`` (of ``inputs``, those
    its kind has) and at least one other that it differentiates (not declared ``no_gradient``)."""
    taken = [name for name in inputs if name in kernel.record.differentiable]
    missing = [name for name in frozen if name not in taken]
    if missing:
        pytest.skip(f"{kernel.name}: its kind has no {' or '.join(missing)}")
    if not [name for name in taken if name not in frozen and name not in kernel.no_gradient]:
        pytest.skip(f"{kernel.name}: with {' and '.join(frozen)} frozen no input takes a gradient (no_gradient "
                    f"{', '.join(kernel.no_gradient)})")


# a kernel-side tensor as float64 numpy on the host: the one crossing to the oracle (core.boundary)
as_float64 = boundary.to_oracle


def effective_weight(kernel: Kernel, weight: torch.Tensor | None) -> np.ndarray | None:
    """gamma = weight_offset + weight in float64 (None: no scaling, gamma = 1)."""
    return None if weight is None else kernel.weight_offset + as_float64(weight)


def grouped(kernel: Kernel, values: np.ndarray, num_groups: int | None) -> np.ndarray:
    """A float64 array of x's shape as the norm's rows (the kind's scope, core.kinds.SCOPES): itself; of x [N, C, *]
    for LayerNorm over (C, *) [N, 1, C S], for GroupNorm [N, G, (C/G) S], for InstanceNorm [N, C, S]; for BatchNorm
    the channel-major [1, C, N S] (each channel's elements over the batch, GroupNorm's view of x.transpose(0, 1) with
    G = C). :func:`ungrouped` maps it back."""
    record = kernel.record
    if record.batch_statistics:
        return np.moveaxis(values, 1, 0).reshape(1, values.shape[1], -1)
    if record.scope != "row":
        return values.reshape(values.shape[0], group_count(kernel, values.shape, num_groups), -1)
    return values


def ungrouped(kernel: Kernel, rows: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Values of the rows of :func:`grouped` at x's elements, shape ``shape`` (x's)."""
    if kernel.record.batch_statistics:
        return np.moveaxis(rows.reshape(shape[1], shape[0], *shape[2:]), 0, 1)
    return rows.reshape(shape)


def group_count(kernel: Kernel, shape: tuple[int, ...], num_groups: int | None) -> int | None:
    """The number of groups of :func:`grouped`'s view: ``num_groups`` for GroupNorm, C for InstanceNorm and BatchNorm
    (one per channel), 1 for LayerNorm over (C, *), None for the kinds over the last axis."""
    record = kernel.record
    if record.scope == "sample":
        return 1
    return num_groups if record.grouped or not record.per_channel else shape[1]


def per_element(kernel: Kernel, parameter: np.ndarray | None, shape: tuple[int, ...], num_groups: int | None
                ) -> np.ndarray | None:
    """A parameter [d] as the norm applies it to the rows of :func:`grouped`: itself, or for a per-channel kind its
    values spread over each group's elements, [G, (C/G) S] (GroupNorm; InstanceNorm with G = C) or [C, N S]
    (BatchNorm) (proofs.fused_oracles.per_element)."""
    record = kernel.record
    if parameter is None or record.scope == "row":
        return parameter
    if record.scope == "sample":  # per element of the sample: [1, C S]
        return np.asarray(parameter, dtype=np.float64).reshape(1, -1)
    if record.batch_statistics:
        return fused_oracles.per_element(parameter, (1, shape[1], math.prod(shape) // shape[1]), shape[1])
    return fused_oracles.per_element(parameter, shape, group_count(kernel, shape, num_groups))


def gammas(kernel: Kernel, weight: torch.Tensor | None, bias: torch.Tensor | None
           ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(gamma, beta) in float64: the effective weight, and the bias (None for RMSNorm)."""
    return effective_weight(kernel, weight), as_float64(bias) if kernel.record.has_bias else None


def reference(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
              eps: float, num_groups: int | None = None) -> np.ndarray:
    """The float64 oracle output N(x) on the kernel's (rounded) inputs; x is the norm's input h (a fused kernel's
    residual_out), over the grouped view for a grouped kind (``num_groups``), over each channel's batch for BatchNorm
    (training mode: the batch statistics)."""
    gamma, beta = gammas(kernel, weight, bias)
    if kernel.record.batch_statistics:
        return batchnorm_oracles.batchnorm(as_float64(x), gamma, beta, eps)
    if kernel.record.scope == "sample":
        return batchnorm_oracles.channel_layernorm(as_float64(x), gamma, beta, eps, x.dim() - 1)
    if kernel.record.per_channel:
        return fused_oracles.groupnorm(as_float64(x), group_count(kernel, x.shape, num_groups), gamma, beta, eps)
    if kernel.record.norm == "rms":
        return oracles.rmsnorm(as_float64(x), gamma, eps)
    return oracles.layernorm(as_float64(x), gamma, beta, eps)


def reference_vjp(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None, eps: float,
                  dy: torch.Tensor, num_groups: int | None = None, dh: torch.Tensor | None = None
                  ) -> dict[str, np.ndarray]:
    """The float64 oracle gradients {"x", "weight", "bias"} at the norm's input x (weight/bias summed over rows, per
    channel for a grouped kind; no weight without one); for the fused kinds, at residual_out x with dh the upstream
    gradient of residual_out, also "residual": dL/dx = dL/dresidual = J_N(h)^T dy + dh (claim add_ln.jacobian; the
    dropout + add kind's dL/dx is that times m/(1-p), which its check applies)."""
    gamma = effective_weight(kernel, weight)
    x64, dy64 = as_float64(x), as_float64(dy)
    if kernel.record.batch_statistics:
        found = batchnorm_oracles.batchnorm_vjp(x64, gamma, eps, dy64)
    elif kernel.record.scope == "sample":  # LayerNorm of the flattened samples, parameter gradients in their shape
        rows = oracles.layernorm_vjp(x64.reshape(len(x64), -1), None if gamma is None else gamma.reshape(-1), eps,
                                     dy64.reshape(len(x64), -1))
        found = [g if g is None else g.reshape(x64.shape if i == 0 else x64.shape[1:]) for i, g in enumerate(rows)]
    elif kernel.record.per_channel:
        found = fused_oracles.groupnorm_vjp(x64, group_count(kernel, x.shape, num_groups), gamma, eps, dy64)
    else:
        vjp_of = oracles.rmsnorm_vjp if kernel.record.norm == "rms" else oracles.layernorm_vjp
        found = vjp_of(x64, gamma, eps, dy64)
    grads = dict(zip(("x", "weight", "bias"), found, strict=False))
    if kernel.record.has_residual:
        grads["x"] = grads["x"] + (0.0 if dh is None else as_float64(dh))
        grads["residual"] = grads["x"]
    return {name: g for name, g in grads.items() if g is not None}


def reference_jacobian(kernel: Kernel, x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> np.ndarray:
    """dy/dx per row, [..., d, d], in float64 (plain kinds)."""
    gamma = effective_weight(kernel, weight)
    jacobian = oracles.rmsnorm_jacobian if kernel.record.norm == "rms" else oracles.layernorm_jacobian
    return jacobian(as_float64(x), gamma, eps)


def reference_spectral_norm(kernel: Kernel, x: torch.Tensor, eps: float) -> np.ndarray:
    """The derived ||dy/dx||_2 per row for gamma = 1."""
    norm = oracles.rmsnorm_spectral_norm if kernel.record.norm == "rms" else oracles.layernorm_spectral_norm
    return np.asarray(norm(as_float64(x), eps))


def parameter_sums(kernel: Kernel, values: np.ndarray) -> np.ndarray:
    """Per-element values of x's shape summed as a parameter's gradient sums them: over each channel's elements for
    the per-channel kinds ([C]), over the samples for LayerNorm over (C, *) ([C, *])."""
    if kernel.record.scope == "sample":
        return values.sum(axis=0)
    return np.moveaxis(values, 1, 0).reshape(values.shape[1], -1).sum(-1)
