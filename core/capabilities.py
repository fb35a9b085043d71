"""What a kernel under test can do, found by probing it on a tiny input.

Discovered once per kernel (cached), unless declared on the :class:`~core.registry.Kernel`:

- ``device``: CUDA when it is available and the kernel computes there, else CPU
  (a declared ``Kernel.device`` wins);
- ``dtypes``: the storage dtypes among float32, float16 and bfloat16 the kernel is checked in (a declared
  ``Kernel.dtypes`` wins). A probed dtype is left out only when the kernel raises a clear
  unsupported-dtype error in it (:func:`unsupported_dtype`); :attr:`Capabilities.not_tested` says, per
  dtype left out, why. A probe that faults otherwise (raises another error, returns the wrong dtype,
  shape or device, or NaN/inf for finite input) is a fault of the kernel, never a missing dtype: the
  dtype stays, the fault is kept in ``faults``, and every claim drawing that dtype reports it
  (:meth:`Capabilities.raise_fault`: ``error``, or ``failed`` for NaN/inf);
- ``mixes``: the parameter dtype mixes (:data:`PARAMETER_MIXES`: float32 weight/bias with 16-bit x, 16-bit ones with
  float32 x) a kernel with weight and bias (every kind but dropout) takes, probed in x's dtypes unless it declares
  ``parameter_dtypes="same"``.
  A mix whose probe raises (torch's CPU ``layer_norm``: "mixed dtype (CPU): expect parameter to have scalar type
  of Float") is refused: not checked, with the reason in :attr:`Capabilities.not_tested`, never a pass; a mix that
  computes is checked like any other input (wrong values or output dtype fail its claims);
- ``residual_mixes``: the residual dtype mixes (:data:`RESIDUAL_MIXES`: a float32 residual stream beside 16-bit x) a
  kind with a residual takes, probed like the parameter mixes: refused ones are not checked, with the reason in
  :attr:`Capabilities.not_tested`;
- ``backward``: the output has a ``grad_fn``. A forward-only kernel (no ``grad_fn``) has no backward and
  its gradient claims are skipped with ``backward_reason``; a backward that exists but raises or gives
  NaN/inf is checked like any other, so its claims end in ``error``/``failed`` (``backward_fault`` says
  what the probe saw);
- ``double_backward``: that gradient is itself differentiable, which the matrix-free spectral
  norm needs for its Jacobian-vector products (double VJP).

A claim that needs a capability the kernel lacks is skipped with ``*_reason``, never passed.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch

from core import guard
from core.errors import one_line
from core.kernel import Kernel

PROBED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# (x's dtype, weight's and bias' dtype): autocast / mixed-precision training, and 16-bit weights in float32 inference
PARAMETER_MIXES = ((torch.float16, torch.float32), (torch.bfloat16, torch.float32), (torch.float32, torch.float16),
                   (torch.float32, torch.bfloat16))
# (x's dtype, the residual's dtype): a residual stream kept in float32 beside a 16-bit branch (Megatron's
# fp32_residual_connection, vLLM and flash-attention's residual_in_fp32 callers)
RESIDUAL_MIXES = ((torch.float16, torch.float32), (torch.bfloat16, torch.float32))
_PROBE_SHAPE = (2, 8)  # [rows, d]; [N, C] for GroupNorm and BatchNorm
_INSTANCE_PROBE_SHAPE = (2, 4, 2)  # [N, C, S]: InstanceNorm needs two spatial elements in training mode
_PROBE_TIMEOUT_S = guard.DEFAULT_TIMEOUT_S  # NORMVERIFY_CALL_TIMEOUT, normverify run --timeout


@dataclass(frozen=True)
class Capabilities:
    """The probed (or declared) capabilities of one kernel; the reasons say why one is missing."""

    device: str
    dtypes: tuple[torch.dtype, ...]
    backward: bool
    double_backward: bool
    backward_reason: str = ""
    double_backward_reason: str = ""
    dtype_reasons: dict[str, str] = field(default_factory=dict)
    faults: dict[str, guard.KernelFault] = field(default_factory=dict)  # dtype name -> the probe's fault
    backward_fault: str = ""
    mixes: tuple[tuple[torch.dtype, torch.dtype], ...] = ()
    mix_reasons: dict[str, str] = field(default_factory=dict)  # mix_name, residual_mix_name -> why not checked
    residual_mixes: tuple[tuple[torch.dtype, torch.dtype], ...] = ()
    # a kind with a residual: why the kernel does not take residual=None (a first layer's call), '' when it does;
    # None for the kinds without one
    residual_none_reason: str | None = None

    @property
    def residual_none(self) -> bool:
        """Whether the kernel takes residual=None (its residual_out is then x in the declared dtype)."""
        return self.residual_none_reason == ""

    @property
    def not_tested(self) -> dict[str, str]:
        """{dtype name or mix_name: why} for each probed dtype and parameter dtype mix the kernel is not checked in
        (declared, unsupported or refused)."""
        return {**{dtype_name(d): self.dtype_reasons.get(dtype_name(d), "not among its declared dtypes")
                   for d in PROBED_DTYPES if d not in self.dtypes}, **self.mix_reasons}

    def raise_fault(self, dtypes: tuple[torch.dtype, ...] | list[torch.dtype]) -> None:
        """Raise the probe's KernelFault (anew) in the first of ``dtypes`` that has one."""
        for dtype in dtypes:
            fault = self.faults.get(dtype_name(dtype))
            if fault is not None:
                detail = str(fault).removeprefix(f"kernel {fault.kernel} ")
                raise guard.KernelFault(fault.kernel, fault.reason, f"{detail} (probe in {dtype_name(dtype)})")

    def as_json(self) -> dict:
        return {
            "device": self.device,
            "dtypes": [dtype_name(d) for d in self.dtypes],
            "not_tested": self.not_tested,
            "faults": {name: str(fault) for name, fault in self.faults.items()},
            "backward": self.backward,
            "backward_fault": self.backward_fault,
            "double_backward": self.double_backward,
            "reasons": {**self.dtype_reasons,
                        **({"backward": self.backward_reason} if self.backward_reason else {}),
                        **({"double_backward": self.double_backward_reason} if self.double_backward_reason else {}),
                        **({"residual_none": self.residual_none_reason} if self.residual_none_reason else {})},
        }


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float16`` -> ``"float16"``."""
    return str(dtype).removeprefix("torch.")


def mix_name(x_dtype: torch.dtype, parameter_dtype: torch.dtype) -> str:
    """``(float16, float32)`` -> ``"float16 x, float32 weight/bias"``."""
    return f"{dtype_name(x_dtype)} x, {dtype_name(parameter_dtype)} weight/bias"


def residual_mix_name(x_dtype: torch.dtype, residual_dtype: torch.dtype) -> str:
    """``(bfloat16, float32)`` -> ``"bfloat16 x, float32 residual"``."""
    return f"{dtype_name(x_dtype)} x, {dtype_name(residual_dtype)} residual"


def probe_arguments(kernel: Kernel, x: torch.Tensor, parameter_dtype: torch.dtype | None = None) -> tuple:
    """The kernel's positional arguments for input x: unit weight, zero bias (in ``parameter_dtype``, default x's),
    eps 1e-5, p 0.5, seed 0; a fused kind's residual is x reversed; GroupNorm takes x [2, 8] as [N, C] with 2
    groups, BatchNorm as [N, C] and InstanceNorm x [2, 4, 2] in training mode (momentum 0.1) without running
    statistics; the per-channel kinds' weight and bias are [C]."""
    d, dtype = x.shape[1 if kernel.record.per_channel else -1], parameter_dtype or x.dtype
    weight = torch.full((d,), 1.0 - kernel.weight_offset, dtype=dtype, device=x.device)
    bias = torch.zeros(d, dtype=dtype, device=x.device)
    return kernel.record.arguments({"x": x, "residual": x.flip(-1).detach(), "num_groups": 2, "weight": weight,
                                    "bias": bias, "eps": 1e-5, "p": 0.5, "seed": 0, "training": True,
                                    "momentum": 0.1, **_probe_quantization(kernel, x.device)})


