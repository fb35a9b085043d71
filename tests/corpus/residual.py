"""Broken fused residual add + norm kernels (kinds add_layernorm, add_rmsnorm): one correct torch implementation
(h = x + residual in the declared residual dtype, y = N(h) computed in float32 and rounded once, autograd for
the backward) with exactly one thing broken, for both norms. Each bug's description names the claim that must
catch it; the manifest (tests/corpus/__init__.py) lists the same ids.

    RESIDUAL_OUT_MISSING       returns y alone, not (y, residual_out): a fault     -> residual_out, forward (error)
    RESIDUAL_OUT_ROUNDED       declares float32 residual_out but rounds h to storage -> residual_out
    RESIDUAL_GRADIENT_DROPPED  residual_out detached: dL/d(residual_out) never flows -> jacobian
    NORMALIZES_THE_BRANCH      y = N(x), not N(x + residual)                         -> forward
    TRAINING_FORWARD_NORMALIZES_THE_BRANCH  the same only in a training step's forward -> forward
    WHOLE_TENSOR_STATISTICS    mean/variance over the whole tensor, not per row       -> row_independence
    STRIDES_IGNORED            reads x and residual as if contiguous                 -> layout_invariance
    ROWS_BY_THE_LAST_ROW_STRIDE  steps rows by stride(-2) (unevenly spaced rows read wrongly) -> layout_invariance
    PARAMETER_STRIDES_IGNORED    weight and bias read as ptr + column (a strided parameter view) -> layout_invariance
    EMPTY_BATCH_AMAX_RAISES    a whole-call max(|h|) that raises on an empty batch        -> forward
    RESIDUAL_GRADIENT_GATED_ON_X  the residual's gradient only when x requires grad   -> jacobian
    RESIDUAL_WRITTEN           writes residual_out into residual without declaring it -> inputs_unmodified
    RESIDUAL_WRITTEN_ABOVE_65536  the same above 65 536 elements only (a large-input path) -> inputs_unmodified
    X_WRITTEN_IN_INFERENCE_FROM_65_ROWS  grad mode off, more than 64 rows: the sum written into x -> inputs_unmodified
    RESIDUAL_CAST_TO_X_DTYPE   adds in x's dtype: a float32 residual cast down first -> residual_out, jacobian
    RESIDUAL_OUT_IN_X_DTYPE    returns residual_out in x's dtype beside a float32 residual -> residual_out
    RESIDUAL_GRADIENT_IN_X_DTYPE  dL/dresidual rounded through x's dtype (right forward) -> jacobian
    IN_PLACE_DECLARED          the same write, declared (in_place=("residual",)): correct
    IN_PLACE_STRIDES_IGNORED   the declared write addressed as if the residual were contiguous -> layout_invariance
    FIRST_LAYER                takes residual=None (a first layer): residual_out = x: correct
    FIRST_LAYER_UNWRITTEN      takes residual=None but leaves residual_out as allocated -> residual_out, forward

The last three show only beside a residual in a wider dtype than x (a float32 residual stream with 16-bit x,
core.capabilities.RESIDUAL_MIXES); the correct sum is in the wider of the two dtypes, as torch's x + residual.

A torch autograd implementation with a 16-bit residual_out accumulates dL/dh from its two uses in the storage
dtype (fl(fl(J^T dy) + dh)): inside the k-term sum the jacobian claim's bound allows (properties.bounds.tolerance,
docs/findings.md [R1]), so the correct control runs in float32 and float16.
"""

from __future__ import annotations

import torch

from core.kernel import Kernel
from corpus.memory import read_as_if_contiguous, read_rows_by_the_last_row_stride

SPEC = "tests/corpus/residual.py:"
KIND = {"ln": "add_layernorm", "rms": "add_rmsnorm"}


def _norm(h: torch.Tensor, weight, bias, eps: float, rms: bool, whole_tensor: bool = False) -> torch.Tensor:
    """N(h) in float32 (statistics per row, or over the whole tensor when broken)."""
    h = h.float()
    axes = tuple(range(h.dim())) if whole_tensor else (-1,)
    centred = h if rms else h - h.mean(axes, keepdim=True)
    y = centred * torch.rsqrt(centred.square().mean(axes, keepdim=True) + eps)
    y = y if weight is None else y * weight.float()
    return y if bias is None else y + bias.float()


