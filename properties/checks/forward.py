"""ln.forward / rms.forward: the kernel's output is the float64 oracle's on the same rounded inputs,
within the error-model bound (properties.bounds.tolerance), for every width, dtype, weight and eps; or, for a kernel
that declares conventions, within their derived model (properties.bounds.diagnosis). A failure names the mechanisms
that explain it. With weight and bias in another dtype than x (float32 with 16-bit x, 16-bit with float32 x) the
output must also have the output-dtype rule's dtype (properties.norms.output_dtype: x's, torch's rule, unless the
kernel declares another), and the bound is that of the dtypes received
(properties.bounds.tolerance.operand_roundoffs)."""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch

from core import guard
from core.boundary import to_kernel
from core.capabilities import dtype_name
from core.results import SERIES
from properties import norms, outcome
from properties.bounds import diagnosis, models, tolerance
from properties.checks.modes import also_in_default_modes


@also_in_default_modes
def check_forward(kernel, x: torch.Tensor, weight, eps: float, bias=None, recording: bool = False,
                  inference: bool = False) -> None:
    """|kernel(x) - oracle(x)| <= forward bound, elementwise; ``recording``: the kernel called as in a training step
    (x, weight and bias requiring grad), ``inference``: under torch.inference_mode() (properties.norms.forward)."""
    got = norms.forward(kernel, x, weight, bias, eps, recording=recording, inference=inference)
    expected, bound, declared = models.expected_forward(kernel, x, weight, bias, eps)
    comparison = outcome.compare(got, expected, bound, "output")
    kappa = float(tolerance.condition_number(x, eps).max())
    model = f"the declared {' and '.join(declared)} model" if declared else "the exact normalization"
    outcome.conclude(comparison, f"the output is farther from {model} than rounding explains "
                                 f"(row condition number {kappa:.3g})",
                     diagnose=diagnosis.of_forward(kernel, x, weight, bias, eps, got),
                     **SERIES["ratio"].point(kappa=kappa), d=x.shape[-1], dtype=dtype_name(x.dtype),
                     **models.declared_point(declared))


def check_forward_in_float64(kernel, x: torch.Tensor, weight, eps: float, bias=None) -> None:
    """float64 x, weight and bias: y in float64 within the float64 forward bound plus the float64 oracle's own
    (tolerance.oracle_forward): a kernel that computes in float32 and returns float64 misses it by ~1e8."""
    got = norms.forward(kernel, x, weight, bias, eps)
    bound = tolerance.forward(kernel, x, weight, bias, eps) + tolerance.oracle_forward(kernel, x, weight, bias, eps)
    outcome.conclude(outcome.compare(got, norms.reference(kernel, x, weight, bias, eps), bound, "output"),
                     "float64 inputs must be normalized in float64 (statistics and output), not in a lower precision",
                     d=x.shape[-1], dtype=dtype_name(x.dtype))


# the dtypes autocast runs its listed ops in (CPU and CUDA alike): bfloat16, and float16 (mixed-precision training
# on GPUs without bfloat16; a kernel that hard-codes bfloat16 under any autocast fails there)
AUTOCAST_DTYPES = (torch.bfloat16, torch.float16)


def check_forward_under_autocast(kernel, x: torch.Tensor, weight, eps: float, bias=None,
                                autocast: torch.dtype = torch.bfloat16) -> None:
    """float32 x (weight, bias) under torch.autocast(x's device type, ``autocast``: bfloat16 or float16), as a
    mixed-precision training step calls a norm: a float32 y is the norm of the float32 inputs within their bound
    (:func:`check_forward`'s; a kernel whose statistics go through an op autocast lists, a matmul, computes them in
    the lower precision there and fails); a y in autocast's dtype (a kernel that casts its inputs, as
    custom_fwd(cast_inputs=...) does) the norm of the inputs rounded to it, within that dtype's bound; any other
    dtype (bfloat16 under float16 autocast: a dtype hard-coded) fails."""
    with torch.autocast(x.device.type, dtype=autocast):
        got = norms.forward(kernel, x, weight, bias, eps, any_dtype=True)
    outcome.exact(got.dtype in (x.dtype, autocast), f"y is {dtype_name(got.dtype)} under autocast to "
                  f"{dtype_name(autocast)} with {dtype_name(x.dtype)} x",
                  "y must be in x's dtype or autocast's", d=x.shape[-1], dtype=dtype_name(x.dtype))
    if got.dtype != x.dtype:
        x, weight, bias = (None if t is None else to_kernel(t.double(), autocast, t.device)
                           for t in (x, weight, bias))
    expected, bound, declared = models.expected_forward(kernel, x, weight, bias, eps)
    outcome.conclude(outcome.compare(got, expected, bound, "output"),
                     f"under autocast the output is farther from the norm of the {dtype_name(got.dtype)} inputs than "
                     "rounding explains (a step computed in autocast's lower precision)",
                     d=x.shape[-1], dtype=dtype_name(x.dtype), **models.declared_point(declared))