def _probe_quantization(kernel: Kernel, device: torch.device) -> dict:
    """A quantized-output kind's probe arguments: its first declared format, a dynamic scale where it takes one
    (else a static scale of 1); {} for the other kinds."""
    if not kernel.record.quantized:
        return {}
    static = "dynamic" not in kernel.quantization.scales
    return {"quant_dtype": judged_dtype(kernel),
            "scale": torch.ones(1, dtype=torch.float32, device=device) if static else None}


def judged_dtype(kernel: Kernel) -> torch.dtype | None:
    """The dtype a probe's first output must have: a quantized-output kind's q is in its first declared format
    (the one probed); None (x's) for the other kinds."""
    return getattr(torch, kernel.quantization.formats[0]) if kernel.record.quantized else None


def first_output(out: object) -> object:
    """The normalized output: a fused kind returns the pair (y, residual_out)."""
    return out[0] if isinstance(out, (tuple, list)) and out else out


def _probe_input(kernel: Kernel, dtype: torch.dtype, device: str) -> torch.Tensor:
    shape = _INSTANCE_PROBE_SHAPE if kernel.record.scope == "instance" else _PROBE_SHAPE
    values = torch.arange(math.prod(shape), dtype=torch.float32, device=device).reshape(shape)
    return torch.sin(values).to(dtype)


