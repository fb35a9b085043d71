"""Checks of the kinds with running statistics, BatchNorm (kind batchnorm, F.batch_norm's contract) and InstanceNorm
(kind instancenorm, F.instance_norm's): fn(x, running_mean, running_var, weight, bias, training, momentum, eps) over
x [N, C, *].

In training mode BatchNorm is LayerNorm over each channel's n = N S elements with the channel's weight and bias
(claim bn.forward): its kind record's scope is the batch, so properties.norms and properties.bounds.tolerance give
its reference, VJP and bounds on the channel-major view [1, C, N S] (GroupNorm's view of x.transpose(0, 1) with
G = C), mapped back to x's elements. InstanceNorm is LayerNorm over each (sample, channel)'s S elements (claim
in.forward): GroupNorm's view with G = C. In eval mode both are the per-channel affine map of the running statistics.
The claims below are BatchNorm's; InstanceNorm's are the same checks under in.* ids (its samples are independent in
both modes: in.independence where BatchNorm has bn.coupling).

- bn.forward: training-mode y vs the per-channel LayerNorm within the forward bound of the channel-major view;
- bn.running_statistics: after one training call the buffers hold one update, as declared (momentum convention,
  unbiased or biased variance), within tolerance.running_statistics;
- bn.eval: eval-mode y vs the affine map within tolerance.running_eval, the buffers bit for bit unchanged, also with
  x, weight and bias requiring grad (a frozen BatchNorm fine-tuned through);
- bn.coupling: in training mode replacing sample 0 moves every other sample's outputs by the derived amount (the
  oracle's change, within the two calls' bounds); in eval mode it moves nothing, bit for bit;
- bn.jacobian: training-mode dx, dweight, dbias vs the batch VJP within tolerance.backward; eval-mode ones vs the
  affine map's VJP (proofs.batchnorm_oracles.batchnorm_eval_vjp: no terms through the batch's statistics) within
  tolerance.running_eval_backward;
- bn.degenerate: constant channels give beta (the forward check), and a training call with one element per channel
  is refused with an error or gives beta;
- bn.single_sample: N = 1 in training mode is InstanceNorm (the forward check at N = 1);
- bn.layout_invariance: channels-last x gives the contiguous call's y within twice the forward bound, and its
  running statistics within twice theirs; given dy, its dx, dweight, dbias within twice their bound
  (properties.checks.channel_layouts);
- bn.inputs_unmodified: x, weight, bias and dy unchanged (the buffers are the running statistics' business).

Every call gets its own copies of the running buffers (:func:`buffers_of`): the kernel writes into them.
"""

from __future__ import annotations

import torch

from core import guard
from core.capabilities import discover, dtype_name
from proofs import batchnorm_oracles
from properties import norms, outcome
from properties.bounds import diagnosis, tolerance
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

BUFFERS = ("running_mean", "running_var")



def _statistics_rows(kernel) -> str:
    """What one row of the kind's statistics holds, in words (BatchNorm's channel across the batch, InstanceNorm's
    channel of one sample)."""
    return ("each channel's elements of the whole batch" if kernel.record.batch_statistics
            else "each sample's channel")

def example_of(x: torch.Tensor, running_mean, running_var, weight, bias, training: bool, momentum: float,
               eps: float) -> dict:
    """BatchNorm's arguments keyed by role (core.kinds)."""
    return {"x": x, "running_mean": running_mean, "running_var": running_var, "weight": weight, "bias": bias,
            "training": training, "momentum": momentum, "eps": eps}


def buffers_of(example: dict) -> dict:
    """The example with copies of its running buffers (None stays None), for one call that may write them; a buffer
    that is a view into a larger tensor is the same view of a copy of it (norms.copy_in_its_layout)."""
    return {**example, **{name: None if example[name] is None else norms.copy_in_its_layout(example[name])
                          for name in BUFFERS}}


def _call(kernel, example: dict, allow_nonfinite: bool = False, any_dtype: bool = False,
          recording: bool = False, inference: bool = False) -> torch.Tensor:
    return norms.call(kernel, example, allow_nonfinite, any_dtype, recording, inference)["y"]


