"""Checks of GroupNorm kernels, kind groupnorm: fn(x, num_groups, weight, bias, eps) over x [N, C, *].

GroupNorm is LayerNorm over each group's (C/G) x spatial elements with per-channel weight and bias (claim
gn.jacobian), so the bounds are proofs.error_model's LayerNorm bounds on the grouped view [N, G, (C/G) S] with
the per-element weight:

- gn.forward: y vs proofs.fused_oracles.groupnorm within error_model.forward_bound of the grouped view;
- gn.jacobian: dx within error_model.backward_bound of each group; dweight_c = sum over (n, s) of dy xhat and
  dbias_c = sum of dy over the N S elements of channel c, in any order: with f the forward bound of xhat
  (gamma = 1, beta = 0, no storage rounding) and g = gamma_{NS-1},
      |dweight_c error| <= (1 + g) sum (|dy| f + u |dy xhat|) + g sum |dy xhat| + u_out |dweight_c|,
      |dbias_c error|   <= g sum |dy| + u_out |dbias_c|          (plus the oracle's 2^-53 relative);
- gn.layout_invariance: a channels-last x gives the contiguous call's y within twice the forward bound;
- gn.independence: replacing sample 0 leaves every other sample of y bit for bit; replacing the channels of group 0
  of the last sample leaves the other samples and that sample's other groups bit for bit (same shapes, same
  computation: as the norms' row independence);
- gn.inputs_unmodified: x, weight, bias, dy unchanged;
- gn.degenerate: one-element groups (InstanceNorm at spatial size 1) give beta: the forward check there.

Layout, independence and inputs_unmodified draw weight and bias in x's dtype or another the kernel takes and do
not judge y's dtype (the forward claim's business, like its accuracy).
"""

from __future__ import annotations

import numpy as np
import torch

from core import guard
from core.capabilities import discover, dtype_name
from proofs import error_model, fused_oracles
from properties import outcome
from properties.checks.contracts import rows_that_differ
from properties.checks.forward import output_dtype_rule
from properties.norms import as_float64, effective_weight, output_dtype
from properties.tolerance import bound_in_use, operand_roundoffs

U64 = 2.0**-53


def _grouped(x64: np.ndarray, groups: int) -> np.ndarray:
    return x64.reshape(x64.shape[0], groups, -1)


def _per_element(parameter: np.ndarray | None, x64: np.ndarray, groups: int) -> np.ndarray | None:
    if parameter is None:
        return None
    spatial = int(np.prod(x64.shape[2:], dtype=np.int64))
    return np.repeat(parameter, spatial).reshape(groups, -1)


def forward_bound(kernel, x: torch.Tensor, num_groups: int, weight, bias, eps: float) -> np.ndarray:
    """Per-element bound on |y - GroupNorm(x)|, shape of x."""
    x64 = as_float64(x)
    u = operand_roundoffs(kernel, x, weight, bias)  # y rounded to the output-dtype rule's dtype
    gamma = _per_element(effective_weight(kernel, weight), x64, num_groups)
    beta = _per_element(as_float64(bias), x64, num_groups)
    bound = error_model.forward_bound(_grouped(x64, num_groups), gamma, beta, eps, u["acc"], u["y"], "layernorm",
                                      bound_in_use())
    return np.asarray(bound).reshape(x64.shape)


def backward_bounds(kernel, x: torch.Tensor, num_groups: int, weight, eps: float, dy: torch.Tensor,
                    expected: dict[str, np.ndarray], bias=None) -> dict[str, np.ndarray]:
    """Per-element bounds on dx, dweight [C], dbias [C] (module docstring; u_out of dweight and dbias: their own
    parameter's dtype)."""
    x64, dy64 = as_float64(x), as_float64(dy)
    u = operand_roundoffs(kernel, x, weight, bias)
    u_out = u["x"]
    u_acc = u_out if kernel.backward_precision == "storage" else u["acc"]
    grouped, upstream = _grouped(x64, num_groups), _grouped(dy64, num_groups)
    gamma = _per_element(effective_weight(kernel, weight), x64, num_groups)
    dx = np.stack([error_model.backward_bound(grouped[:, g], None if gamma is None else gamma[g], eps,
                                              upstream[:, g], u_acc, u_out, "layernorm", bound_in_use())[0]
                   for g in range(num_groups)], axis=1).reshape(x64.shape)
    xhat_error = error_model.forward_bound(grouped, None, None, eps, u_acc, u_acc, "layernorm", "worst-case")
    xhat = fused_oracles.groupnorm(x64, num_groups, None, None, eps)
    channels, terms = x64.shape[1], x64.shape[0] * int(np.prod(x64.shape[2:], dtype=np.int64))
    g = terms * u_acc / (1 - terms * u_acc) if terms * u_acc < 1 else np.inf

    def per_channel(values: np.ndarray) -> np.ndarray:
        return np.moveaxis(values, 1, 0).reshape(channels, -1).sum(-1)

    products = np.abs(dy64 * xhat)
    bounds = {"x": dx}
    dweight = ((1 + g) * per_channel(np.abs(dy64) * xhat_error.reshape(x64.shape) + u_acc * products)
               + g * per_channel(products))
    # dweight and dbias are rounded once to their own parameter's dtype (float32 beside 16-bit x: a mix)
    if "weight" in expected:
        bounds["weight"] = dweight + (u["weight"] + U64) * np.abs(expected["weight"])
    bounds["bias"] = g * per_channel(np.abs(dy64)) + (u["bias"] + U64) * np.abs(expected["bias"])
    return bounds


