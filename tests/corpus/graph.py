"""Broken kernels whose backward does not differentiate the forward that was recorded (properties.checks.graph):
correct forwards, and backwards correct on a graph nobody touches, that go wrong when a tensor of the graph is
written in place between the forward and the backward, or when the graph is backpropagated twice.

Modelled on public bugs of this class: an autograd Function that keeps its inputs as ``ctx`` attributes instead of
``ctx.save_for_backward`` (autograd's version check never sees them: the recomputing backward of hand-rolled
activation checkpointing, a fused kernel's saved residual stream updated in place by the next layer), a backward
that derives dropout's mask from an output it kept the same way (an in-place ``h += residual`` on the dropout's
output: Liger-Kernel issue 272 describes saved tensors corrupted by a later in-place kernel), and a backward that
reuses a buffer it saved as scratch (correct once, wrong on ``retain_graph=True``'s second pass: k2 PR 1106 removed
such in-place gradient arithmetic to allow retain_graph).

    LN_CHECKPOINTED                     recomputing backward, inputs saved with save_for_backward (control)
    LN_INPUTS_KEPT_AS_ATTRIBUTES        the same, inputs kept as ctx attributes            -> ln.jacobian
    GN_INPUTS_KEPT_AS_ATTRIBUTES        GroupNorm, the same                                -> gn.jacobian
    ADD_RMS_INPUTS_KEPT_AS_ATTRIBUTES   add + RMSNorm, the same                            -> add_rms.jacobian
    DROP_ADD_INPUTS_KEPT_AS_ATTRIBUTES  dropout + add + LayerNorm, the same                -> drop_add_ln.gradient
    ADD_LN_RESIDUAL_OUT_KEPT            add + LayerNorm whose backward normalizes the residual_out it returned and
                                        kept as an attribute                               -> add_ln.jacobian
    DROPOUT_MASK_FROM_KEPT_OUTPUT       dropout whose backward reads its mask off the kept output (y != 0)
                                                                                           -> dropout.gradient
    LN_BACKWARD_SCALES_SAVED_XHAT       LayerNorm whose backward scales its saved xhat in place (one allocation
                                        saved): right once, wrong on a second backward     -> ln.jacobian
    {LN,DROPOUT,DROP_ADD}_LATEST_CALL   the recomputing backward on the latest call's arguments, kept in the
                                        function's own state (a module attribute, an RNG tracker's latest seed),
                                        not the call's context: a second forward before the first's backward (pipeline
                                        micro-batches, a norm applied twice) gives the first the second's statistics
                                        or mask (pytorch/pytorch#190758's class) -> ln.jacobian, dropout.gradient,
                                        drop_add_ln.gradient
"""

from __future__ import annotations

import functools

import torch

from core.kernel import Kernel
from corpus import dropout, dropout_add, groupnorm, residual
from corpus.correct import _affine, layernorm_two_pass_float64

SPEC = "tests/corpus/graph.py:"
_TENSOR = object()  # where a tensor argument stood in the call a Function keeps
_LATEST: dict = {}  # keep="latest": each function's latest call's arguments (state outside the autograd context)


class _Checkpointed(torch.autograd.Function):
    """``fn(*args)`` computed without a graph; the backward recomputes ``fn`` on the kept tensor arguments with grad
    enabled and differentiates that (activation checkpointing). ``keep``: "saved" (``ctx.save_for_backward``:
    autograd refuses a backward after one of them was written in place) or "attribute" (``ctx.tensors``: no version
    check, the backward differentiates at the written values) or "latest" (every argument in the function's own
    state, :data:`_LATEST`: the backward differentiates the latest call's)."""

    @staticmethod
    def forward(ctx, fn, keep: str, *args):
        ctx.fn, ctx.keep = fn, keep
        ctx.args = [_TENSOR if isinstance(a, torch.Tensor) else a for a in args]
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if keep == "saved":
            ctx.save_for_backward(*tensors)
        elif keep == "latest":
            _LATEST[fn] = ([_TENSOR if isinstance(a, torch.Tensor) else a for a in args], tensors)
        else:
            ctx.tensors = tensors
        return fn(*args)

    @staticmethod
    def backward(ctx, *grads):
        if ctx.keep == "latest":
            ctx.args, tensors = _LATEST[ctx.fn]
            kept = iter(tensors)
        else:
            kept = iter(ctx.saved_tensors if ctx.keep == "saved" else ctx.tensors)
        needs = ctx.needs_input_grad[2:]
        args = [next(kept).detach().requires_grad_(need) if a is _TENSOR else a
                for a, need in zip(ctx.args, needs, strict=True)]
        with torch.enable_grad():
            outputs = ctx.fn(*args)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        wanted = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        flowing = [(o, g) for o, g in zip(outputs, grads, strict=True) if o.requires_grad]
        found = iter(torch.autograd.grad([o for o, _ in flowing], wanted, [g for _, g in flowing]))
        return None, None, *(next(found) if isinstance(a, torch.Tensor) and a.requires_grad else None for a in args)