def _plot(x: torch.Tensor) -> dict:
    return {"d": int(x.numel() // x.shape[1]), "dtype": dtype_name(x.dtype)}


def check_forward(kernel, x: torch.Tensor, running_mean, running_var, weight, bias, training: bool, momentum: float,
                  eps: float, recording: bool = False, inference: bool = False) -> None:
    """Training mode: |y - BatchNorm(x)| <= the forward bound of LayerNorm over each channel's N S elements;
    ``recording``: the kernel called with x, weight and bias requiring grad, ``inference``: under
    torch.inference_mode() (properties.norms.call)."""
    assert training
    example = buffers_of(example_of(x, running_mean, running_var, weight, bias, training, momentum, eps))
    y = _call(kernel, example, recording=recording, inference=inference)
    expected = norms.reference(kernel, x, weight, bias, eps)
    bound = tolerance.forward(kernel, x, weight, bias, eps)
    outcome.conclude(outcome.compare(y, expected, bound, "y"),
                     f"the output is not LayerNorm over {_statistics_rows(kernel)}", **_plot(x))


def check_running_statistics(kernel, x: torch.Tensor, running_mean, running_var, weight, bias, training: bool,
                             momentum: float, eps: float, call: str = "forward") -> None:
    """One training call updates the buffers once, as declared: new = (1 - m) old + m b (torch's convention, or
    Keras' m old + (1 - m) b), b the batch mean and the unbiased (or declared biased) variance; for InstanceNorm, the
    average over the samples of each instance's mean and unbiased variance. ``call``: "forward"; "inference", the
    training call under torch.inference_mode() (a recalibration pass, SWA's update_bn, precise BN: the buffers are
    updated there too, fairscale#1035); "backward", the forward recorded and its backward run before the buffers are
    read (a backward that recomputes the forward must not update them again, pytorch/pytorch#96136)."""
    assert training and running_mean is not None and running_var is not None
    example = buffers_of(example_of(x, running_mean, running_var, weight, bias, training, momentum, eps))
    if call == "backward" and discover(kernel).backward:
        norms.gradients(kernel, example, {"y": torch.ones_like(x)}, allow_nonfinite=True, any_dtype=True)
    else:
        _call(kernel, example, allow_nonfinite=True, any_dtype=True, inference=call == "inference")
    old = norms.as_float64(running_mean), norms.as_float64(running_var), norms.as_float64(x), momentum
    if kernel.record.batch_statistics:
        exact = batchnorm_oracles.running_update(*old, unbiased=kernel.running_variance == "unbiased",
                                                 convention=kernel.momentum_convention)
    else:
        exact = batchnorm_oracles.instance_running_update(*old)
    bounds = tolerance.running_statistics(kernel, x, running_mean, running_var, momentum, eps)
    comparisons = [outcome.compare(example[name], expected, bound, name)
                   for name, expected, bound in zip(BUFFERS, exact, bounds, strict=True)]
    diagnose = diagnosis.of_running_statistics(kernel, x, running_mean, running_var, momentum, eps,
                                               example["running_mean"], example["running_var"])
    outcome.conclude(comparisons, f"the running statistics are not one update with momentum {momentum} "
                     f"({kernel.momentum_convention}'s convention, {kernel.running_variance} variance)",
                     diagnose=diagnose, **_plot(x))


def check_eval(kernel, x: torch.Tensor, running_mean, running_var, weight, bias, training: bool, momentum: float,
               eps: float, recording: bool = False) -> None:
    """Eval mode: y = gamma (x - mu_R)/sqrt(var_R + eps) + beta within tolerance.batchnorm_eval, and the running
    buffers unchanged bit for bit; ``recording``: the kernel called with x, weight and bias requiring grad (a frozen
    BatchNorm in a network being fine-tuned: still the running statistics, properties.norms.call)."""
    assert not training
    example = buffers_of(example_of(x, running_mean, running_var, weight, bias, training, momentum, eps))
    y = _call(kernel, example, recording=recording)
    expected = batchnorm_oracles.batchnorm_eval(norms.as_float64(x), norms.as_float64(running_mean),
                                                norms.as_float64(running_var), *norms.gammas(kernel, weight, bias),
                                                eps)
    bound = tolerance.running_eval(kernel, x, running_mean, running_var, weight, bias, eps)
    given = {"running_mean": running_mean, "running_var": running_var}
    written = [name for name in BUFFERS if not torch.equal(example[name], given[name])]
    outcome.conclude(outcome.compare(y, expected, bound, "y"),
                     "eval mode is not the affine map of the running statistics",
                     diagnose=diagnosis.of_eval(kernel, x, weight, bias, eps, y), **_plot(x))
    outcome.exact(not written, f"eval mode wrote into {', '.join(written)}",
                  "eval mode must leave the running statistics alone", **_plot(x))


def check_eval_without_running_statistics_refused(kernel, x: torch.Tensor, running_mean, running_var, weight, bias,
                                                  training: bool, momentum: float, eps: float) -> None:
    """Eval mode with no running statistics (running_mean and running_var None): the kernel refuses the call with an
    error, as torch's batch_norm and instance_norm do; an output is a normalization by statistics the caller never
    gave (the batch's or the instances': openvinotoolkit/openvino#37954, apache/tvm#14963)."""
    assert not training and running_mean is None and running_var is None
    example = example_of(x, None, None, weight, bias, False, momentum, eps)
    conclude_refused(lambda: _call(kernel, example, allow_nonfinite=True, any_dtype=True),
                     "returned an output in eval mode without running statistics",
                     "eval mode needs running statistics: a call without them must be refused with an error",
                     **_plot(x))


def check_coupling(kernel, x: torch.Tensor, other: torch.Tensor, running_mean, running_var, weight, bias,
                   training: bool, momentum: float, eps: float) -> None:
    """Replacing sample 0 of x by ``other``'s: BatchNorm in training mode moves every other sample's y by the oracle's
    change (|dy_kernel - dy_exact| within the two calls' forward bounds); in eval mode, and InstanceNorm in either,
    no other sample moves, bit for bit."""
    changed = x.clone()
    changed[0] = other[0]
    example = example_of(x, running_mean, running_var, weight, bias, training, momentum, eps)
    before = _call(kernel, buffers_of(example), allow_nonfinite=True, any_dtype=True)
    after = _call(kernel, buffers_of({**example, "x": changed}), allow_nonfinite=True, any_dtype=True)
    if not (training and kernel.record.batch_statistics):
        moved = rows_that_differ(before[1:], after[1:]) + 1
        mode = "training" if training else "eval"
        outcome.exact(moved.numel() == 0, f"in {mode} mode replacing sample 0 changed samples {moved.tolist()[:8]}",
                      "the samples do not interact (eval mode: the running statistics; InstanceNorm: each sample's "
                      "own)", **_plot(x))
        return
    expected = (norms.reference(kernel, changed, weight, bias, eps) - norms.reference(kernel, x, weight, bias, eps))
    bound = tolerance.forward(kernel, x, weight, bias, eps) + tolerance.forward(kernel, changed, weight, bias, eps)
    moved = norms.as_float64(after) - norms.as_float64(before)
    outcome.conclude(outcome.compare(moved[1:], expected[1:], bound[1:], "the other samples' change of y"),
                     "replacing one sample does not move the others as the batch statistics do", **_plot(x))


def check_vjp(kernel, x: torch.Tensor, running_mean, running_var, weight, bias, training: bool, momentum: float,
              eps: float, dy: torch.Tensor, frozen: tuple[str, ...] = ()) -> None:
    """Training mode: dx, dweight, dbias vs the derived batch VJP (the terms through the batch mean and variance
    included), within tolerance.backward over each channel's elements; ``frozen``: inputs that do not require grad
    (the others must each get their gradient)."""
    example = buffers_of(example_of(x, running_mean, running_var, weight, bias, training, momentum, eps))
    try:
        _, grads = norms.gradients(kernel, example, {"y": dy}, frozen=frozen)
    except guard.KernelFault as fault:
        fail_on_missing_gradient(kernel, fault, frozen, **_plot(x))
        return
    expected = norms.reference_vjp(kernel, x, weight, eps, dy)
    bounds = tolerance.backward(kernel, x, weight, eps, dy, bias=bias)
    comparisons = [outcome.compare(g, expected[name], bounds[name], f"d{name}") for name, g in grads.items()]
    outcome.conclude(comparisons, f"the backward is not the derivative of LayerNorm over {_statistics_rows(kernel)}",
                     **_plot(x))


def check_eval_vjp(kernel, x: torch.Tensor, running_mean, running_var, weight, bias, training: bool, momentum: float,
                   eps: float, dy: torch.Tensor, frozen: tuple[str, ...] = ()) -> None:
    """Eval mode: dx, dweight, dbias vs the VJP of the per-channel affine map of the running statistics
    (proofs.batchnorm_oracles.batchnorm_eval_vjp: dx = dy gamma rsqrt(var_R + eps), dweight = sum dy xhat_R, dbias =
    sum dy), within tolerance.running_eval_backward; the batch's statistics have no part in it; ``frozen``: inputs
    that do not require grad."""
    assert not training
    example = buffers_of(example_of(x, running_mean, running_var, weight, bias, training, momentum, eps))
    try:
        _, grads = norms.gradients(kernel, example, {"y": dy}, frozen=frozen)
    except guard.KernelFault as fault:
        fail_on_missing_gradient(kernel, fault, frozen, **_plot(x))
        return
    gamma, _ = norms.gammas(kernel, weight, bias)
    expected = dict(zip(("x", "weight", "bias"), batchnorm_oracles.batchnorm_eval_vjp(
        norms.as_float64(x), norms.as_float64(running_mean), norms.as_float64(running_var), gamma, eps,
        norms.as_float64(dy)), strict=True))
    bounds = tolerance.running_eval_backward(kernel, x, running_mean, running_var, weight, bias, eps, dy)
    comparisons = [outcome.compare(g, expected[name], bounds[name], f"d{name}") for name, g in grads.items()]
    outcome.conclude(comparisons, "the eval-mode backward is not the derivative of the affine map of the running "
                     "statistics (a training backward, through the batch's statistics?)", **_plot(x))


def check_noncontiguous_upstream(kernel, x: torch.Tensor, running_mean, running_var, weight, bias, training: bool,
                                momentum: float, eps: float, dy: torch.Tensor) -> None:
    """Training mode, dy a non-contiguous view (properties.checks.contracts.strided): dx, dweight, dbias are the
    contiguous dy's within twice the backward bound (each call with fresh running buffers)."""
    example = example_of(x, running_mean, running_var, weight, bias, training, momentum, eps)
    _, laid_out, contiguous = gradients_in_both_layouts(kernel, buffers_of(example), {"y": dy}, buffers_of(example))
    conclude_upstream_layouts(kernel, {"y": dy}, laid_out, contiguous,
                              tolerance.backward(kernel, x, weight, eps, dy, bias=bias), **_plot(x))


def check_forward_after_an_in_place_update(kernel, x: torch.Tensor, running_mean, running_var, weight, bias,
                                           training: bool, momentum: float, eps: float, new_weight: torch.Tensor,
                                           new_bias=None) -> None:
    """A second call after weight and bias were overwritten in place (properties.checks.forward.updated_in_place)
    gives the normalization at the new values (:func:`check_forward`, with fresh running buffers)."""
    example = example_of(x, running_mean, running_var, weight, bias, training, momentum, eps)
    updated = buffers_of(updated_in_place(kernel, example, {"weight": new_weight, "bias": new_bias}))
    check_forward(kernel, **updated)


def check_backward_of_the_recorded_graph(kernel, x: torch.Tensor, running_mean, running_var, weight, bias,
                                        training: bool, momentum: float, eps: float, dy: torch.Tensor) -> None:
    """Inputs and y written in place after the forward, and a second backward of one graph
    (properties.checks.graph), each call with fresh running buffers."""
    example = example_of(x, running_mean, running_var, weight, bias, training, momentum, eps)
    check_recorded_graph(kernel, lambda: buffers_of(example), {"y": dy},
                         tolerance.backward(kernel, x, weight, eps, dy, bias=bias), **_plot(x))


def check_one_element_per_channel(kernel, x: torch.Tensor, running_mean, running_var, weight, bias, training: bool,
                                  momentum: float, eps: float) -> None:
    """n = N S = 1 in training mode: the variance is 0 and the unbiased factor undefined, so the kernel either
    refuses the call with an error (torch's ValueError) or gives beta (the forward bound) and leaves its running
    buffers finite: the mean updated with the element, the variance left alone or updated with 0
    (tolerance.running_update_of_one_element); anything else fails."""
    example = buffers_of(example_of(x, running_mean, running_var, weight, bias, training, momentum, eps))
    try:
        y = _call(kernel, example)
    except guard.KernelFault as fault:
        if fault.reason != "raised":
            raise
        outcome.exact(True, "", **_plot(x))  # refused, as torch does
        return
    comparisons = [outcome.compare(y, norms.reference(kernel, x, weight, bias, eps),
                                   tolerance.forward(kernel, x, weight, bias, eps), "y")]
    if training and running_mean is not None:
        mean, mean_bound, var_low, var_high = tolerance.running_update_of_one_element(
            kernel, x, running_mean, running_var, momentum)
        comparisons += [outcome.compare(example["running_mean"], mean, mean_bound, "running_mean"),
                        outcome.compare(example["running_var"], (var_low + var_high) / 2, (var_high - var_low) / 2,
                                        "running_var (left alone or updated with 0)")]
    outcome.conclude(comparisons, "one element per channel must give beta and finite running statistics (the "
                                  "variance's n - 1 is 0), or be refused", **_plot(x))


def check_input_layout(kernel, x: torch.Tensor, running_mean, running_var, weight, bias, training: bool,
                       momentum: float, eps: float, dy: torch.Tensor | None = None) -> None:
    """x in a layout other than contiguous (channels-last, transposed, a slice of a larger tensor:
    contracts.channel_input) gives the contiguous call's y within twice the forward bound, and (training) its running
    statistics within twice their bound; with ``dy``, the backward of each (dy contiguous) its dx, dweight, dbias
    within twice their bound (tolerance.backward, or in eval mode tolerance.running_eval_backward:
    properties.checks.channel_layouts), each call with fresh running buffers."""
    assert not x.is_contiguous() or x.storage_offset() > 0, "an x laid out otherwise than a fresh contiguous tensor"
    layout = layout_of(x)
    example = example_of(x, running_mean, running_var, weight, bias, training, momentum, eps)
    laid_out, contiguous = buffers_of(example), buffers_of({**example, "x": x.contiguous()})
    y = _call(kernel, laid_out, allow_nonfinite=True, any_dtype=True)
    y0 = _call(kernel, contiguous, allow_nonfinite=True, any_dtype=True)
    if training:
        bound = tolerance.forward(kernel, x, weight, bias, eps)
    else:
        bound = tolerance.running_eval(kernel, x, running_mean, running_var, weight, bias, eps)
    comparisons = [outcome.compare(y, y0, 2 * bound, f"x of {layout} vs contiguous x: y")]
    if training and running_mean is not None:
        bounds = tolerance.running_statistics(kernel, x, running_mean, running_var, momentum, eps)
        comparisons += [outcome.compare(laid_out[name], contiguous[name], 2 * b,
                                        f"x of {layout} vs contiguous x: {name}")
                        for name, b in zip(BUFFERS, bounds, strict=True)]
    if dy is not None:
        bounds = (tolerance.backward(kernel, x, weight, eps, dy, bias=bias) if training else
                  tolerance.running_eval_backward(kernel, x, running_mean, running_var, weight, bias, eps, dy))
        comparisons += input_layout_gradients(kernel, buffers_of(example),
                                              buffers_of({**example, "x": x.contiguous()}), dy, bounds)
    outcome.conclude(comparisons, f"the kernel reads an x of {layout} as if it were contiguous "
                     "(statistics or gradients over the wrong axes)", **_plot(x))


def check_inputs_unmodified(kernel, x: torch.Tensor, running_mean, running_var, weight, bias, training: bool,
                            momentum: float, eps: float, dy: torch.Tensor) -> None:
    """x, weight, bias and dy (unless declared in place: then it holds dx) are bit for bit the same after the
    forward and backward."""
    inputs = {"x": x, "weight": weight, "bias": bias, UPSTREAM: dy}
    before = read_only(kernel, inputs)
    example = buffers_of(example_of(x, running_mean, running_var, weight, bias, training, momentum, eps))
    _, grads = norms.gradients(kernel, example, {"y": dy}, same_tensors=True, allow_nonfinite=True, any_dtype=True)
    check_dx_written_into_dy(kernel, dy, grads["x"], x)
    changed = changed_inputs(before, inputs)
    outcome.exact(not changed, f"the kernel wrote into {', '.join(changed)}", "inputs must be read-only", **_plot(x))


check_forward_with_parameter_dtypes = output_dtype_rule(check_forward, "check_forward_with_parameter_dtypes")
