"""Checks of GroupNorm kernels, kind groupnorm: fn(x, num_groups, weight, bias, eps) over x [N, C, *].

GroupNorm is LayerNorm over each group's (C/G) x spatial elements with per-channel weight and bias (claim
gn.jacobian): its kind record (core.kinds) is grouped, so properties.norms and properties.bounds.tolerance give its
reference and bounds on the grouped view [N, G, (C/G) S] with the per-element weight:

- gn.forward: y vs the grouped LayerNorm within the forward bound of the grouped view;
- gn.jacobian: dx within the backward bound of each group, dweight and dbias per channel
  (properties.bounds.tolerance.backward);
- gn.layout_invariance: a channels-last x (4-D, or channels-last-3d 5-D) gives the contiguous call's y within twice
  the forward bound, and given dy its dx, dweight, dbias within twice the backward bound
  (properties.checks.channel_layouts);
- gn.independence: replacing sample 0 leaves every other sample of y bit for bit; replacing the channels of group 0
  of the last sample leaves the other samples and that sample's other groups bit for bit (same shapes, same
  computation: as the norms' row independence);
- gn.inputs_unmodified: x, weight, bias, dy unchanged;
- gn.degenerate: one-element groups (InstanceNorm at spatial size 1) give beta: the forward check there.

Layout, independence and inputs_unmodified draw weight and bias in x's dtype or another the kernel takes and do
not judge y's dtype (the forward claim's business, like its accuracy).
"""

from __future__ import annotations

import torch

from core import guard
from core.capabilities import discover, dtype_name
from properties import norms, outcome
from properties.bounds import tolerance
from properties.checks.channel_layouts import input_layout_gradients, layout_of
from properties.checks.contracts import (
    UPSTREAM,
    changed_inputs,
    check_dx_written_into_dy,
    conclude_refused,
    conclude_upstream_layouts,
    fail_on_missing_gradient,
    gradients_in_both_layouts,
    read_only,
    rows_that_differ,
)
from properties.checks.forward import output_dtype_rule, updated_in_place
from properties.checks.graph import check_recorded_graph


def example_of(x: torch.Tensor, num_groups: int, weight, bias, eps: float) -> dict:
    """GroupNorm's arguments keyed by role (core.kinds)."""
    return {"x": x, "num_groups": num_groups, "weight": weight, "bias": bias, "eps": eps}


def _call(kernel, x, num_groups, weight, bias, eps, allow_nonfinite=False, any_dtype=False,
          recording=False, inference=False) -> torch.Tensor:
    """y (properties.norms.call), its dtype judged by the output-dtype rule unless ``any_dtype`` (checks about
    something else: layout, independence, inputs, which compare the kernel with itself); ``recording``: as in a
    training step; ``inference``: under torch.inference_mode()."""
    return norms.call(kernel, example_of(x, num_groups, weight, bias, eps), allow_nonfinite, any_dtype,
                      recording, inference)["y"]


