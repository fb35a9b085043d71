"""Kernels that break the bitwise claims (issue 29): one float32 torch implementation of every norm kind (the
statistics summed in float32, the weight and bias applied per row, autograd backward), declared
``batch_invariant=True`` or ``deterministic=True``, with exactly one thing that breaks that declaration; the manifest
(tests/corpus/__init__.py) lists the claim that must catch each.

    {KIND}_BATCH_SIZE_SWITCH  from 256 rows up the row sums run left to right instead of torch's vectorized order:
                              the float32 statistics, hence y and dx, change bits with the batch size (vLLM #48271:
                              its RMSNorm launcher changed its block size at 256 tokens)       -> *.batch_invariance
    LN_SECOND_WAVE_ORDER      rows from position 128 on (a second wave of a grid of 128 programs) sum in the other
                              order: the same row's bits depend on where it sits               -> ln.batch_invariance
    {KIND}_ATOMIC_DWEIGHT     dweight (and dbias) add the rows' contributions in a random order on each call, in
                              float32, as atomic adds do (Liger's GroupNorm)                   -> *.determinism
    IN_BATCH_SIZE_SWITCH      InstanceNorm: from 256 samples up each instance's sums run right to left in training
                              (its rows are S <= 4 elements, which torch's CPU sum adds left to right), and eval mode
                              folds the running statistics into one multiply-add                -> in.batch_invariance
    BN_BATCH_SIZE_SWITCH      BatchNorm in eval mode: from 256 samples up y = x a + b with a = rsqrt(var + eps),
                              b = -mean a (a fused inference path), below (x - mean) a          -> bn.batch_invariance
    {CLN,IN,BN}_ATOMIC_DWEIGHT  the same for the kinds over x [N, C, *]: dweight and dbias summed over the samples in
                              a random order each call (BatchNorm's and InstanceNorm's in both modes)
                                                                                               -> *.determinism
    {LN,RMS,ADD_RMS}_QUANT_RANDOM_ORDER  a quantized norm: each row's sums in an order of its columns drawn anew
                              each call (a split chosen at run time): y, hence the dynamic scales, change between
                              calls                                                          -> *_quant.determinism
    {LN,RMS,ADD_RMS}_QUANT_TOKEN_COUNT_SWITCH  the same from 1024 tokens up (vllm-project/vllm#48997: the per-token
                              quant norms' block size by token count), past the other kinds' CPU batches
                                                                                         -> *_quant.batch_invariance
    {LN,RMS,ADD_RMS}_QUANT_BATCH_SIZE_SWITCH  a quantized norm: from 256 rows up its row sums run left to right, so
                              y, hence the dynamic per-row scales reduced from it (and q where a rounding boundary
                              lies between), change bits with the batch size             -> *_quant.batch_invariance
    {RMS,ADD_LN,RMS_QUANT}_FEW_TOKENS_SPLIT  fewer than 132 tokens (an H100's SMs) of rows of 2048
                              columns or more: each row's sums split over 4 programs, the partials added (a split
                              reduction filling the GPU at decode batch sizes: Thinking Machines, "Defeating
                              Nondeterminism in LLM Inference"; vllm-project/vllm#48271's class): one request's bits
                              differ from the batch of 257's, at model widths only          -> *.batch_invariance
    {LN,RMS_QUANT}_WIDE_ATOMIC_SPLIT  rows of 2048 columns or more: 8 programs a row, their partial
                              sums atomically added in the order they finish (TransformerEngine's multi-CTA rows,
                              the split + atomics pattern of the same post; karpathy/llm.c#190's class)
                                                                                             -> *.determinism
    RMS_SPLIT_WIDER_THAN_8192 fewer than 132 tokens of rows wider than 8192 (hidden sizes 12288, 16384): each row's
                              sums split over 4 programs (flashinfer-ai/flashinfer#4335's cluster of programs a row;
                              Thinking Machines' split reduction)                          -> rms.batch_invariance
    LN_ATOMIC_SPLIT_WIDER_THAN_8192  rows wider than 8192: 8 partial sums a row added with atomics in a random order
                              each call (TransformerEngine's multi-CTA rows; karpathy/llm.c#190's class)
                                                                                              -> ln.determinism
    LN_ATOMIC_DWEIGHT_PAST_THE_SMS  more than 132 rows (a persistent grid of an H100's SMs): dweight and dbias summed
                              over the rows in a random order each call (linkedin/Liger-Kernel#945: LayerNorm's
                              backward accumulating dw, db with atomic_add)                   -> ln.determinism
    RMS_BLOCK_BY_TOKENS_1024  from 1024 tokens up the row sums run left to right (vllm-project/vllm#48997 moved its
                              per-token kernels' block-size switch to 1024 tokens; #48271's at 256)
                                                                                           -> rms.batch_invariance
    LN_TEXTBOOK_DECLARED_BITWISE, GN_CORRECT_DECLARED_BITWISE: correct kernels of the corpus declaring both: the
                              controls (the contracts hold for them)

KIND is LN, RMS, ADD_LN, ADD_RMS, DROP_ADD_LN (batch size only: its determinism is drop_add_ln.determinism's), GN or
CLN (LayerNorm over (C, *)). Each kernel is correct in every other respect (the corpus runs a broken
kernel on the claims of its entry); the BatchNorm and InstanceNorm ones normalize and update their running statistics
as tests/corpus/batchnorm.py's control, the quantized ones quantize as core.adapters.quantized.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import torch

import corpus.batchnorm
import corpus.groupnorm
import corpus.statistics
from core.adapters.quantized import MINIMUM_SCALE, declared_y, quantize
from core.kernel import Kernel, Quantization

SPEC = "tests/corpus/bitwise.py:"
SWITCH_ROWS = 256  # vLLM's RMSNorm switched its block size at 256 tokens
TOKEN_SWITCH_ROWS = 1024  # vLLM's per-token quant norms pick their block size by token count past 1024
SECOND_WAVE = 128  # the first row of the second wave of a grid of 128 programs
# a row of SPLIT_FROM_WIDTH columns or more split over programs: SPLITS of them when the tokens are fewer than
# SPLIT_BELOW_TOKENS (an H100's SMs), ATOMIC_SPLITS adding their partials with atomics
SPLIT_BELOW_TOKENS, SPLIT_FROM_WIDTH, SPLITS, ATOMIC_SPLITS = 132, 2048, 4, 8
SPLIT_PAST_WIDTH = 8192  # the widest row one program reduces, for the kernels that split only wider rows


def left_to_right(values: torch.Tensor, dim: int) -> torch.Tensor:
    """The float32 sum along ``dim``, one term after the other (torch's CPU cumsum accumulates float32 in double)."""
    total = values.select(dim, 0)
    for index in range(1, values.shape[dim]):
        total = total + values.select(dim, index)
    return total


def _row_sum(values: torch.Tensor, sequential: torch.Tensor | bool) -> torch.Tensor:
    """float32 sums over the last axis, [..., 1]: torch's vectorized order, or left to right where ``sequential``
    (per row, or for all)."""
    pairwise = values.sum(-1, keepdim=True)
    if sequential is False:
        return pairwise
    return torch.where(torch.as_tensor(sequential), left_to_right(values, -1).unsqueeze(-1), pairwise)


def _random_order_sum(values: torch.Tensor) -> torch.Tensor:
    """float32 sums over the last axis, [..., 1], left to right in an order of the columns drawn anew on each call (the
    partial sums of a split chosen at run time, or atomics, arriving in the order they finish): the bits change from
    call to call."""
    generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(7), "little"))
    order = torch.randperm(values.shape[-1], generator=generator).to(values.device)
    return left_to_right(values[..., order], -1).unsqueeze(-1)