_UNSUPPORTED = re.compile(r"not implemented|unsupported|not supported|does not support|doesn't support|"
                          r"isn't supported|\bonly\b|expected .*(float|dtype)", re.IGNORECASE)
_DTYPE_WORDS = re.compile(r"dtype|scalar type|half|float16|bfloat16|fp16|bf16|float32|fp32", re.IGNORECASE)


def unsupported_dtype(fault: guard.KernelFault) -> bool:
    """Whether the probe's fault is a clear "this dtype is not supported" error: the kernel raised
    NotImplementedError, or a TypeError naming a dtype, or an error whose message names a dtype and says it is
    unsupported or not implemented (torch's ``"LayerNormKernelImpl" not implemented for 'Half'``). Any other
    fault is the kernel's."""
    cause = fault.__cause__
    if fault.reason != "raised" or cause is None:
        return False
    text = str(cause)
    names_a_dtype = bool(_DTYPE_WORDS.search(text))
    return isinstance(cause, NotImplementedError) or (names_a_dtype and (isinstance(cause, TypeError)
                                                                        or bool(_UNSUPPORTED.search(text))))


_SIZE_LIMIT = re.compile(r"exceed|too (large|wide|big|long)|larger than|greater than|more than|maximum|max_|"
                         r"limit|at most|not supported|unsupported|n[o']t support|block ?size", re.IGNORECASE)


def refused_width(fault: guard.KernelFault) -> bool:
    """Whether a call's fault is a clear refusal of the row's width: the kernel raised an error whose message says a
    size exceeds a limit (Liger-Kernel's "n = 65537 exceeds the recommended Triton blocksize = 65536", Triton
    tutorial 05's "This layer norm doesn't support feature dim >= 64KB"), or NotImplementedError. Any other fault
    (an index error, a wrong answer) is the kernel's."""
    cause = fault.__cause__
    if fault.reason != "raised" or cause is None:
        return False
    return isinstance(cause, NotImplementedError) or bool(_SIZE_LIMIT.search(str(cause)))


def _forward_fault(kernel: Kernel, dtype: torch.dtype, device: str,
                   timeout: float = _PROBE_TIMEOUT_S) -> guard.KernelFault | None:
    """The fault of the kernel's forward in ``dtype`` on ``device`` (None when it computes there)."""
    x = _probe_input(kernel, dtype, device)
    try:
        out = guard.limited(kernel, lambda: kernel.fn(*probe_arguments(kernel, x)), timeout=timeout)
        y = first_output(out)
        guard.call(SimpleNamespace(name=kernel.name, fn=lambda: y), like=x, dtype=judged_dtype(kernel),
                   timeout=timeout)
    except guard.KernelFault as fault:
        return fault
    return None