class _GradientThroughXDtype(torch.autograd.Function):
    """The identity on residual_out h whose backward rounds dL/dh through x's dtype on its way to the residual (a
    backward that computes one gradient in x's dtype and hands it to both inputs)."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        ctx.narrow = like.dtype
        return h.clone()

    @staticmethod
    def backward(ctx, dh: torch.Tensor):
        return dh.to(ctx.narrow).to(dh.dtype), None


class _SumGatedOnX(torch.autograd.Function):
    """h = x + residual whose backward gives the residual its gradient only when x requires grad (x's
    ``ctx.needs_input_grad`` flag copied to the residual's line): right whenever both require grad."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return x + residual

    @staticmethod
    def backward(ctx, dh: torch.Tensor):
        needs_x = ctx.needs_input_grad[0]
        return (dh if needs_x else None), (dh if needs_x else None)


def _make(bug: str, kind: str, residual_dtype: str = "storage", in_place: tuple[str, ...] = (),
          first_layer: bool = False):
    """(fn, residual_dtype, in_place) of the kernel with ``bug``; ``first_layer``: it also takes residual=None (h = x,
    as flash-attention's layer_norm_fn does), leaving residual_out as allocated (zeros here) with bug "unwritten"."""
    rms = kind == "rms"

    def add_norm(x, residual, weight, bias, eps):
        missing = first_layer and residual is None
        if missing:
            residual = torch.zeros_like(x)  # h = x + 0 = x exactly
        if bug == "strides":
            x, residual = read_as_if_contiguous(x), read_as_if_contiguous(residual)
        if bug == "row_stride":
            x, residual = read_rows_by_the_last_row_stride(x), read_rows_by_the_last_row_stride(residual)
        if bug == "parameter_strides":  # weight and bias read as ptr + column, from their storage offset
            weight, bias = (t if t is None else torch.as_strided(t, t.shape, (1,), t.storage_offset())
                            for t in (weight, bias))
        if residual_dtype == "float32" and bug != "rounded":
            wide = torch.float32
        else:
            wide = x.dtype if bug in ("rounded", "cast_down") else torch.promote_types(x.dtype, residual.dtype)
        add = _SumGatedOnX.apply if bug == "gated" else torch.add
        kept = torch.float32 if residual_dtype == "float32" else residual.dtype
        h = add(x.to(wide), residual.to(wide)).to(x.dtype if bug == "out_in_x_dtype" else kept)
        if bug == "gradient_in_x_dtype":
            h = _GradientThroughXDtype.apply(h, x)
        if bug == "amax":  # the largest |h| of the call scales h before squaring (float16 squares stay finite)
            h = h / h.detach().abs().max().clamp_min(1.0) * h.detach().abs().max().clamp_min(1.0)
        if bug in ("written", "declared") or (bug == "written_above_65536" and x.numel() > 65536):
            residual.data.copy_(h.detach().to(residual.dtype))
        if bug == "x_scratch_in_inference" and not torch.is_grad_enabled() and x.numel() // x.shape[-1] > 64:
            x.data.copy_(h.detach().to(x.dtype))  # the prefill path's scratch: x's buffer holds the sum
        if bug == "declared_contiguous_write":  # the write addressed as if the residual were contiguous
            end = residual.storage_offset() + residual.numel()
            if end <= residual.untyped_storage().nbytes() // residual.element_size():
                contiguous = torch.empty(residual.shape, device="meta").stride()
                torch.as_strided(residual.data, residual.shape, contiguous).copy_(h.detach().to(residual.dtype))
        training = torch.is_grad_enabled() and x.requires_grad
        branch = bug == "branch" or (bug == "training_branch" and training)
        y = _norm(x if branch else h, weight, bias, eps, rms, whole_tensor=bug == "whole").to(x.dtype)
        if missing and bug == "unwritten":
            h = torch.zeros_like(h)
        if bug == "missing":
            return y
        return y, (h.detach() if bug == "dropped" else h)

    if rms:
        def fn(x, residual, weight, eps):
            return add_norm(x, residual, weight, None, eps)
    else:
        fn = add_norm
    return fn, residual_dtype, in_place


# Each description names its claims with the kind's prefix ({p}: add_ln or add_rms), the ids the manifest lists.
BUGS = {
    "RESIDUAL_OUT_MISSING": ("missing", "returns y alone, not the pair (y, residual_out): a kernel fault of "
                                        "{p}.residual_out, {p}.forward"),
    "RESIDUAL_OUT_ROUNDED": ("rounded", "declares residual_dtype float32 but rounds x + residual to the storage dtype "
                                        "first: {p}.residual_out"),
    "RESIDUAL_GRADIENT_DROPPED": ("dropped", "returns residual_out detached, so dL/d(residual_out) never reaches x "
                                             "or the residual: {p}.jacobian"),
    "NORMALIZES_THE_BRANCH": ("branch", "y = N(x) instead of N(x + residual): {p}.forward"),
    "TRAINING_FORWARD_NORMALIZES_THE_BRANCH": ("training_branch", "y = N(x) instead of N(x + residual) when x requires "
                                                                 "grad (a training step's forward): {p}.forward"),
    "WHOLE_TENSOR_STATISTICS": ("whole", "mean and variance over the whole tensor, not per row: {p}.row_independence"),
    "STRIDES_IGNORED": ("strides", "reads x and residual with contiguous strides: {p}.layout_invariance"),
    "EMPTY_BATCH_AMAX_RAISES": ("amax", "scales h by the call's largest |h|, whose max() raises on an empty batch: "
                                        "{p}.forward"),
    "ROWS_BY_THE_LAST_ROW_STRIDE": ("row_stride", "steps the rows of x and residual by their stride(-2): wrong for "
                                                  "[B, S, d] views of [S, B, d] tensors: {p}.layout_invariance"),
    "RESIDUAL_GRADIENT_GATED_ON_X": ("gated", "gives the residual its gradient only when x requires grad: with x "
                                              "frozen (a first layer over frozen embeddings) none: {p}.jacobian"),
    "RESIDUAL_WRITTEN": ("written", "writes residual_out into the residual argument without declaring it: "
                                    "{p}.inputs_unmodified"),
    "RESIDUAL_WRITTEN_ABOVE_65536": ("written_above_65536", "above 65 536 elements (a large-input path) writes "
                                                            "residual_out into the residual argument without "
                                                            "declaring it: {p}.inputs_unmodified"),
    "X_WRITTEN_IN_INFERENCE_FROM_65_ROWS": ("x_scratch_in_inference", "grad mode off and more than 64 rows (a "
                                                                      "prefill path): x's buffer used as scratch for "
                                                                      "the sum: {p}.inputs_unmodified"),
    "RESIDUAL_CAST_TO_X_DTYPE": ("cast_down", "adds x and the residual in x's dtype: a float32 residual stream beside "
                                              "16-bit x is cast down first (residual_out and the residual's gradient "
                                              "lose its precision): {p}.residual_out, {p}.jacobian"),
    "PARAMETER_STRIDES_IGNORED": ("parameter_strides", "reads weight and bias as ptr + column (contiguous from their "
                                                       "storage offset, vllm-project/vllm#17735): a strided parameter "
                                                       "view is read wrongly: {p}.layout_invariance"),
    "RESIDUAL_OUT_IN_X_DTYPE": ("out_in_x_dtype", "returns residual_out in x's dtype beside a float32 residual (the "
                                                  "sum right, the stream's dtype lost): {p}.residual_out"),
    "RESIDUAL_GRADIENT_IN_X_DTYPE": ("gradient_in_x_dtype", "rounds dL/d(residual_out) through x's dtype before it "
                                                            "reaches a float32 residual: {p}.jacobian"),
}


def _kernels(kind: str) -> dict[str, Kernel]:
    made = {}
    for name, (bug, description) in BUGS.items():
        fn, residual_dtype, in_place = _make(bug, kind, "float32" if bug == "rounded" else "storage")
        made[name] = Kernel(f"add_{kind}_{name.lower()}", KIND[kind], fn, spec=f"{SPEC}{kind.upper()}_{name}",
                            residual_dtype=residual_dtype, in_place=in_place,
                            description=description.format(p=f"add_{kind}"),
                            dtypes=(torch.float32, torch.float16))
    fn, _, in_place = _make("declared", kind, in_place=("residual",))
    made["IN_PLACE_DECLARED"] = Kernel(f"add_{kind}_in_place_declared", KIND[kind], fn,
                                       spec=f"{SPEC}{kind.upper()}_IN_PLACE_DECLARED", in_place=in_place,
                                       dtypes=(torch.float32, torch.float16),
                                       description="writes residual_out into residual, declared: correct")
    fn, _, in_place = _make("declared_contiguous_write", kind, in_place=("residual",))
    made["IN_PLACE_STRIDES_IGNORED"] = Kernel(
        f"add_{kind}_in_place_strides_ignored", KIND[kind], fn, spec=f"{SPEC}{kind.upper()}_IN_PLACE_STRIDES_IGNORED",
        in_place=in_place, dtypes=(torch.float32, torch.float16),
        description=f"the declared in-place write of residual_out into residual addressed as if the residual were "
                    f"contiguous: add_{kind}.layout_invariance")
    for name, bug, description in (
            ("FIRST_LAYER", "none", "takes residual=None (a first layer's call): residual_out = x, correct"),
            ("FIRST_LAYER_UNWRITTEN", "unwritten", "takes residual=None but leaves residual_out as allocated (zeros): "
                                                   "{p}.residual_out, {p}.forward")):
        fn, _, _ = _make(bug, kind, first_layer=True)
        made[name] = Kernel(f"add_{kind}_{name.lower()}", KIND[kind], fn, spec=f"{SPEC}{kind.upper()}_{name}",
                            dtypes=(torch.float32, torch.float16), description=description.format(p=f"add_{kind}"))
    return made


globals().update({f"{kind.upper()}_{name}": made for kind in KIND for name, made in _kernels(kind).items()})