def _split_sum(values: torch.Tensor) -> torch.Tensor:
    """float32 sums over the last axis, [..., 1], as :data:`SPLITS` programs sum a row: each its contiguous part, the
    partials then added in order (another order than torch's one vectorized sum of the whole row)."""
    return sum(part.sum(-1, keepdim=True) for part in values.chunk(SPLITS, dim=-1))


def _atomic_split_sum(values: torch.Tensor) -> torch.Tensor:
    """float32 sums over the last axis, [..., 1], as :data:`ATOMIC_SPLITS` programs sum a row and atomically add their
    partials into one accumulator in the order they finish (drawn anew on each call): the bits change between calls."""
    parts = values.chunk(ATOMIC_SPLITS, dim=-1)
    generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(7), "little"))
    order = torch.randperm(len(parts), generator=generator).tolist()
    total = parts[order[0]].sum(-1, keepdim=True)
    for index in order[1:]:
        total = total + parts[index].sum(-1, keepdim=True)
    return total


def _normalized(rows: torch.Tensor, centred: bool, eps: float, sequential: torch.Tensor | bool | None,
                summed: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """(rows - mean) / sqrt(var + eps) (LayerNorm) or rows / sqrt(mean(rows^2) + eps) (RMSNorm), two-pass in float32;
    the sums as :func:`_row_sum` says, or in a random order (:func:`_random_order_sum`) where ``sequential`` is
    None, or by ``summed`` where given."""
    m = rows.shape[-1]

    def row_sum(values: torch.Tensor) -> torch.Tensor:
        if summed is not None:
            return summed(values)
        return _random_order_sum(values) if sequential is None else _row_sum(values, sequential)

    if centred:
        rows = rows - row_sum(rows) / m
    return rows * torch.rsqrt(row_sum(rows * rows) / m + eps)


class _AtomicRowSum(torch.autograd.Function):
    """A per-row copy of a parameter, [n, C]; its gradient is the sum of the n rows' contributions in a random order
    each call, accumulated in float32 (as atomic adds arrive): the bits change from call to call."""

    @staticmethod
    def forward(ctx, parameter: torch.Tensor, rows: int) -> torch.Tensor:
        return parameter.unsqueeze(0).repeat(rows, 1)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        generator = torch.Generator().manual_seed(int.from_bytes(os.urandom(7), "little"))
        order = torch.randperm(grad.shape[0], generator=generator).to(grad.device)
        return left_to_right(grad[order], 0), None


def _per_row(parameter: torch.Tensor | None, samples: int, shape: tuple[int, ...], atomic: bool, grouped: bool):
    """The parameter in float32 as it multiplies or shifts the rows (or the samples of x [N, C, *]: per channel, or
    element-wise [C, *])."""
    if parameter is None:
        return None
    p = parameter.float()
    if grouped and p.dim() > 1:  # element-wise over a sample (LayerNorm over (C, *))
        return _AtomicRowSum.apply(p.reshape(-1), samples).reshape(shape) if atomic else p
    trailing = (1,) * (len(shape) - 2) if grouped else ()
    if not atomic:
        return p.reshape(p.shape[0], *trailing) if grouped else p
    return _AtomicRowSum.apply(p, samples).reshape(*((shape[0], -1, *trailing) if grouped else (*shape[:-1], -1)))


def _norm(h: torch.Tensor, weight, bias, eps: float, *, centred: bool, groups: int | None, bug: str, out_dtype):
    """The norm of h (rows of the last axis, or GroupNorm's groups of [N, C, *]) with the kernel's bug."""
    grouped = groups is not None
    values = h.float()
    rows = values.reshape(values.shape[0], groups, -1) if grouped else values
    samples = rows.shape[0] if grouped else rows[..., 0].numel()
    if bug == "batch_size_switch":
        sequential: torch.Tensor | bool | None = samples >= SWITCH_ROWS
    elif bug in ("token_count_switch", "block_by_tokens_1024"):
        sequential = samples >= TOKEN_SWITCH_ROWS
    elif bug == "random_order":
        sequential = None
    elif bug == "second_wave_order":
        sequential = (torch.arange(samples, device=h.device) >= SECOND_WAVE).reshape(*rows.shape[:-1], 1)
    else:
        sequential = False
    summed = None
    if bug == "few_tokens_split" and samples < SPLIT_BELOW_TOKENS and rows.shape[-1] >= SPLIT_FROM_WIDTH:
        summed = _split_sum
    elif bug == "wide_atomic_split" and rows.shape[-1] >= SPLIT_FROM_WIDTH:
        summed = _atomic_split_sum
    elif bug == "split_wider_than_8192" and samples < SPLIT_BELOW_TOKENS and rows.shape[-1] > SPLIT_PAST_WIDTH:
        summed = _split_sum
    elif bug == "atomic_split_wider_than_8192" and rows.shape[-1] > SPLIT_PAST_WIDTH:
        summed = _atomic_split_sum
    y = _normalized(rows, centred, eps, sequential, summed).reshape(values.shape)
    atomic = bug == "atomic_dweight" or (bug == "atomic_dweight_past_the_sms" and samples > SPLIT_BELOW_TOKENS)
    w = _per_row(weight, samples, tuple(values.shape), atomic, grouped)
    b = _per_row(bias, samples, tuple(values.shape), atomic, grouped)
    y = y if w is None else y * w
    return (y if b is None else y + b).to(out_dtype)


def _residual_out(x, residual, p: float = 0.0, seed: int = 0):
    """h = residual + dropout(x) summed in float32, in the residual's dtype (x's without a residual); the mask drawn
    with ``seed``."""
    branch = x.float()
    if p > 0:
        keep = torch.rand(x.shape, generator=torch.Generator().manual_seed(seed)).to(x.device) >= p
        branch = torch.where(keep, branch / (1 - p), 0.0)
    total = branch if residual is None else branch + residual.float()
    return total.to(x.dtype if residual is None else residual.dtype)


def _running_norm(x, running_mean, running_var, weight, bias, training, momentum, eps, *, instance: bool, bug: str):
    """BatchNorm (InstanceNorm where ``instance``) in float32 with the running statistics of tests/corpus/batchnorm.py's
    control (its normalization in eval mode and BatchNorm's in training), weight and bias applied per sample, with the
    bug: ``batch_size_switch`` from :data:`SWITCH_ROWS` samples up the instances' sums right to left (training), eval
    folded into x a + b; ``atomic_dweight`` dweight and dbias summed in a random order."""
    values = x.float()
    switched = bug == "batch_size_switch" and x.shape[0] >= SWITCH_ROWS
    if training and instance:  # each (sample, channel)'s statistics: GroupNorm's view with G = C
        order = (lambda t: t.flip(-1)) if switched else (lambda t: t)  # a permutation within each instance
        y = order(_norm(order(values), None, None, eps, centred=True, groups=x.shape[1], bug="",
                        out_dtype=torch.float32))
        if running_mean is not None:
            with torch.no_grad():
                corpus.batchnorm.running_update(values, running_mean, running_var, momentum, "", instance=True)
    elif switched and not training and running_mean is not None:  # a fused inference path: one multiply-add
        scale = torch.rsqrt(running_var.float() + eps)
        y = (values * corpus.batchnorm.per_channel(scale, x)
             - corpus.batchnorm.per_channel(running_mean.float() * scale, x))
    else:
        y = corpus.batchnorm.batchnorm(values, running_mean, running_var, None, None, training, momentum, eps,
                                       instance=instance)
    atomic = bug == "atomic_dweight"
    w = _per_row(weight, x.shape[0], tuple(x.shape), atomic, grouped=True)
    b = _per_row(bias, x.shape[0], tuple(x.shape), atomic, grouped=True)
    y = y if w is None else y * w
    return (y if b is None else y + b).to(x.dtype)


def _kernels(bug: str, declared: str, description: str, prefixes: tuple[str, ...]) -> dict[str, Kernel]:
    """The bug in each kind named by ``prefixes`` (LN, RMS, ADD_LN, ADD_RMS, DROP_ADD_LN, GN, CLN, IN, BN, LN_QUANT,
    RMS_QUANT, ADD_RMS_QUANT), declared ``declared``; ``description`` names the claim that catches it as ``{claim}``
    (the kind's claim-id prefix)."""

    def layernorm(x, weight, bias, eps):
        return _norm(x, weight, bias, eps, centred=True, groups=None, bug=bug, out_dtype=x.dtype)

    def rmsnorm(x, weight, eps):
        return _norm(x, weight, None, eps, centred=False, groups=None, bug=bug, out_dtype=x.dtype)

    def add_layernorm(x, residual, weight, bias, eps):
        h = _residual_out(x, residual)
        return _norm(h, weight, bias, eps, centred=True, groups=None, bug=bug, out_dtype=x.dtype), h

    def add_rmsnorm(x, residual, weight, eps):
        h = _residual_out(x, residual)
        return _norm(h, weight, None, eps, centred=False, groups=None, bug=bug, out_dtype=x.dtype), h

    def dropout_add_layernorm(x, residual, weight, bias, eps, p, seed):
        h = _residual_out(x, residual, p, seed)
        return _norm(h, weight, bias, eps, centred=True, groups=None, bug=bug, out_dtype=x.dtype), h

    def groupnorm(x, num_groups, weight, bias, eps):
        return _norm(x, weight, bias, eps, centred=True, groups=num_groups, bug=bug, out_dtype=x.dtype)

    def channel_layernorm(x, weight, bias, eps):
        return _norm(x, weight, bias, eps, centred=True, groups=1, bug=bug, out_dtype=x.dtype)

    def instancenorm(x, running_mean, running_var, weight, bias, training, momentum, eps):
        return _running_norm(x, running_mean, running_var, weight, bias, training, momentum, eps, instance=True,
                             bug=bug)

    def batchnorm(x, running_mean, running_var, weight, bias, training, momentum, eps):
        return _running_norm(x, running_mean, running_var, weight, bias, training, momentum, eps, instance=False,
                             bug=bug)

    def layernorm_quant(x, weight, bias, eps, scale, quant_dtype):
        y = _norm(x, weight, bias, eps, centred=True, groups=None, bug=bug, out_dtype=torch.float32)
        return quantize(declared_y(y, x, storage=True), scale, quant_dtype)

    def rmsnorm_quant(x, weight, eps, scale, quant_dtype):
        y = _norm(x, weight, None, eps, centred=False, groups=None, bug=bug, out_dtype=torch.float32)
        return quantize(declared_y(y, x, storage=True), scale, quant_dtype)

    def add_rmsnorm_quant(x, residual, weight, eps, scale, quant_dtype):
        h = _residual_out(x, residual)
        return (*rmsnorm_quant(h, weight, eps, scale, quant_dtype), h)

    kinds = {"LN": ("layernorm", layernorm), "RMS": ("rmsnorm", rmsnorm), "ADD_LN": ("add_layernorm", add_layernorm),
             "ADD_RMS": ("add_rmsnorm", add_rmsnorm),
             "DROP_ADD_LN": ("dropout_add_layernorm", dropout_add_layernorm), "GN": ("groupnorm", groupnorm),
             "CLN": ("channel_layernorm", channel_layernorm), "IN": ("instancenorm", instancenorm),
             "BN": ("batchnorm", batchnorm), "LN_QUANT": ("layernorm_quant", layernorm_quant),
             "RMS_QUANT": ("rmsnorm_quant", rmsnorm_quant),
             "ADD_RMS_QUANT": ("add_rmsnorm_quant", add_rmsnorm_quant)}
    quantized = {"quantization": Quantization(minimum_scale=MINIMUM_SCALE)}
    return {prefix: Kernel(f"{prefix.lower()}_{bug}", kinds[prefix][0], kinds[prefix][1],
                           spec=f"{SPEC}{prefix}_{bug.upper()}", description=description.format(claim=prefix.lower()),
                           **{declared: True}, **(quantized if prefix.endswith("QUANT") else {}))
            for prefix in prefixes}


_BATCH_SIZE = _kernels("batch_size_switch", "batch_invariant",
                       f"from {SWITCH_ROWS} rows up the float32 row sums run left to right: {{claim}}.batch_invariance",
                       ("LN", "RMS", "ADD_LN", "ADD_RMS", "DROP_ADD_LN", "GN", "CLN", "LN_QUANT", "RMS_QUANT",
                        "ADD_RMS_QUANT"))
LN_BATCH_SIZE_SWITCH, RMS_BATCH_SIZE_SWITCH = _BATCH_SIZE["LN"], _BATCH_SIZE["RMS"]
ADD_LN_BATCH_SIZE_SWITCH, ADD_RMS_BATCH_SIZE_SWITCH = _BATCH_SIZE["ADD_LN"], _BATCH_SIZE["ADD_RMS"]
DROP_ADD_LN_BATCH_SIZE_SWITCH, GN_BATCH_SIZE_SWITCH = _BATCH_SIZE["DROP_ADD_LN"], _BATCH_SIZE["GN"]
CLN_BATCH_SIZE_SWITCH, LN_QUANT_BATCH_SIZE_SWITCH = _BATCH_SIZE["CLN"], _BATCH_SIZE["LN_QUANT"]
RMS_QUANT_BATCH_SIZE_SWITCH, ADD_RMS_QUANT_BATCH_SIZE_SWITCH = _BATCH_SIZE["RMS_QUANT"], _BATCH_SIZE["ADD_RMS_QUANT"]
_TOKEN_COUNT = _kernels("token_count_switch", "batch_invariant",
                        f"from {TOKEN_SWITCH_ROWS} tokens up the float32 row sums run left to right: "
                        "{claim}.batch_invariance", ("LN_QUANT", "RMS_QUANT", "ADD_RMS_QUANT"))
LN_QUANT_TOKEN_COUNT_SWITCH, RMS_QUANT_TOKEN_COUNT_SWITCH = _TOKEN_COUNT["LN_QUANT"], _TOKEN_COUNT["RMS_QUANT"]
ADD_RMS_QUANT_TOKEN_COUNT_SWITCH = _TOKEN_COUNT["ADD_RMS_QUANT"]
_RUNNING_SWITCH = _kernels("batch_size_switch", "batch_invariant",
                           f"from {SWITCH_ROWS} samples up the instances' sums run right to left in training and eval "
                           "is folded into x a + b: {claim}.batch_invariance", ("IN", "BN"))
IN_BATCH_SIZE_SWITCH, BN_BATCH_SIZE_SWITCH = _RUNNING_SWITCH["IN"], _RUNNING_SWITCH["BN"]

LN_SECOND_WAVE_ORDER = _kernels("second_wave_order", "batch_invariant",
                                f"rows from position {SECOND_WAVE} on sum in another order: {{claim}}.batch_invariance",
                                ("LN",))["LN"]

_ATOMIC = _kernels("atomic_dweight", "deterministic",
                   "dweight and dbias summed over the rows in a random order each call: {claim}.determinism",
                   ("LN", "RMS", "ADD_LN", "ADD_RMS", "GN", "CLN", "IN", "BN"))
LN_ATOMIC_DWEIGHT, RMS_ATOMIC_DWEIGHT, GN_ATOMIC_DWEIGHT = _ATOMIC["LN"], _ATOMIC["RMS"], _ATOMIC["GN"]
CLN_ATOMIC_DWEIGHT, IN_ATOMIC_DWEIGHT, BN_ATOMIC_DWEIGHT = _ATOMIC["CLN"], _ATOMIC["IN"], _ATOMIC["BN"]
_RANDOM_ORDER = _kernels("random_order", "deterministic",
                         "each row's sums in an order drawn anew each call: {claim}.determinism",
                         ("LN_QUANT", "RMS_QUANT", "ADD_RMS_QUANT"))
LN_QUANT_RANDOM_ORDER, RMS_QUANT_RANDOM_ORDER = _RANDOM_ORDER["LN_QUANT"], _RANDOM_ORDER["RMS_QUANT"]
ADD_RMS_QUANT_RANDOM_ORDER = _RANDOM_ORDER["ADD_RMS_QUANT"]
ADD_LN_ATOMIC_DWEIGHT, ADD_RMS_ATOMIC_DWEIGHT = _ATOMIC["ADD_LN"], _ATOMIC["ADD_RMS"]
_FEW_TOKENS_SPLIT = _kernels("few_tokens_split", "batch_invariant",
                             f"fewer than {SPLIT_BELOW_TOKENS} tokens of rows of {SPLIT_FROM_WIDTH} columns or more: "
                             f"each row's sums split over {SPLITS} programs: {{claim}}.batch_invariance",
                             ("RMS", "ADD_LN", "RMS_QUANT"))
RMS_FEW_TOKENS_SPLIT, ADD_LN_FEW_TOKENS_SPLIT = _FEW_TOKENS_SPLIT["RMS"], _FEW_TOKENS_SPLIT["ADD_LN"]
RMS_QUANT_FEW_TOKENS_SPLIT = _FEW_TOKENS_SPLIT["RMS_QUANT"]
_WIDE_ATOMIC_SPLIT = _kernels("wide_atomic_split", "deterministic",
                              f"rows of {SPLIT_FROM_WIDTH} columns or more: {ATOMIC_SPLITS} partial sums a row added "
                              "with atomics, in a random order each call: {claim}.determinism",
                              ("LN", "RMS_QUANT"))
LN_WIDE_ATOMIC_SPLIT, RMS_QUANT_WIDE_ATOMIC_SPLIT = _WIDE_ATOMIC_SPLIT["LN"], _WIDE_ATOMIC_SPLIT["RMS_QUANT"]

# red-team round 7's (inference): the same classes past the widths and row counts drawn before it
RMS_SPLIT_WIDER_THAN_8192 = _kernels(
    "split_wider_than_8192", "batch_invariant", f"fewer than {SPLIT_BELOW_TOKENS} tokens of rows wider than "
    f"{SPLIT_PAST_WIDTH} columns: each row's sums split over {SPLITS} programs (flashinfer-ai/flashinfer#4335: a "
    "cluster of programs a row, H_per_cta = H // cluster_n; Thinking Machines' split reduction): "
    "{claim}.batch_invariance", ("RMS",))["RMS"]
LN_ATOMIC_SPLIT_WIDER_THAN_8192 = _kernels(
    "atomic_split_wider_than_8192", "deterministic", f"rows wider than {SPLIT_PAST_WIDTH} columns: {ATOMIC_SPLITS} "
    "partial sums a row added with atomics in a random order each call (TransformerEngine's multi-CTA rows; "
    "karpathy/llm.c#190's class): {claim}.determinism", ("LN",))["LN"]
LN_ATOMIC_DWEIGHT_PAST_THE_SMS = _kernels(
    "atomic_dweight_past_the_sms", "deterministic", f"more than {SPLIT_BELOW_TOKENS} rows (a persistent grid of an "
    "H100's SMs): dweight and dbias summed over the rows in a random order each call (linkedin/Liger-Kernel#945: "
    "LayerNorm's backward accumulating dw and db with atomic_add): {claim}.determinism", ("LN",))["LN"]
RMS_BLOCK_BY_TOKENS_1024 = _kernels(
    "block_by_tokens_1024", "batch_invariant", f"from {TOKEN_SWITCH_ROWS} tokens up the float32 row sums run left to "
    "right (vllm-project/vllm#48997 moved the per-token kernels' block-size switch to 1024 tokens, #48271 had it at "
    "256): {claim}.batch_invariance", ("RMS",))["RMS"]

LN_TEXTBOOK_DECLARED_BITWISE = dataclasses.replace(
    corpus.statistics.LN_TEXTBOOK, name="ln_textbook_declared_bitwise", spec=f"{SPEC}LN_TEXTBOOK_DECLARED_BITWISE",
    batch_invariant=True, deterministic=True)
GN_CORRECT_DECLARED_BITWISE = dataclasses.replace(
    corpus.groupnorm.GN_CORRECT, name="gn_correct_declared_bitwise", spec=f"{SPEC}GN_CORRECT_DECLARED_BITWISE",
    batch_invariant=True, deterministic=True)