def forward_after_an_in_place_update(kernel, x: torch.Tensor, weight, eps: float, new_weight: torch.Tensor,
                                     bias=None, new_bias: torch.Tensor | None = None, inference: bool = False,
                                     new_x: torch.Tensor | None = None) -> None:
    """The kernel called once, its weight (and bias, and with ``new_x`` x itself) then overwritten in place with
    ``new_weight`` (``new_bias``, ``new_x``), as an optimizer step does to parameters and a serving stack to its
    activation buffers (the same tensors, new values), and called again: the second output is the oracle's at the
    new values (:func:`check_forward`); a kernel caching a converted weight, or its outputs by x's address, across
    calls keeps the old ones. ``inference``: both calls under torch.inference_mode() (a serving stack's path, where
    such caches live)."""
    example = {"x": x, "weight": weight, "bias": bias, "eps": eps}
    updated = updated_in_place(kernel, example, {"x": new_x, "weight": new_weight, "bias": new_bias},
                               inference=inference)
    check_forward(kernel, updated["x"], updated["weight"], eps, updated["bias"], inference=inference)


def updated_in_place(kernel, example: dict, new: dict, inference: bool = False) -> dict:
    """``example`` with copies of its parameters named in ``new`` (None values skipped), after one call of the kernel
    (of any kind) with them, on copies of every other tensor (a residual or running buffers it may write), the
    parameters then overwritten in place with ``new``'s values as an optimizer step writes them: the same tensors,
    new values; the weight through ``.data`` (as EMA updates, FSDP and DeepSpeed write parameters: the tensor's
    version counter does not move, so a cache keyed by ``_version`` misses it, pytorch/pytorch#53343), the others
    with ``copy_`` under no_grad. ``inference``: that call under torch.inference_mode()."""
    parameters = {name: example[name].clone() for name, values in new.items() if values is not None}
    example = {**example, **parameters}
    norms.call(kernel, {name: t.clone() if isinstance(t, torch.Tensor) and name not in parameters else t
                        for name, t in example.items()}, allow_nonfinite=True, any_dtype=True, inference=inference)
    with torch.no_grad():
        for name, t in parameters.items():
            (t.data if name == "weight" else t).copy_(new[name])
    return example


def check_forward_of_parameter_views_of_one_buffer(kernel, x: torch.Tensor, weight, eps: float, new_weight,
                                                   bias=None, new_bias=None) -> None:
    """Two layers' parameters as views of one flat buffer (Megatron's contiguous parameter buffer, an FSDP shard):
    the call with the first layer's weight (and bias), then with the second's: the second output is the norm at the
    second layer's parameters (a cache keyed by the storage's address returns the first layer's:
    local-inference-lab/vllm#228, ray-project/ray#60689)."""
    views = {}
    for name, first, second in (("weight", weight, new_weight), ("bias", bias, new_bias)):
        if first is not None:
            flat = torch.empty(2 * first.numel(), dtype=first.dtype, device=first.device)
            flat[: first.numel()].copy_(first.reshape(-1))
            flat[first.numel():].copy_(second.reshape(-1))
            views[name] = flat[: first.numel()].view(first.shape), flat[first.numel():].view(first.shape)
    first_weight, second_weight = views.get("weight", (None, None))
    first_bias, second_bias = views.get("bias", (None, None))
    norms.forward(kernel, x, first_weight, first_bias, eps, allow_nonfinite=True, any_dtype=True, inference=True)
    check_forward(kernel, x, second_weight, eps, second_bias, inference=True)


def new_parameter_values(example: dict, names: tuple[str, ...] = ("weight", "bias")) -> dict:
    """{"new_weight": ..., "new_bias": ...}: values an optimizer step could write over the example's weight and bias
    (-w/2 + 1/4, rounded to the parameter's dtype: every element changes), for those present; ``names``: the inputs
    given new values (("x", "weight", "bias"): x too, -x/2 + 1/4, whose norm is not the old one's: LayerNorm's
    changes sign, with eps scaled by 4, RMSNorm's changes its shift)."""
    return {f"new_{name}": to_kernel(-0.5 * example[name].double() + 0.25, example[name].dtype, example[name].device)
            for name in names if example.get(name) is not None}


def output_dtype_rule(check: Callable[..., None], name: str) -> Callable[..., None]:
    """``check``, a forward check of any kind (taking the kernel, then x and weight among its arguments), where weight
    and bias may be in another dtype than x: an output in another dtype than the rule's is a failure of the claim
    (not a fault that stops the check), with the rule in the message. ``name``: the module-level name the result is
    bound to in ``check``'s module (a counterexample replays its check by that name)."""
    signature = inspect.signature(check)

    def checked(kernel, *args, **kwargs) -> None:
        try:
            check(kernel, *args, **kwargs)
        except guard.KernelFault as fault:
            if fault.reason != "dtype":
                raise
            given = signature.bind(kernel, *args, **kwargs).arguments
            x, weight = given["x"], given.get("weight")
            rule = norms.output_dtype(kernel, x, weight)
            declared = "torch's rule" if kernel.output_dtype == "input" else f"declared {kernel.output_dtype!r}"
            parameters = "no" if weight is None else dtype_name(weight.dtype)
            outcome.exact(False, f"{fault}: with {dtype_name(x.dtype)} x and {parameters} weight the output must be "
                                 f"{dtype_name(rule)} ({declared})",
                          "the output dtype does not follow the output-dtype rule (docs/validate-your-kernel.md)",
                          d=x.shape[-1], dtype=dtype_name(x.dtype))

    checked.__module__, checked.__name__, checked.__qualname__ = check.__module__, name, name
    checked.__doc__ = f":func:`{check.__name__}` with the output-dtype rule's verdict ({output_dtype_rule.__name__})."
    return checked


check_forward_with_parameter_dtypes = output_dtype_rule(check_forward, "check_forward_with_parameter_dtypes")
check_forward_after_an_in_place_update = output_dtype_rule(forward_after_an_in_place_update,
                                                           "check_forward_after_an_in_place_update")
