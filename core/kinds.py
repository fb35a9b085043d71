"""The kind records: one declarative entry per kind of kernel, from which everything kind-specific is derived.

In the spirit of PyTorch's OpInfo, a :class:`Kind` says what a kernel of that kind takes and returns, and which
norm it applies to what: the argument builders (:meth:`Kind.arguments`), the claim-id prefix and the claim
families, the inputs with a gradient, the fixtures a conformance test runs over, and the kind inferred from a
function's parameter names all come from here. Nothing outside this module compares a kind's name
(tests/test_architecture.py); the derivation-side facts (oracle, VJP, error terms) live in proofs, keyed by
:attr:`Kind.norm` ("ln" or "rms").

Every norm kind is a prologue, then the plain norm at the prologue's output h, over rows:

    layernorm              fn(x, weight, bias, eps) -> y                      h = x
    rmsnorm                fn(x, weight, eps) -> y                            h = x
    add_layernorm          fn(x, residual, weight, bias, eps) -> (y, residual_out)        h = x + residual
    add_rmsnorm            fn(x, residual, weight, eps) -> (y, residual_out)              h = x + residual
    dropout_add_layernorm  fn(x, residual, weight, bias, eps, p, seed) -> (y, residual_out)
                                                                              h = residual + dropout(x)
    groupnorm              fn(x, num_groups, weight, bias, eps) -> y          x [N, C, *]: the rows are the
                                                                              groups' (C/G) x spatial elements,
                                                                              weight and bias per channel
    batchnorm              fn(x, running_mean, running_var, weight, bias, training, momentum, eps) -> y
                                                                              x [N, C, *]: the rows are the
                                                                              channels' N x spatial elements
                                                                              (training; eval: the running
                                                                              statistics), weight and bias per
                                                                              channel, the running buffers updated
                                                                              in place in training
    instancenorm           the same signature (F.instance_norm's)             x [N, C, *]: the rows are each sample's
                                                                              channels' spatial elements (training;
                                                                              eval: the running statistics)
    channel_layernorm      fn(x, weight, bias, eps) -> y                      x [N, C, *]: the rows are the samples'
                                                                              C x spatial elements (nn.LayerNorm over
                                                                              (C, *)), weight and bias [C, *]
    dropout                fn(x, p, seed) -> y                                (no norm: inverted dropout)
    layernorm_quant        fn(x, weight, bias, eps, scale, quant_dtype) -> (q, scale)         h = x
    rmsnorm_quant          fn(x, weight, eps, scale, quant_dtype) -> (q, scale)               h = x
    add_rmsnorm_quant      fn(x, residual, weight, eps, scale, quant_dtype) -> (q, scale, residual_out)
                                                                              h = x + residual
                                                                              y = LN(h) / RMS(h) quantized to
                                                                              quant_dtype
                                                                              (float8_e4m3fn, float8_e5m2, int8):
                                                                              with the given scale (static) or
                                                                              per row from amax (scale None:
                                                                              dynamic, the scales returned)

y = N(h) over the last axis of the rows (the grouped view for GroupNorm, the channel-major view [C, N S] for
BatchNorm: its ``scope``), residual_out = h in the declared residual dtype. This module imports no torch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# The roles an argument of a kind's signature can play; the strategies' examples are dicts keyed by them.
ROLES = ("x", "residual", "num_groups", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps",
         "p", "seed", "scale", "quant_dtype")
# Inputs a gradient is taken for, in this order, where the signature has them.
DIFFERENTIABLE = ("x", "residual", "weight", "bias")
PROLOGUES = ("", "add", "dropout_add")
# What one row of the norm's statistics holds: the last axis ("row"), or of x [N, C, *]: one sample ("sample",
# LayerNorm over (C, *)), a group of channels of one sample ("group", GroupNorm), one channel of one sample
# ("instance", InstanceNorm) or one channel over the whole batch ("batch", BatchNorm in training mode).
SCOPES = ("row", "sample", "group", "instance", "batch")


@dataclass(frozen=True)
class Kind:
    """One kind of kernel.

    ``signature``: the roles of its positional arguments, in order (:data:`ROLES`); ``norm``: the norm it applies,
    "ln" (LayerNorm) or "rms" (RMSNorm), None for dropout; ``prologue``: what forms the norm's input h from the
    arguments ("" h = x; "add" h = x + residual; "dropout_add" h = residual + dropout(x)); ``outputs``: what a call
    returns, one tensor ("y",), the pair ("y", "residual_out"), or for the quantized-output kinds (a ``quant_dtype``
    in the signature) the quantized y and its scales, ("q", "scale") and ("q", "scale", "residual_out"); ``scope``:
    what a row of the norm's statistics holds (:data:`SCOPES`): the last axis, GroupNorm's groups of channels
    ([N, G, (C/G) S], per-channel weight and bias) or BatchNorm's channels over the batch ([C, N S], per-channel
    weight and bias); ``prefix``: its claim ids' prefix; ``also_checks``: further claim families checked on its
    kernels (LayerNorm's kernels build the Post-LN blocks of ``blocks.*``); ``names``: the contract's parameter names
    where they differ from the roles (F.instance_norm's ``use_input_stats`` for ``training``), which :func:`infer`
    reads."""

    name: str
    prefix: str
    signature: tuple[str, ...]
    norm: str | None
    prologue: str = ""
    outputs: tuple[str, ...] = ("y",)
    scope: str = "row"
    also_checks: tuple[str, ...] = ()
    description: str = ""
    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = [role for role in self.signature if role not in ROLES]
        if (unknown or self.prologue not in PROLOGUES or self.norm not in ("ln", "rms", None)
                or self.scope not in SCOPES):
            raise ValueError(f"kind {self.name}: malformed record ({unknown or self.prologue or self.norm!r}, "
                             f"scope {self.scope!r})")

    @property
    def parameter_names(self) -> tuple[str, ...]:
        """The contract's parameter names: ``names``, or the roles of the signature."""
        return self.names or self.signature

    @property
    def families(self) -> tuple[str, ...]:
        """The claim families (id prefixes) checked on a kernel of this kind."""
        return (self.prefix, *self.also_checks)

    @property
    def has_bias(self) -> bool:
        return "bias" in self.signature

    @property
    def grouped(self) -> bool:
        """GroupNorm's scope: the rows are groups of channels of one sample, [N, G, (C/G) S]."""
        return self.scope == "group"

    @property
    def batch_statistics(self) -> bool:
        """BatchNorm's scope: the rows are channels over the batch, [C, N S]: the samples are coupled."""
        return self.scope == "batch"

    @property
    def running_statistics(self) -> bool:
        """Whether the kind keeps running statistics in the buffers ``running_mean`` and ``running_var`` (updated in
        place in training mode, normalized with in eval mode): BatchNorm, InstanceNorm."""
        return "running_mean" in self.signature

    @property
    def per_channel(self) -> bool:
        """Whether weight and bias are per channel of x [N, C, *] (GroupNorm, InstanceNorm, BatchNorm), not per
        element of a row or of a sample."""
        return self.scope in ("group", "instance", "batch")

    @property
    def is_norm(self) -> bool:
        return self.norm is not None

    @property
    def quantized(self) -> bool:
        """Whether the kind returns its norm's output quantized (to the ``quant_dtype`` argument, with the ``scale``
        argument or per-row scales it returns) instead of y: layernorm_quant, rmsnorm_quant, add_rmsnorm_quant."""
        return "quant_dtype" in self.signature

    @property
    def plain(self) -> bool:
        """A norm over the last axis with no prologue, returning y: LayerNorm, RMSNorm."""
        return self.is_norm and not self.prologue and self.scope == "row" and not self.quantized

    @property
    def models_conventions(self) -> bool:
        """Whether a kernel of this kind can declare conventions of proofs.mechanisms: their models are of a norm
        over rows with one weight vector (the plain norms, and the fused kinds' norm at residual_out), not of
        GroupNorm's or BatchNorm's per-channel weights, of dropout, or of a quantized output."""
        return self.is_norm and self.scope == "row" and not self.quantized

    @property
    def centred(self) -> bool:
        """Whether the norm subtracts the mean (LayerNorm and the kinds built on it)."""
        return self.norm == "ln"

    @property
    def dropout(self) -> bool:
        """Whether the kind draws a dropout mask (takes p and a seed)."""
        return "seed" in self.signature

    @property
    def differentiable(self) -> tuple[str, ...]:
        """The inputs a gradient is taken for (:data:`DIFFERENTIABLE` in the signature; none for a quantized output)."""
        return () if self.quantized else tuple(role for role in DIFFERENTIABLE if role in self.signature)

    @property
    def plain_norm(self) -> str:
        """The plain kind of the norm this kind applies (a fused kind's y is that kind's output at residual_out)."""
        return next(record.name for record in RECORDS if record.plain and record.norm == self.norm)

    def arguments(self, values: Mapping[str, object]) -> tuple:
        """The positional arguments of the contract, from an example keyed by role (an absent role: None)."""
        return tuple(values.get(role) for role in self.signature)

    @property
    def has_residual(self) -> bool:
        """Whether the kind takes a residual and returns residual_out (declarations residual_dtype, in-place)."""
        return "residual" in self.signature


RECORDS = (
    Kind("layernorm", "ln", ("x", "weight", "bias", "eps"), "ln", also_checks=("blocks",),
         description="LayerNorm over the last dimension"),
    Kind("rmsnorm", "rms", ("x", "weight", "eps"), "rms", description="RMSNorm over the last dimension"),
    Kind("dropout", "dropout", ("x", "p", "seed"), None, description="inverted dropout, deterministic for a seed"),
    Kind("add_layernorm", "add_ln", ("x", "residual", "weight", "bias", "eps"), "ln", prologue="add",
         outputs=("y", "residual_out"), description="residual add, then LayerNorm"),
    Kind("add_rmsnorm", "add_rms", ("x", "residual", "weight", "eps"), "rms", prologue="add",
         outputs=("y", "residual_out"), description="residual add, then RMSNorm"),
    Kind("dropout_add_layernorm", "drop_add_ln", ("x", "residual", "weight", "bias", "eps", "p", "seed"), "ln",
         prologue="dropout_add", outputs=("y", "residual_out"), description="dropout of x, residual add, LayerNorm"),
    Kind("groupnorm", "gn", ("x", "num_groups", "weight", "bias", "eps"), "ln", scope="group",
         description="GroupNorm over [N, C, *], per-channel weight and bias"),
    Kind("channel_layernorm", "cln", ("x", "weight", "bias", "eps"), "ln", scope="sample",
         description="LayerNorm over each sample's (C, *) elements of x [N, C, *], weight and bias [C, *]"),
    Kind("batchnorm", "bn", ("x", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"),
         "ln", scope="batch", description="BatchNorm over [N, C, *] (F.batch_norm's signature), training and eval"),
    Kind("instancenorm", "in", ("x", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"),
         "ln", scope="instance",
         description="InstanceNorm over [N, C, *] with running statistics (F.instance_norm's signature)",
         names=("x", "running_mean", "running_var", "weight", "bias", "use_input_stats", "momentum", "eps")),
    Kind("layernorm_quant", "ln_quant", ("x", "weight", "bias", "eps", "scale", "quant_dtype"), "ln",
         outputs=("q", "scale"),
         description="LayerNorm, its output quantized to FP8/INT8 (static or dynamic per-row scale)"),
    Kind("rmsnorm_quant", "rms_quant", ("x", "weight", "eps", "scale", "quant_dtype"), "rms", outputs=("q", "scale"),
         description="RMSNorm, its output quantized to FP8/INT8 (static or dynamic per-row scale)"),
    Kind("add_rmsnorm_quant", "add_rms_quant", ("x", "residual", "weight", "eps", "scale", "quant_dtype"), "rms",
         prologue="add", outputs=("q", "scale", "residual_out"),
         description="residual add, then RMSNorm quantized to FP8/INT8 (static or dynamic per-row scale)"),
)
KINDS: dict[str, Kind] = {record.name: record for record in RECORDS}
NAMES = tuple(KINDS)


def kind(name: str) -> Kind:
    """The record of the kind named ``name`` (KeyError naming the kinds otherwise)."""
    if name not in KINDS:
        raise KeyError(f"unknown kind {name!r}: expected one of {', '.join(NAMES)}")
    return KINDS[name]


def kinds_where(predicate: Callable[[Kind], bool]) -> tuple[str, ...]:
    """The names of the kinds whose record satisfies ``predicate``, in :data:`RECORDS` order."""
    return tuple(record.name for record in RECORDS if predicate(record))


def infer(fn: Callable) -> str | None:
    """The kind whose signature a function's parameter names fit: the longest signature whose parameter names
    (:attr:`Kind.parameter_names`) are all among the names; else, among the kinds with as many parameters, the one
    naming most of them (earliest on a tie: fn(x, w, b, eps) is a layernorm, fn(x, w, eps) an rmsnorm,
    fn(x, p, generator) a dropout, F.batch_norm's and F.instance_norm's own names their kinds). None when nothing
    fits."""
    try:
        names = [p.name for p in inspect.signature(fn).parameters.values()]
    except (TypeError, ValueError):
        return None
    contained = [record for record in RECORDS if set(record.parameter_names) <= set(names)]
    if contained:
        return max(contained, key=lambda record: len(record.signature)).name
    same_length = [record for record in RECORDS if len(record.signature) == len(names)]
    if not same_length:
        return None
    return max(same_length, key=lambda record: sum(name in names for name in record.parameter_names)).name