def _residual_none_problem(kernel: Kernel, dtype: torch.dtype, device: str) -> str | None:
    """Why a kind with a residual cannot take residual=None, the call of a first layer ('' when the kernel returns
    its (y, residual_out) for it; None for a kind without a residual); the dropout + add kind reads its mask from
    residual_out against the residual, so it is always drawn with one."""
    record = kernel.record
    if not record.has_residual:
        return None
    if record.dropout:
        return "not drawn: the dropout + add kind's mask is read from residual_out against the residual"
    x = _probe_input(kernel, dtype, device)
    arguments = list(probe_arguments(kernel, x))
    arguments[record.signature.index("residual")] = None
    try:
        guard.call(kernel, *arguments, like=x, dtype=judged_dtype(kernel), returns=record.outputs,
                   timeout=_PROBE_TIMEOUT_S)
    except guard.KernelFault as fault:
        return f"refused: {fault}"
    return ""


def _mixes(kernel: Kernel, dtypes: tuple[torch.dtype, ...], device: str) -> tuple[tuple, dict[str, str]]:
    """(the parameter dtype mixes the kernel takes, {mix_name: why not} for the others): a mix is refused when its
    probe raises or times out (its output is not judged here: the claims check its values and dtype). Mixes whose
    x dtype is not among ``dtypes`` are neither: that dtype's own not-tested reason covers them."""
    if "weight" not in kernel.record.signature:
        return (), {}
    taken, reasons = [], {}
    for x_dtype, parameter_dtype in PARAMETER_MIXES:
        name = mix_name(x_dtype, parameter_dtype)
        if x_dtype not in dtypes:
            continue
        if kernel.parameter_dtypes == "same":
            reasons[name] = "declared: weight and bias only in x's dtype (parameter_dtypes='same')"
        else:
            x = _probe_input(kernel, x_dtype, device)
            try:
                guard.limited(kernel, lambda x=x, p=parameter_dtype: kernel.fn(*probe_arguments(kernel, x, p)),
                              timeout=_PROBE_TIMEOUT_S)
                taken.append((x_dtype, parameter_dtype))
            except guard.KernelFault as fault:
                reasons[name] = f"refused: {fault}"
    return tuple(taken), reasons


def _residual_mixes(kernel: Kernel, dtypes: tuple[torch.dtype, ...], device: str) -> tuple[tuple, dict[str, str]]:
    """(the residual dtype mixes a kind with a residual takes, {residual_mix_name: why not} for the others): as
    :func:`_mixes`, the probe's residual in the mix's dtype; x dtypes not among ``dtypes`` are neither."""
    record = kernel.record
    if not record.has_residual:
        return (), {}
    taken, reasons = [], {}
    for x_dtype, residual_dtype in RESIDUAL_MIXES:
        if x_dtype not in dtypes:
            continue
        if record.quantized:
            reasons[residual_mix_name(x_dtype, residual_dtype)] = (
                "not drawn: the residual dtype mixes are drawn for the add + norm and dropout + add + norm kinds")
            continue
        x = _probe_input(kernel, x_dtype, device)
        arguments = list(probe_arguments(kernel, x))
        at = record.signature.index("residual")
        arguments[at] = arguments[at].to(residual_dtype)
        try:
            guard.limited(kernel, lambda arguments=arguments: kernel.fn(*arguments), timeout=_PROBE_TIMEOUT_S)
            taken.append((x_dtype, residual_dtype))
        except guard.KernelFault as fault:
            reasons[residual_mix_name(x_dtype, residual_dtype)] = f"refused: {fault}"
    return tuple(taken), reasons