def check_forward(kernel, x: torch.Tensor, num_groups: int, weight, eps: float, bias=None,
                  recording: bool = False, inference: bool = False) -> None:
    """|y - GroupNorm(x)| <= the forward bound of LN on each group, elementwise; ``recording``: the kernel called as in
    a training step, ``inference``: under torch.inference_mode() (properties.norms.call)."""
    y = _call(kernel, x, num_groups, weight, bias, eps, recording=recording, inference=inference)
    expected = norms.reference(kernel, x, weight, bias, eps, num_groups)
    bound = tolerance.forward(kernel, x, weight, bias, eps, num_groups=num_groups)
    outcome.conclude(outcome.compare(y, expected, bound, "y"),
                     "the output is not LayerNorm over each group's channels x spatial elements",
                     d=int(x[0].numel() // num_groups), dtype=dtype_name(x.dtype))


check_forward_with_parameter_dtypes = output_dtype_rule(check_forward, "check_forward_with_parameter_dtypes")


def check_vjp(kernel, x: torch.Tensor, num_groups: int, weight, eps: float, dy: torch.Tensor, bias=None,
              frozen: tuple[str, ...] = ()) -> None:
    """dx, dweight, dbias vs the derived GroupNorm VJP (LN VJP per group, per-channel parameter sums); ``frozen``:
    inputs that do not require grad (the others must each get their gradient)."""
    point = {"d": int(x[0].numel() // num_groups), "dtype": dtype_name(x.dtype)}
    try:
        _, grads = norms.gradients(kernel, example_of(x, num_groups, weight, bias, eps), {"y": dy}, frozen=frozen)
    except guard.KernelFault as fault:
        fail_on_missing_gradient(kernel, fault, frozen, **point)
        return
    expected = norms.reference_vjp(kernel, x, weight, eps, dy, num_groups)
    bounds = tolerance.backward(kernel, x, weight, eps, dy, bias=bias, num_groups=num_groups)
    comparisons = [outcome.compare(g, expected[name], bounds[name], f"d{name}") for name, g in grads.items()]
    outcome.conclude(comparisons, "the backward is not the derivative of GroupNorm", **point)


def check_noncontiguous_upstream(kernel, x: torch.Tensor, num_groups: int, weight, eps: float, dy: torch.Tensor,
                                bias=None) -> None:
    """dy a non-contiguous view (properties.checks.contracts.strided): dx, dweight, dbias are the contiguous dy's
    within twice the backward bound."""
    _, laid_out, contiguous = gradients_in_both_layouts(kernel, example_of(x, num_groups, weight, bias, eps),
                                                        {"y": dy})
    bounds = tolerance.backward(kernel, x, weight, eps, dy, bias=bias, num_groups=num_groups)
    conclude_upstream_layouts(kernel, {"y": dy}, laid_out, contiguous, bounds, d=int(x[0].numel() // num_groups),
                              dtype=dtype_name(x.dtype))


def check_forward_after_an_in_place_update(kernel, x: torch.Tensor, num_groups: int, weight, eps: float,
                                           new_weight: torch.Tensor, bias=None, new_bias=None) -> None:
    """A second call after weight and bias were overwritten in place (properties.checks.forward.updated_in_place)
    gives GroupNorm at the new values (:func:`check_forward`)."""
    updated = updated_in_place(kernel, example_of(x, num_groups, weight, bias, eps),
                               {"weight": new_weight, "bias": new_bias})
    check_forward(kernel, x, num_groups, updated["weight"], eps, updated["bias"])


def check_backward_of_the_recorded_graph(kernel, x: torch.Tensor, num_groups: int, weight, eps: float,
                                        dy: torch.Tensor, bias=None) -> None:
    """Inputs and y written in place after the forward, and a second backward of one graph
    (properties.checks.graph)."""
    example = example_of(x, num_groups, weight, bias, eps)
    check_recorded_graph(kernel, lambda: example, {"y": dy},
                         tolerance.backward(kernel, x, weight, eps, dy, bias=bias, num_groups=num_groups),
                         d=int(x[0].numel() // num_groups), dtype=dtype_name(x.dtype))


def check_input_layout(kernel, x: torch.Tensor, num_groups: int, weight, eps: float, bias=None,
                       dy: torch.Tensor | None = None) -> None:
    """x in a layout other than contiguous (channels-last, transposed, a slice of a larger tensor:
    contracts.channel_input) gives the contiguous call's y within twice the forward bound; with ``dy``, the backward
    of each (dy contiguous) its dx, dweight, dbias within twice the backward bound
    (properties.checks.channel_layouts)."""
    assert not x.is_contiguous() or x.storage_offset() > 0, "an x laid out otherwise than a fresh contiguous tensor"
    layout = layout_of(x)
    y = _call(kernel, x, num_groups, weight, bias, eps, allow_nonfinite=True, any_dtype=True)
    y0 = _call(kernel, x.contiguous(), num_groups, weight, bias, eps, allow_nonfinite=True, any_dtype=True)
    bound = tolerance.forward(kernel, x, weight, bias, eps, num_groups=num_groups)
    comparisons = [outcome.compare(y, y0, 2 * bound, f"x of {layout} vs contiguous x: y")]
    if dy is not None:
        example = example_of(x, num_groups, weight, bias, eps)
        bounds = tolerance.backward(kernel, x, weight, eps, dy, bias=bias, num_groups=num_groups)
        comparisons += input_layout_gradients(kernel, example, {**example, "x": x.contiguous()}, dy, bounds)
    outcome.conclude(comparisons, f"the kernel reads an x of {layout} as if it were contiguous (in its forward or "
                     "its backward)", d=int(x[0].numel() // num_groups), dtype=dtype_name(x.dtype))


def check_invalid_groups_refused(kernel, x: torch.Tensor, num_groups: int, weight, eps: float, bias=None) -> None:
    """A ``num_groups`` that does not divide x's C channels (0, or one that leaves a remainder, more groups than
    channels included): the kernel refuses the call with an error, as torch's group_norm does. An output normalizes
    groups that do not exist: the last channels in a group of their own, or their statistics mixed with the next
    sample's (pytorch/pytorch#74293, kuangliu/pytorch-groupnorm#3)."""
    channels = int(x.shape[1])
    assert num_groups == 0 or channels % num_groups
    conclude_refused(lambda: _call(kernel, x, num_groups, weight, bias, eps, allow_nonfinite=True, any_dtype=True),
                     f"returned an output for num_groups = {num_groups} with {channels} channels",
                     "a num_groups that does not divide the channels must be refused with an error",
                     num_groups=num_groups, channels=channels, dtype=dtype_name(x.dtype))


def check_independence(kernel, x: torch.Tensor, other: torch.Tensor, num_groups: int, weight, eps: float,
                       bias=None) -> None:
    """``other`` (x's shape) supplies the replaced values: sample 0 of y moves nothing else, group 0 of the last
    sample moves nothing outside it."""
    size = x.shape[1] // num_groups  # channels per group
    y = _call(kernel, x, num_groups, weight, bias, eps, allow_nonfinite=True, any_dtype=True)
    sample = x.clone()
    sample[0] = other[0]
    group = x.clone()
    group[-1, :size] = other[-1, :size]
    moved_samples = rows_that_differ(y[1:], _call(kernel, sample, num_groups, weight, bias, eps,
                                                  allow_nonfinite=True, any_dtype=True)[1:]) + 1
    after = _call(kernel, group, num_groups, weight, bias, eps, allow_nonfinite=True, any_dtype=True)
    outside = [int(n) for n in rows_that_differ(y[:-1], after[:-1])]
    other_groups = rows_that_differ(y[-1:, size:], after[-1:, size:]).numel() > 0
    problems = ([f"replacing sample 0 changed samples {moved_samples.tolist()[:8]}"] if moved_samples.numel() else [])
    problems += [f"replacing group 0 of sample {x.shape[0] - 1} changed samples {outside[:8]}"] if outside else []
    problems += [f"replacing group 0 of sample {x.shape[0] - 1} changed its other groups"] if other_groups else []
    outcome.exact(not problems, "; ".join(problems) or "independent",
                  "the statistics mix samples or groups (over the batch, or channels of other groups)",
                  num_groups=num_groups, channels=int(x.shape[1]), dtype=dtype_name(x.dtype))


def check_inputs_unmodified(kernel, x: torch.Tensor, num_groups: int, weight, eps: float, dy: torch.Tensor,
                            bias=None) -> None:
    """x, weight, bias and dy (unless declared in place: then it holds dx) are bit for bit the same after the forward
    and backward."""
    inputs = {"x": x, "weight": weight, "bias": bias, UPSTREAM: dy}
    before = read_only(kernel, inputs)
    if discover(kernel).backward:
        _, grads = norms.gradients(kernel, example_of(x, num_groups, weight, bias, eps), {"y": dy}, same_tensors=True,
                                   allow_nonfinite=True, any_dtype=True)
        check_dx_written_into_dy(kernel, dy, grads["x"], x)
    else:
        _call(kernel, x, num_groups, weight, bias, eps, allow_nonfinite=True, any_dtype=True)
    changed = changed_inputs(before, inputs)
    outcome.exact(not changed, f"the kernel wrote into {', '.join(changed)}", "inputs must be read-only",
                  dtype=dtype_name(x.dtype))