def _checkpointed(fn, keep: str):
    """``fn`` (its signature kept) run through :class:`_Checkpointed`."""
    @functools.wraps(fn)
    def wrapped(*args):
        return _Checkpointed.apply(fn, keep, *args)

    return wrapped


class _DropoutMaskFromKeptOutput(torch.autograd.Function):
    """Correct seeded inverted dropout whose backward takes the mask to be where the output it kept as an attribute
    is non-zero: ``h = dropout(x); h += residual`` makes every element look kept."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
        y = dropout.DROPOUT_BERNOULLI.fn(x, p, seed)
        ctx.y, ctx.p = y, p
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        return dy * (ctx.y != 0) / (1.0 - ctx.p), None, None


class _NormOfKeptResidualOut(torch.autograd.Function):
    """Correct add + LayerNorm (h = x + residual in the residual's dtype, y = LN(h) in float64 rounded once) whose
    backward differentiates LN at the h it returned as residual_out and kept as an attribute: the next layer's
    in-place update of the residual stream (``residual_out += branch``) changes what it differentiates."""

    @staticmethod
    def forward(ctx, x, residual, weight, bias, eps: float):
        h = (x + residual).to(residual.dtype)
        ctx.h, ctx.eps, ctx.dtypes = h, eps, (x.dtype, residual.dtype)
        ctx.save_for_backward(weight, bias)
        return layernorm_two_pass_float64(h, weight, bias, eps).to(x.dtype), h

    @staticmethod
    def backward(ctx, dy, dh):
        weight, bias = ctx.saved_tensors
        leaves = [None if t is None else t.detach().double().requires_grad_() for t in (ctx.h, weight, bias)]
        with torch.enable_grad():
            y = layernorm_two_pass_float64(*leaves, ctx.eps)
        present = [t for t in leaves if t is not None]
        grads = dict(zip([i for i, t in enumerate(leaves) if t is not None],
                         torch.autograd.grad(y, present, dy.double()), strict=True))
        total = grads[0] + dh.double()
        parameters = [None if t is None else grads[i].to(t.dtype) for i, t in ((1, weight), (2, bias))]
        return total.to(ctx.dtypes[0]), total.to(ctx.dtypes[1]), *parameters, None


class _LayerNormScalingSavedXhat(torch.autograd.Function):
    """LayerNorm in float64 rounded once; the backward (dx = rstd (g - xhat mean(g xhat) - mean(g)), g = gamma dy)
    forms xhat mean(g xhat) in the xhat buffer it saved, to spare an allocation: the first backward is right, a
    second one of the same graph reads xhat scaled."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps: float):
        x64 = x.double()
        centred = x64 - x64.mean(-1, keepdim=True)
        rstd = torch.rsqrt(centred.square().mean(-1, keepdim=True) + eps)
        ctx.xhat, ctx.rstd, ctx.dtype = centred * rstd, rstd, x.dtype
        ctx.save_for_backward(weight, bias)
        return _affine(ctx.xhat, weight, bias).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        weight, bias = ctx.saved_tensors
        xhat, d = ctx.xhat, ctx.xhat.shape[-1]
        dy64 = dy.double()
        g = dy64 if weight is None else dy64 * weight.double()
        dweight = None if weight is None else (dy64 * xhat).reshape(-1, d).sum(0).to(weight.dtype)
        dbias = None if bias is None else dy64.reshape(-1, d).sum(0).to(bias.dtype)
        mean_g = g.mean(-1, keepdim=True)
        xhat.mul_((g * xhat).mean(-1, keepdim=True))  # xhat mean(g xhat), in the saved buffer
        return ((g - xhat - mean_g) * ctx.rstd).to(ctx.dtype), dweight, dbias, None


def _layernorm_scaling_saved_xhat(x, weight, bias, eps):
    return _LayerNormScalingSavedXhat.apply(x, weight, bias, eps)


def _dropout_mask_from_kept_output(x, p, seed):
    return _DropoutMaskFromKeptOutput.apply(x, p, seed)


def _add_layernorm_residual_out_kept(x, residual, weight, bias, eps):
    return _NormOfKeptResidualOut.apply(x, residual, weight, bias, eps)


def _kernel(name: str, kind: str, fn, description: str, **declared) -> Kernel:
    return Kernel(name.lower(), kind, fn, spec=SPEC + name, description=description, **declared)


def _attributes(name: str, kind: str, fn, claim: str, **declared) -> Kernel:
    return _kernel(name, kind, _checkpointed(fn, "attribute"), f"recomputing backward on inputs kept as ctx "
                   f"attributes (no version check): {claim}", **declared)


LN_CHECKPOINTED = _kernel("LN_CHECKPOINTED", "layernorm", _checkpointed(layernorm_two_pass_float64, "saved"),
                          "recomputing backward, inputs saved with save_for_backward (control)")
LN_INPUTS_KEPT_AS_ATTRIBUTES = _attributes("LN_INPUTS_KEPT_AS_ATTRIBUTES", "layernorm", layernorm_two_pass_float64,
                                           "ln.jacobian")
GN_INPUTS_KEPT_AS_ATTRIBUTES = _attributes("GN_INPUTS_KEPT_AS_ATTRIBUTES", "groupnorm", groupnorm.GN_CORRECT.fn,
                                           "gn.jacobian")
ADD_RMS_INPUTS_KEPT_AS_ATTRIBUTES = _attributes("ADD_RMS_INPUTS_KEPT_AS_ATTRIBUTES", "add_rmsnorm",
                                                residual._make("none", "rms")[0], "add_rms.jacobian",
                                                dtypes=(torch.float32, torch.float16))
DROP_ADD_INPUTS_KEPT_AS_ATTRIBUTES = _attributes("DROP_ADD_INPUTS_KEPT_AS_ATTRIBUTES", "dropout_add_layernorm",
                                                 dropout_add.DROP_ADD_CORRECT.fn, "drop_add_ln.gradient")
ADD_LN_RESIDUAL_OUT_KEPT = _kernel("ADD_LN_RESIDUAL_OUT_KEPT", "add_layernorm", _add_layernorm_residual_out_kept,
                                   "backward normalizes the residual_out it kept as an attribute: add_ln.jacobian",
                                   dtypes=(torch.float32, torch.float16))
DROPOUT_MASK_FROM_KEPT_OUTPUT = _kernel("DROPOUT_MASK_FROM_KEPT_OUTPUT", "dropout", _dropout_mask_from_kept_output,
                                        "backward's mask read off the output kept as an attribute: dropout.gradient")
LN_BACKWARD_SCALES_SAVED_XHAT = _kernel("LN_BACKWARD_SCALES_SAVED_XHAT", "layernorm", _layernorm_scaling_saved_xhat,
                                        "backward scales its saved xhat in place: a second backward is wrong: "
                                        "ln.jacobian")
LN_LATEST_CALL = _kernel("LN_LATEST_CALL", "layernorm", _checkpointed(layernorm_two_pass_float64, "latest"),
                         "recomputing backward on the latest call's arguments: ln.jacobian")
DROPOUT_LATEST_CALL = _kernel("DROPOUT_LATEST_CALL", "dropout", _checkpointed(dropout.DROPOUT_BERNOULLI.fn, "latest"),
                              "recomputing backward on the latest call's x and seed: dropout.gradient")
DROP_ADD_LATEST_CALL = _kernel("DROP_ADD_LATEST_CALL", "dropout_add_layernorm",
                               _checkpointed(dropout_add.DROP_ADD_CORRECT.fn, "latest"),
                               "recomputing backward on the latest call's arguments: drop_add_ln.gradient")