def _forward_problem(kernel: Kernel, dtype: torch.dtype, device: str) -> str:
    """Why the kernel cannot compute in ``dtype`` on ``device`` ('' when it can)."""
    fault = _forward_fault(kernel, dtype, device)
    return "" if fault is None else str(fault)


def _recorded_output(kernel: Kernel, dtype: torch.dtype, device: str,
                     strided: bool = False) -> tuple[torch.Tensor, object]:
    """(x requiring grad, the kernel's first output on it): one forward of the probe, recorded; ``strided``: x the
    probe's values in column-major memory (a non-contiguous x)."""
    x = _probe_input(kernel, dtype, device)
    if strided:
        x = x.transpose(0, -1).contiguous().transpose(0, -1)
    x.requires_grad_(True)
    return x, first_output(kernel.fn(*probe_arguments(kernel, x)))


def _differentiable_when_strided(kernel: Kernel, dtype: torch.dtype, device: str) -> bool:
    """Whether the kernel's output has a grad_fn for a non-contiguous x (the probe's has none for a contiguous one:
    a contiguous fast path that blocks the gradient, huggingface/candle#2168)."""
    try:
        _, y = guard.limited(kernel, lambda: _recorded_output(kernel, dtype, device, strided=True),
                             timeout=_PROBE_TIMEOUT_S)
    except guard.KernelFault:
        return False
    return isinstance(y, torch.Tensor) and y.grad_fn is not None


def _backward_problems(kernel: Kernel, dtype: torch.dtype, device: str) -> tuple[str, str, str]:
    """(why there is no backward, why no second derivative, the fault of a backward that exists); '' for none.

    There is no backward when the output has no ``grad_fn`` (a forward-only kernel), unless it has one for a
    non-contiguous x: then the gradient is blocked on some paths, a fault. A backward that exists but raises or gives
    NaN/inf is a fault (third item), not a missing backward: its claims run and report it.
    The first derivative is probed with a plain upstream gradient, as a training step passes it: a kernel
    that writes into it (a bug of its own, ``inputs_unmodified``) still has a backward to check.
    """

    def output() -> tuple[torch.Tensor, torch.Tensor]:
        return _recorded_output(kernel, dtype, device)

    def derivative(create_graph: bool) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = output()
        upstream = torch.ones_like(y, requires_grad=create_graph)
        return upstream, torch.autograd.grad(y, x, upstream, create_graph=create_graph)[0]

    if kernel.record.quantized:  # torch tracks a float8 cast, but no claim differentiates through a rounding
        return "no backward: the quantized-output kinds have no gradient contract", "no backward", ""
    try:  # under the kernel's time limit: a hung backward must not hang the run
        _, y = guard.limited(kernel, output, timeout=_PROBE_TIMEOUT_S)
    except guard.KernelFault:  # the forward's fault: the claims report it when they call the kernel
        return "", "no backward: the forward faults", ""
    if not isinstance(y, torch.Tensor) or y.grad_fn is None:
        if _differentiable_when_strided(kernel, dtype, device):
            return ("", "no backward that runs", "the output has a grad_fn for a non-contiguous x but none for a "
                    "contiguous one: a path that blocks the gradient")
        return (f"no backward: the output of {kernel.name} has no grad_fn (a forward-only kernel)",
                "no backward", "")
    try:
        _, dx = guard.limited(kernel, lambda: derivative(False), timeout=_PROBE_TIMEOUT_S)
    except guard.KernelFault as fault:
        return "", "no backward that runs", f"the backward faults: {fault}"
    if dx is None or not bool(torch.isfinite(dx).all()):
        return "", "no backward that runs", "the backward gave no finite gradient for finite input"
    try:
        upstream, dx = guard.limited(kernel, lambda: derivative(True), timeout=_PROBE_TIMEOUT_S)
        (second,) = torch.autograd.grad(dx, upstream, torch.ones_like(dx), allow_unused=True)
    except Exception as error:
        return "", f"backward not differentiable: {one_line(error)}", ""
    if second is None:
        return "", "backward not differentiable: its gradient does not depend on the upstream gradient in autograd", ""
    return "", "", ""