def _call(kernel, x, num_groups, weight, bias, eps, allow_nonfinite=False, any_dtype=False) -> torch.Tensor:
    """y, its dtype judged by the output-dtype rule unless ``any_dtype`` (checks about something else: layout,
    independence, inputs, which compare the kernel with itself; weight and bias may be in another dtype than x)."""
    return guard.call(kernel, x, num_groups, weight, bias, eps, like=x, allow_nonfinite=allow_nonfinite,
                      dtype=guard.ANY_DTYPE if any_dtype else output_dtype(kernel, x, weight))


def check_forward(kernel, x: torch.Tensor, num_groups: int, weight, eps: float, bias=None) -> None:
    """|y - GroupNorm(x)| <= the forward bound of LN on each group, elementwise."""
    y = _call(kernel, x, num_groups, weight, bias, eps)
    expected = fused_oracles.groupnorm(as_float64(x), num_groups, effective_weight(kernel, weight), as_float64(bias),
                                       eps)
    outcome.conclude(outcome.compare(y, expected, forward_bound(kernel, x, num_groups, weight, bias, eps), "y"),
                     "the output is not LayerNorm over each group's channels x spatial elements",
                     d=int(x[0].numel() // num_groups), dtype=dtype_name(x.dtype))


check_forward_with_parameter_dtypes = output_dtype_rule(check_forward, "check_forward_with_parameter_dtypes")


def check_vjp(kernel, x: torch.Tensor, num_groups: int, weight, eps: float, dy: torch.Tensor, bias=None) -> None:
    """dx, dweight, dbias vs the derived GroupNorm VJP (LN VJP per group, per-channel parameter sums)."""
    leaves = {name: t.detach().clone().requires_grad_(True) for name, t in
              (("x", x), ("weight", weight), ("bias", bias)) if t is not None}
    with torch.enable_grad():
        y = _call(kernel, leaves["x"], num_groups, leaves.get("weight"), leaves.get("bias"), eps)
        grads = dict(zip(leaves, guard.grad(kernel, y, list(leaves.values()), dy.clone()), strict=True))
    dx, dweight, dbias = fused_oracles.groupnorm_vjp(as_float64(x), num_groups, effective_weight(kernel, weight),
                                                     eps, as_float64(dy))
    expected = {"x": dx, "bias": dbias, **({"weight": dweight} if weight is not None else {})}
    bounds = backward_bounds(kernel, x, num_groups, weight, eps, dy, expected, bias)
    comparisons = [outcome.compare(g, expected[name], bounds[name], f"d{name}") for name, g in grads.items()]
    outcome.conclude(comparisons, "the backward is not the derivative of GroupNorm",
                     d=int(x[0].numel() // num_groups), dtype=dtype_name(x.dtype))


def check_channels_last(kernel, x: torch.Tensor, num_groups: int, weight, eps: float, bias=None) -> None:
    """x in channels-last memory gives the contiguous call's y within twice the forward bound."""
    assert x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
    y = _call(kernel, x, num_groups, weight, bias, eps, allow_nonfinite=True, any_dtype=True)
    y0 = _call(kernel, x.contiguous(), num_groups, weight, bias, eps, allow_nonfinite=True, any_dtype=True)
    bound = forward_bound(kernel, x, num_groups, weight, bias, eps)
    outcome.conclude(outcome.compare(y, y0, 2 * bound, "channels-last vs contiguous: y"),
                     "the kernel reads a channels-last x as if it were contiguous", dtype=dtype_name(x.dtype))


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
    """x, weight, bias and dy are bit for bit the same after the forward and backward."""
    inputs = {"x": x, "weight": weight, "bias": bias, "upstream gradient": dy}
    before = {name: t.clone() for name, t in inputs.items() if t is not None}
    if discover(kernel).backward:
        leaves = [t.requires_grad_(True) for t in (x, weight, bias) if t is not None]
        try:
            with torch.enable_grad():
                y = _call(kernel, x, num_groups, weight, bias, eps, allow_nonfinite=True, any_dtype=True)
                guard.grad(kernel, y, leaves, dy, allow_nonfinite=True)
        finally:
            for leaf in leaves:
                leaf.requires_grad_(False)
    else:
        _call(kernel, x, num_groups, weight, bias, eps, allow_nonfinite=True, any_dtype=True)
    changed = [name for name, copy in before.items() if not torch.equal(copy, inputs[name])]
    outcome.exact(not changed, f"the kernel wrote into {', '.join(changed)}", "inputs must be read-only",
                  dtype=dtype_name(x.dtype))
