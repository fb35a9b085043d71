"""The kernel record: one kernel under test, its kind and declarations, and a named built-in SPEC.

A kernel is a plain callable with one of three contracts, normalizing over the last dimension:

    layernorm: fn(x, weight, bias, eps) -> y      weight, bias: shape [d] or None
    rmsnorm:   fn(x, weight, eps) -> y            weight: shape [d] or None
    dropout:   fn(x, p, seed) -> y                inverted dropout, deterministic for a seed

This module imports no torch (``dtypes`` holds torch dtypes, but only a kernel's maker needs torch),
so the record can be read by the command's listing and the reports without loading it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from core import kinds
from core.errors import UsageError
from proofs.reduction import Reduction

if TYPE_CHECKING:
    import torch

KINDS = kinds.NAMES  # the records: core.kinds
RESIDUAL_DTYPES = ("storage", "float32")
# What y of a kind with a residual add normalizes: the residual_out it returns (the contract), or "float32_sum", the
# float32 sum x + residual before residual_out's rounding to its dtype (flash-attention's kernels: y from the sum
# they hold in registers, residual_out stored rounded to a 16-bit residual's dtype).
NORMALIZED_INPUTS = ("residual_out", "float32_sum")
IN_PLACE_INPUTS = ("residual", "dy")
# The dtype of the output when weight/bias come in another dtype than x: "input" (x's dtype, torch's rule:
# F.layer_norm / rms_norm / group_norm), "promoted" (torch.promote_types(x, weight): HF LlamaRMSNorm's
# weight * x_hat.to(x.dtype)), "weight" (the weight's dtype: HF T5LayerNorm). Same-dtype inputs give x's dtype in all.
OUTPUT_DTYPE_RULES = ("input", "promoted", "weight")
# Which dtypes a kernel takes weight/bias in: "any" (x's, or another: float32 with 16-bit x, 16-bit with float32 x),
# or "same" (only x's dtype, declared: the mixed-dtype claims are then not checked, and the report says so).
PARAMETER_DTYPES = ("any", "same")
NO_GRADIENT_PARAMETERS = ("weight", "bias")
BACKWARD_PRECISIONS = ("float32", "storage")
STORAGE_BACKWARD = "storage_statistics_backward"  # the convention backward_precision="storage" declares
# BatchNorm's running statistics (the batch-statistics kinds): the momentum's meaning, torch's new = (1 - m) old +
# m batch or Keras' new = m old + (1 - m) batch; and the variance they keep, unbiased (n/(n - 1) times the batch's
# population variance, torch) or the population variance itself
MOMENTUM_CONVENTIONS = ("torch", "keras")
RUNNING_VARIANCES = ("unbiased", "biased")
# the precision the per-channel affine map y = x a + b (a = gamma rstd, b = beta - mean a) of GroupNorm and
# BatchNorm is applied in: "float32" (the statistics' accumulation dtype: the error model's normalization) or
# "storage" (a and b rounded to x's dtype first: ATen's CPU batch_norm and CUDA group_norm with float16/bfloat16 x)
AFFINE_PRECISIONS = ("float32", "storage")
# what Kernel.on_cuda may replace
DEVICE_DECLARATIONS = ("backward_precision", "conventions", "reduction", "flush_to_zero", "affine_precision")
# bitwise properties a kernel may declare (True: a contract), each measured and reported when undeclared
BITWISE_DECLARATIONS = ("batch_invariant", "deterministic")
# The quantized-output kinds' declarations (:class:`Quantization`): the formats (torch dtype names, the keys of
# proofs.quantization.FORMATS), how the scale is applied, what y is quantized, INT8's rounding and lowest value.
QUANT_FORMATS = ("float8_e4m3fn", "float8_e5m2", "int8")
QUANT_SCALES = ("static", "dynamic")
SCALE_CONVENTIONS = ("divide", "multiply")
QUANTIZED_VALUES = ("storage", "float32")
INT8_ROUNDINGS = ("half_even", "half_away")
INT8_MINIMUMS = (-128, -127)


@dataclass(frozen=True)
class Quantization:
    """How a kernel of a quantized-output kind (rmsnorm_quant, add_rmsnorm_quant) quantizes its norm's output y.

    ``formats``: the target dtypes it takes as ``quant_dtype`` (names of :data:`QUANT_FORMATS`); ``scales``: "static"
    (a given float32 scale tensor of one element) and/or "dynamic" (``scale=None``: one scale per row, computed and
    returned, shape [..., 1] float32). ``scale_convention``: "divide", q = Q(y / scale) and y ~ q scale, the dynamic
    scale max(amax / fmax, minimum_scale) (vLLM's, TransformerEngine's scale_inv); "multiply", q = Q(y * scale) and
    y ~ q / scale, the dynamic scale the inverse of that. ``quantizes``: which y both amax and Q are taken of,
    "storage" (the norm's float32 output rounded once to x's dtype, as an unfused norm then quantize does) or
    "float32" (the float32 output itself). Q rounds to the nearest value of the format, ties to even (FP8; INT8 with
    ``int8_rounding="half_even"``, or "half_away" from zero), and saturates at the format's largest value fmax (448,
    57344, 127) and lowest (-fmax; INT8 ``int8_minimum``, -128 or -127). ``minimum_scale``: the floor of the
    dynamic (divide-convention) scale, which an all-zero row gets (0: none; its q is then 0)."""

    formats: tuple[str, ...] = QUANT_FORMATS
    scales: tuple[str, ...] = QUANT_SCALES
    scale_convention: str = "divide"
    quantizes: str = "storage"
    int8_rounding: str = "half_even"
    int8_minimum: int = -128
    minimum_scale: float = 0.0

    def problem(self) -> str:
        """Why the declaration is malformed ('' when it is not)."""
        if not self.formats or not set(self.formats) <= set(QUANT_FORMATS):
            return f"formats must be some of {', '.join(QUANT_FORMATS)}"
        if not self.scales or not set(self.scales) <= set(QUANT_SCALES):
            return f"scales must be some of {', '.join(QUANT_SCALES)}"
        for name, allowed in (("scale_convention", SCALE_CONVENTIONS), ("quantizes", QUANTIZED_VALUES),
                              ("int8_rounding", INT8_ROUNDINGS), ("int8_minimum", INT8_MINIMUMS)):
            if getattr(self, name) not in allowed:
                return f"{name} must be one of {', '.join(map(str, allowed))}"
        if not self.minimum_scale >= 0.0:
            return "minimum_scale must be a number >= 0"
        return ""

    def as_json(self) -> dict:
        return {"formats": list(self.formats), "scales": list(self.scales), "scale_convention": self.scale_convention,
                "quantizes": self.quantizes, "int8_rounding": self.int8_rounding, "int8_minimum": self.int8_minimum,
                "minimum_scale": self.minimum_scale}


@dataclass(frozen=True)
class Kernel:
    """One kernel under test.

    ``weight_offset`` declares the weight convention: the kernel scales by
    ``weight_offset + weight`` (0 for torch/Llama, 1 for Gemma's ``(1 + w)``), and is checked
    against the derivation with that effective weight. ``device``/``dtypes`` are declarations;
    ``None`` means "discover by probing" (:mod:`core.capabilities`).

    ``backward_precision`` declares what the backward accumulates in for float16/bfloat16 data:
    ``"float32"`` (the default, what mixed-precision kernels do) or ``"storage"`` (statistics or
    partial sums kept in the storage dtype, as torch's CPU ``layer_norm`` keeps mean and rstd);
    the backward is then checked against the error model with u_acc = u_storage. The declaration
    is shown in every result and report, so a weaker contract is never silent.

    ``conventions`` declares mechanisms the kernel follows on purpose (ids of
    ``proofs.mechanisms.CONVENTIONS``, e.g. ``("double_rounding",)`` for Llama's casting): its forward
    and backward are checked against those mechanisms' derived models instead of the correct one
    (properties.bounds.diagnosis). ``"storage_statistics_backward"`` and ``backward_precision="storage"`` are
    the same declaration; either sets the other.

    What a kernel does by design, declared and then checked as declared: ``no_gradient`` names parameters
    (``"weight"``, ``"bias"``) it returns no gradient for (a frozen weight): the gradient claims ask for and
    check the others (dx always), and the declaration is in every result and report; ``in_place=("dy",)``
    declares that its backward writes dx into the upstream gradient's buffer (Liger's ``in_place=True``):
    ``inputs_unmodified`` then checks that dy holds dx afterwards instead of that dy is unchanged.

    The fused residual kinds (``add_layernorm``, ``add_rmsnorm``, ``dropout_add_layernorm``) declare
    ``residual_dtype``: residual_out kept in the residual's dtype (``"storage"``) or in ``"float32"``
    (flash-attention's ``residual_in_fp32``); ``in_place=("residual",)`` declares that the kernel writes
    residual_out into its residual argument (vLLM's ``fused_add_rms_norm``). The suite checks what is declared.

    Parameters in another dtype than x (float32 weight/bias with 16-bit x under autocast, 16-bit ones with float32
    x): ``output_dtype`` declares the output's dtype then (:data:`OUTPUT_DTYPE_RULES`, default torch's rule, x's
    dtype); ``parameter_dtypes="same"`` declares that the kernel takes weight/bias only in x's dtype.

    ``on_cuda`` declares what differs when the kernel runs on a CUDA device: (field, value) pairs of the
    declarations in :data:`DEVICE_DECLARATIONS` that replace the kernel's own there (torch's built-ins: ATen's CUDA
    kernels keep other statistics than its CPU ones). The device is the one the kernel runs on, the device of the
    tensors the suite gives it (core.registry.resolve applies :meth:`for_device` with core.capabilities.device_of),
    never whether this host has a GPU: a CPU run on a GPU host keeps the CPU declarations.

    ``reduction`` declares how the kernel sums a row for its statistics (:class:`proofs.reduction.Reduction`: runs,
    lanes, cascade, blocks; two-pass or Welford), read from its source: the error model then bounds each sum by the
    shape's depth D instead of d - 1 (any order). None (the default) keeps the order-agnostic bound: a shape is never
    assumed. A declaration the kernel does not follow is caught like any other wrong claim (its bound is tighter).
    A declared exact tree (``Reduction.exact_tree``) is verified where it is used (core.trees): ``statistics`` is a
    callable ``(x, eps) -> (mean or None, rstd)``, float32 per row as the kernel computes them for x with no weight or
    bias, that the tree's emulation is compared with bit for bit; without it the tree is not used, only its shape.

    ``flush_to_zero`` declares that the kernel's arithmetic flushes subnormal operands and results to zero (compiled
    CUDA code: Triton's ``tl.sqrt``/``rsqrt``/division, ``--use_fast_math``): the error model's underflow term is
    then the smallest normal number instead of half the smallest subnormal (proofs.error_model.underflow), and the
    draws that exist for gradual underflow (the smallest end of the exponent range, where var + eps and eps / a^2
    reach the subnormal range) are left out, as every result of such a kernel states; the rest is checked as usual.

    ``normalizes`` (the residual add kinds) declares what y normalizes: ``"residual_out"`` (the contract: the stream
    the next layer receives) or ``"float32_sum"``, x + residual summed in float32 before residual_out is rounded to
    its dtype, as flash-attention's kernels do with a 16-bit residual: y and the gradients are then checked at
    s = fl32(x + residual) (y = N(s), d = J_N(s)^T dy + dh: the function the kernel computes), residual_out as usual.

    BatchNorm kernels (kind ``batchnorm``) declare how they keep their running statistics: ``momentum_convention``
    (:data:`MOMENTUM_CONVENTIONS`: torch's ``new = (1 - m) old + m batch``, the default, or Keras' ``new = m old +
    (1 - m) batch``) and ``running_variance`` (:data:`RUNNING_VARIANCES`: the unbiased batch variance, torch's, or
    the population variance the forward normalizes with); bn.running_statistics checks the update declared. They and
    GroupNorm kernels may declare ``affine_precision="storage"`` (:data:`AFFINE_PRECISIONS`): y = x a + b with
    a = gamma rstd and b = beta - mean a rounded to x's dtype, which the forward's bound then covers
    (properties.bounds.tolerance.forward).

    ``batch_invariant`` and ``deterministic`` (norm kinds; None, the default: undeclared) declare bitwise properties
    serving stacks depend on: the same row gives the same bits whatever the batch it is called in and its position
    there (y, residual_out, dx, d residual; the ``*.batch_invariance`` claims), and repeated identical calls give the
    same bits (outputs, dx, dweight, dbias, d residual; ``*.determinism``). Declared True, the claim is a contract and
    a violation fails; undeclared or declared False, the suite measures it and reports the verdict with its evidence
    as a finding (a pass that says "batch invariant: no"), never a failure.

    ``quantization`` (the quantized-output kinds only; None there means the default :class:`Quantization`) declares
    the formats, scales, scale convention and quantized values the ``*_quant.*`` claims check.

    ``compiles_per_width`` declares a cost, not a behaviour: every new row width d costs the kernel a compilation (a
    JIT specialization or an autotuning per d, an Inductor recompile). In the ci and dev profiles its tests then draw
    their widths from properties.draws.strategies.WIDTH_PALETTE (20 of the 92 candidate widths, each kind of edge
    kept) instead of all, so that its conformance run fits a GPU check; the thorough profile draws all, and every
    result and report states the declaration.

    ``second_derivatives`` declares that a kernel whose backward is a custom ``torch.autograd.Function`` means it to
    be differentiated again (an explicit double backward, as kernels/functional.py's ``_NormBackward``). Autograd
    differentiates a custom backward's torch operations as written, with what its forward saved held constant, and
    most are meant for one differentiation (torch's ``once_differentiable``): undeclared, such a kernel's
    ``ln/rms.second_order`` is skipped with that reason. A kernel built from differentiable torch operations is
    checked whatever it declares.
    """

    name: str
    kind: str
    fn: Callable
    spec: str = ""
    weight_offset: float = 0.0
    device: str | None = None
    dtypes: tuple[torch.dtype, ...] | None = None
    description: str = ""
    backward_precision: str = "float32"
    conventions: tuple[str, ...] = ()
    no_gradient: tuple[str, ...] = ()
    residual_dtype: str = "storage"
    in_place: tuple[str, ...] = ()
    output_dtype: str = "input"
    parameter_dtypes: str = "any"
    reduction: Reduction | None = None
    statistics: Callable | None = None
    on_cuda: tuple[tuple[str, object], ...] = ()
    flush_to_zero: bool = False
    normalizes: str = "residual_out"
    momentum_convention: str = "torch"
    running_variance: str = "unbiased"
    affine_precision: str = "float32"
    batch_invariant: bool | None = None
    deterministic: bool | None = None
    quantization: Quantization | None = None
    compiles_per_width: bool = False
    second_derivatives: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise UsageError(f"kernel {self.name!r}: kind must be one of {', '.join(KINDS)}, not {self.kind!r}")
        if self.record.quantized:
            declared = self.quantization or Quantization()
            if not isinstance(declared, Quantization) or declared.problem():
                why = declared.problem() if isinstance(declared, Quantization) else "a core.kernel.Quantization"
                raise UsageError(f"kernel {self.name!r}: quantization: {why}")
            object.__setattr__(self, "quantization", declared)
        elif self.quantization is not None:
            raise UsageError(f"kernel {self.name!r}: quantization is a declaration of the quantized-output kinds, "
                             f"not of {self.kind}")
        if self.normalizes not in NORMALIZED_INPUTS or (self.normalizes != "residual_out"
                                                        and (self.record.prologue != "add" or self.record.quantized)):
            raise UsageError(f"kernel {self.name!r}: normalizes must be one of {', '.join(NORMALIZED_INPUTS)}, and "
                             f"other than residual_out only for the residual add kinds, not {self.kind}")
        if not self.record.has_residual and (self.residual_dtype != "storage" or "residual" in self.in_place):
            raise UsageError(f"kernel {self.name!r}: residual_dtype and an in-place residual are declarations of the "
                             f"kinds with a residual, not of {self.kind}")
        if (self.momentum_convention not in MOMENTUM_CONVENTIONS or self.running_variance not in RUNNING_VARIANCES
                or (not self.record.batch_statistics
                    and (self.momentum_convention, self.running_variance) != ("torch", "unbiased"))):
            raise UsageError(f"kernel {self.name!r}: momentum_convention (one of {', '.join(MOMENTUM_CONVENTIONS)}) "
                             f"and running_variance (one of {', '.join(RUNNING_VARIANCES)}) are declarations of "
                             f"BatchNorm kernels, not of {self.kind}")
        if self.affine_precision not in AFFINE_PRECISIONS or (self.affine_precision != "float32"
                                                              and not self.record.per_channel):
            raise UsageError(f"kernel {self.name!r}: affine_precision (one of {', '.join(AFFINE_PRECISIONS)}) is a "
                             f"declaration of the kinds with per-channel weight and bias, not of {self.kind}")
        for name in BITWISE_DECLARATIONS:
            if getattr(self, name) not in (True, False, None):
                raise UsageError(f"kernel {self.name!r}: {name} must be True, False or None (undeclared), "
                                 f"not {getattr(self, name)!r}")
        if self.backward_precision not in BACKWARD_PRECISIONS:
            raise UsageError(f"kernel {self.name!r}: backward_precision must be one of "
                             f"{', '.join(BACKWARD_PRECISIONS)}, not {self.backward_precision!r}")
        if not set(self.no_gradient) <= set(NO_GRADIENT_PARAMETERS):
            raise UsageError(f"kernel {self.name!r}: no_gradient must be a subset of {NO_GRADIENT_PARAMETERS}")
        if self.residual_dtype not in RESIDUAL_DTYPES or not set(self.in_place) <= set(IN_PLACE_INPUTS):
            raise UsageError(f"kernel {self.name!r}: residual_dtype must be one of {', '.join(RESIDUAL_DTYPES)} and "
                             f"in_place a subset of {IN_PLACE_INPUTS}")
        if self.output_dtype not in OUTPUT_DTYPE_RULES or self.parameter_dtypes not in PARAMETER_DTYPES:
            raise UsageError(f"kernel {self.name!r}: output_dtype must be one of {', '.join(OUTPUT_DTYPE_RULES)} and "
                             f"parameter_dtypes one of {', '.join(PARAMETER_DTYPES)}")
        unknown = [name for name, _ in self.on_cuda if name not in DEVICE_DECLARATIONS]
        if unknown:
            raise UsageError(f"kernel {self.name!r}: on_cuda may declare {', '.join(DEVICE_DECLARATIONS)}, "
                             f"not {unknown[0]!r}")
        conventions = tuple(self.conventions)
        if conventions:
            from proofs.mechanisms import CONVENTIONS

            unknown = [c for c in conventions if c not in CONVENTIONS]
            if unknown:
                raise UsageError(f"kernel {self.name!r}: unknown convention {unknown[0]!r}: expected one of "
                                 f"{', '.join(CONVENTIONS)}")
        modelled = [c for c in conventions if c != STORAGE_BACKWARD]
        if modelled and not self.record.models_conventions:
            raise UsageError(f"kernel {self.name!r}: {self.kind} kernels cannot declare conventions "
                             f"({', '.join(modelled)}): their models are of a norm over rows with one weight vector")
        storage = self.backward_precision == "storage" or STORAGE_BACKWARD in conventions
        if storage and STORAGE_BACKWARD not in conventions:
            conventions += (STORAGE_BACKWARD,)
        object.__setattr__(self, "conventions", conventions)
        object.__setattr__(self, "backward_precision", "storage" if storage else self.backward_precision)

    def for_device(self, device: str) -> Kernel:
        """This kernel as it runs on ``device`` ("cpu", "cuda", "cuda:N"): on a CUDA device with ``on_cuda``
        declared, those declarations in place of its own (a storage backward's convention goes with its
        backward_precision) and the device fixed; otherwise itself."""
        if not self.on_cuda or not str(device).startswith("cuda"):
            return self
        declared = dict(self.on_cuda)
        if "backward_precision" in declared and "conventions" not in declared:
            declared["conventions"] = tuple(c for c in self.conventions if c != STORAGE_BACKWARD)
        return replace(self, device=str(device), on_cuda=(), **declared)

    def as_plain_norm(self) -> Kernel:
        """This kernel as one of its norm's plain kind (``record.plain_norm``: LayerNorm or RMSNorm over its rows),
        for the bounds and models that are a plain norm's: the declarations only its own kind may make (the
        residual's, BatchNorm's running statistics, the per-channel affine precision, the output's quantization)
        back to their defaults, every other declaration (precisions, conventions, reduction, flush-to-zero) kept."""
        return replace(self, kind=self.record.plain_norm, residual_dtype="storage", in_place=(),
                       normalizes="residual_out", momentum_convention="torch", running_variance="unbiased",
                       affine_precision="float32", quantization=None)

    def as_json(self) -> dict:
        """The kernel's identity and declarations, as the results JSON records them."""
        return {"spec": self.spec, "name": self.name, "kind": self.kind, "weight_offset": self.weight_offset,
                "backward_precision": self.backward_precision, "conventions": list(self.conventions),
                "residual_dtype": self.residual_dtype, "in_place": list(self.in_place),
                "no_gradient": list(self.no_gradient), "output_dtype": self.output_dtype,
                "parameter_dtypes": self.parameter_dtypes,
                "reduction": None if self.reduction is None else self.reduction.as_json(),
                "flush_to_zero": self.flush_to_zero, "normalizes": self.normalizes,
                "momentum_convention": self.momentum_convention, "running_variance": self.running_variance,
                "affine_precision": self.affine_precision,
                "batch_invariant": self.batch_invariant, "deterministic": self.deterministic,
                "quantization": None if self.quantization is None else self.quantization.as_json(),
                "compiles_per_width": self.compiles_per_width, "second_derivatives": self.second_derivatives,
                "description": self.description}

    @property
    def record(self) -> kinds.Kind:
        """The record of the kernel's kind (core.kinds): its signature, norm, prologue, outputs, claim prefix."""
        return kinds.KINDS[self.kind]

    @property
    def prefix(self) -> str:
        return self.record.prefix

    @property
    def families(self) -> tuple[str, ...]:
        """The claim families (id prefixes) checked on this kernel: its kind record's."""
        return self.record.families


@dataclass(frozen=True)
class Builtin:
    """A named SPEC shipped with normverify. ``unavailable()`` returns why it cannot run here, or None."""

    name: str
    description: str
    load: Callable[[], list[Kernel]]
    unavailable: Callable[[], str | None] = lambda: None