def device_of(kernel: Kernel) -> str:
    """The device the suite runs ``kernel`` on, and makes its tensors on: its declared device, else CUDA where
    there is one and the kernel's forward works there, else the CPU."""
    if kernel.device is not None:
        return kernel.device
    return "cuda" if _runs_on_cuda(kernel) else "cpu"


def _runs_on_cuda(kernel: Kernel) -> bool:
    """Whether the kernel's float32 forward works on CUDA; a CUDA reported available that cannot make the probe's
    tensor (a CPU-only build, no driver) counts as none."""
    if not torch.cuda.is_available():
        return False
    try:
        return not _forward_problem(kernel, torch.float32, "cuda")
    except (RuntimeError, AssertionError):
        return False


@functools.cache
def custom_backward(kernel: Kernel) -> bool:
    """Whether the kernel's output comes from a custom ``torch.autograd.Function`` (its grad_fn a
    ``BackwardCFunction``), probed once in its first working dtype; False where the probe fails (the claims report
    the fault)."""
    caps = discover(kernel)
    dtype = next((d for d in caps.dtypes if dtype_name(d) not in caps.faults), None)
    if dtype is None:
        return False

    try:
        _, y = guard.limited(kernel, lambda: _recorded_output(kernel, dtype, caps.device), timeout=_PROBE_TIMEOUT_S)
    except guard.KernelFault:
        return False
    return isinstance(getattr(y, "grad_fn", None), torch.autograd.function.BackwardCFunction)


@functools.cache
def discover(kernel: Kernel) -> Capabilities:
    """Probe ``kernel`` (once; the result is cached per kernel)."""
    device = device_of(kernel)
    reasons: dict[str, str] = {}
    faults: dict[str, guard.KernelFault] = {}
    if kernel.dtypes is not None:
        dtypes = tuple(kernel.dtypes)
    else:
        found = []
        for dtype in PROBED_DTYPES:
            fault = _forward_fault(kernel, dtype, device)
            if fault is not None and unsupported_dtype(fault):
                reasons[dtype_name(dtype)] = f"unsupported: {fault}"
                continue
            if fault is not None:
                faults[dtype_name(dtype)] = fault
            found.append(dtype)
        dtypes = tuple(found)
    working = [d for d in dtypes if dtype_name(d) not in faults]
    probe_dtype = torch.float32 if torch.float32 in working else (working or [*dtypes, torch.float32])[0]
    backward_reason, double_reason, backward_fault = _backward_problems(kernel, probe_dtype, device)
    mixes, mix_reasons = _mixes(kernel, dtypes, device)
    residual_mixes, residual_mix_reasons = _residual_mixes(kernel, dtypes, device)
    return Capabilities(device=device, dtypes=dtypes, backward=not backward_reason,
                        double_backward=not double_reason, backward_reason=backward_reason,
                        double_backward_reason=double_reason, dtype_reasons=reasons, faults=faults,
                        backward_fault=backward_fault, mixes=mixes,
                        mix_reasons={**mix_reasons, **residual_mix_reasons}, residual_mixes=residual_mixes,
                        residual_none_reason=_residual_none_problem(kernel, probe_dtype, device))


def unusable(kernel: Kernel, timeout: float = _PROBE_TIMEOUT_S) -> str:
    """Why the kernel runs in no dtype at all ('' when its forward returns a tensor in at least one): every
    probed dtype unsupported, raising or not returning within ``timeout`` seconds (normverify run --timeout). Cheap
    when the kernel works: float32 is tried first."""
    if kernel.dtypes is not None:
        return ""
    device = device_of(kernel)
    problems = []
    for dtype in PROBED_DTYPES:
        fault = _forward_fault(kernel, dtype, device, timeout)
        if fault is None or fault.reason not in ("raised", "timeout"):
            return ""
        problems.append(f"{dtype_name(dtype)}: {one_line(fault.__cause__ or fault)}")
    return f"kernel {kernel.name} runs in no dtype ({'; '.join(problems)})"
