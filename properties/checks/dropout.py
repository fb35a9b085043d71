"""Inverted dropout: the checks of the dropout claims (proofs/claims/dropout.py).

x never has a zero entry (properties/draws/dropout_strategies.py), and a kept element x/(1-p) is never 0, so the mask
the kernel drew is ``y != 0``. The statistical checks judge masks with the tests of
:mod:`properties.bounds.dropout_statistics`, each with its false-alarm probability and its power against named
alternatives derived there; ``alpha`` is the false alarm the example may spend (its test's share of
``dropout_statistics.BUDGET`` over the test's examples), so a run's false alarms for a correct kernel add up to at
most ``dropout_statistics.RUN_FALSE_ALARM``. The seeds come from the example: in the derandomized ci profile
every verdict is the same on every run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext

import numpy as np
import torch

from core import boundary, guard
from core.capabilities import dtype_name
from core.results import SERIES
from proofs.error_model import unit_roundoff
from proofs.mechanisms.base import round_to
from properties import norms, outcome
from properties.bounds import dropout_statistics as statistics
from properties.bounds import tolerance
from properties.bounds.dropout_statistics import Finding
from properties.checks.contracts import check_empty_batch_of, fail_on_missing_gradient, strided
from properties.checks.graph import check_recorded_graph


def _dropout(kernel, x: torch.Tensor, p: float, seed: int, inference: bool = False) -> torch.Tensor:
    """The kernel's output (``inference``: called under torch.inference_mode(), grad mode off, as a serving stack or
    an evaluation calls it: a kernel's path of its own there)."""
    with torch.inference_mode() if inference else nullcontext():
        return guard.call(kernel, x, p, seed, like=x)


def kept_mask(kernel, x: torch.Tensor, p: float, seed: int) -> np.ndarray:
    """The kernel's mask as int8 [rows, d] over x's logical rows (any layout)."""
    y = _dropout(kernel, x, p, seed)
    return (boundary.to_oracle(y).reshape(-1, x.shape[-1]) != 0).astype(np.int8)


def conclude(findings: list[Finding], meaning: str, **point) -> None:
    """Record the statistical findings of one example (their statistic/threshold ratios); fail if one rejects."""
    comparisons = [outcome.Comparison(finding.ratio, finding.describe()) for finding in findings]
    outcome.conclude(comparisons, meaning, label="statistic/threshold", **point)


def keep_rate_finding(masks: np.ndarray, p: float, alpha: float) -> Finding:
    """The exact two-sided binomial test of the kept count of ``masks`` (Binomial(n, 1-p) under H0) at level alpha."""
    acceptance = statistics.binomial_acceptance(masks.size, 1.0 - p, alpha, f"kept count of {masks.size} elements")
    return Finding(acceptance, int(masks.sum()))


# The partners of seed s that seed_findings compares s with (the last one where the mask has two rows or more)
SEED_PAIRS = ("s + 1", "s XOR 1", "s + 2", "s + 2^16", "s + 2^31", "s + 1, one element on", "s + 1, one row on")


def seed_findings(mask_of: Callable[[int], np.ndarray], seed: int, p: float, alpha: float) -> list[Finding]:
    """The masks of seed s and of another (``mask_of(seed)``) agree on Binomial(n,
    p^2 + (1-p)^2) elements, alpha split evenly: s + 1, s XOR 1 and s + 2 (a seed ignored, or its low bit); s + 2^16
    and s + 2^31 (a seed truncated to 16 or 31 bits: an int32 seed's sign bit dropped; not 2^32: torch's CPU
    generator, mt19937, keeps a seed's low 32 bits, so seeds are told apart within 32 bits; s < 2^31 as drawn); and
    s + 1 against s one row on, and one element on (a row or an element seeded with s plus its index, so that row r
    of s + 1 is row r + 1 of s)."""
    first, following = mask_of(seed), mask_of(seed + 1)
    pairs = {"s + 1": (first, following), "s XOR 1": (first, mask_of(seed ^ 1)), "s + 2": (first, mask_of(seed + 2)),
             "s + 2^16": (first, mask_of(seed + 2**16)), "s + 2^31": (first, mask_of(seed + 2**31)),
             "s + 1, one element on": (first.reshape(-1)[1:], following.reshape(-1)[:-1])}
    if first.ndim >= 2 and first.shape[0] >= 2:
        pairs["s + 1, one row on"] = (first[1:], following[:-1])
    return [statistics.agreement_finding(*statistics.pair_agreement(a, b), p, alpha / len(pairs),
                                         f"seeds s and {name}") for name, (a, b) in pairs.items()]


def check_values(kernel, x: torch.Tensor, p: float, seed: int, inference: bool = False) -> None:
    """Every output is exactly 0 or x/(1-p) within the rounding of the scaling (tolerance.dropout_scaling);
    ``inference``: grad mode off (:func:`_dropout`), where p is still the caller's."""
    y = norms.as_float64(_dropout(kernel, x, p, seed, inference))
    scaled = norms.as_float64(x) / (1.0 - p)
    kept = y != 0
    comparison = outcome.compare(np.where(kept, y, scaled), scaled, tolerance.dropout_scaling(x, p),
                                 "a kept value vs x/(1-p)")
    outcome.conclude(comparison, "dropout must zero an element or scale it by exactly 1/(1-p)",
                     p=p, d=x.shape[-1], dtype=dtype_name(x.dtype))


SCALE_ROUNDINGS = 4
"""Roundings to float32 (or a wider dtype) a correct kernel makes before its one rounding to storage: p to float32,
1 - p, 1/(1 - p) (or x/(1 - p)), x times the scale."""


def once_rounded(x: torch.Tensor, p: float) -> tuple[np.ndarray, np.ndarray]:
    """[low, high] (float64, elementwise) holding every value a correct kernel may store for a kept x: R(v), R the
    rounding to x's dtype (nearest), v = x/(1-p) computed in float32 or wider, |v - x/(1-p)| <= g |x/(1-p)| with
    g = (1 + u32)^SCALE_ROUNDINGS - 1 + 2 u64 (the float64 reference's own roundings). R is monotone, so R(v) lies in
    [R(min(a, b)), R(max(a, b))], a, b = x/(1-p) (1 -+ g). A scale 1/(1-p) held in a 16-bit dtype is off by up to
    u_16 (bfloat16 at p = 0.1: -1.4e-3), the same for every element: far outside g = 2.4e-7, so a kept value then
    lies outside wherever its rounding is not the same as the exact value's, on ~|delta| / ulp of the kept elements."""
    exact = norms.as_float64(x) / (1.0 - p)
    slack = (1.0 + unit_roundoff("float32")) ** SCALE_ROUNDINGS - 1.0 + 2.0 * unit_roundoff("float64")
    a, b = exact * (1.0 - slack), exact * (1.0 + slack)
    storage = dtype_name(x.dtype)
    return round_to(np.minimum(a, b), storage), round_to(np.maximum(a, b), storage)


ONCE_ROUNDED = "kept values not x/(1-p) rounded once"


def check_kept_values_rounded_once(kernel, x: torch.Tensor, p: float, seed: int) -> None:
    """Every kept element is x/(1-p), computed in float32 or wider, rounded once to x's dtype (:func:`once_rounded`):
    not a scale 1/(1-p) rounded to a 16-bit dtype, a bias E[y] != x that every kept element shares (within the
    per-element bound of dropout.values, which allows three storage roundings)."""
    y = norms.as_float64(_dropout(kernel, x, p, seed))
    low, high = once_rounded(x, p)
    kept = y != 0
    outside = kept & ((y < low) | (y > high))
    count = int(outside.sum())
    message = ""
    if count:
        first = tuple(int(i) for i in np.argwhere(outside)[0])
        ratio = y[outside] / (norms.as_float64(x)[outside] / (1.0 - p)) - 1.0
        message = (f"{ONCE_ROUNDED} to {dtype_name(x.dtype)}: {count} of {int(kept.sum())} kept elements outside the "
                   f"values a float32 x/(1-p) rounds to; at index {first} x = {float(norms.as_float64(x)[first]):.9g}, "
                   f"y = {y[first]:.9g}, allowed [{low[first]:.9g}, {high[first]:.9g}]; y/(x/(1-p)) - 1 there: "
                   f"median {float(np.median(ratio)):.3g}, range [{float(ratio.min()):.3g}, {float(ratio.max()):.3g}]")
    outcome.exact(count == 0, message, "the kept values must be x/(1-p) rounded once to x's dtype (a scale 1/(1-p) "
                  "rounded to the storage dtype biases every kept element alike)", p=p, d=x.shape[-1],
                  dtype=dtype_name(x.dtype))


def shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the storages of a and b overlap (the same tensor, a view of it, or of its buffer): their byte ranges
    [data_ptr, data_ptr + nbytes) of the untyped storages intersect."""
    first, second = a.untyped_storage(), b.untyped_storage()
    if not first.nbytes() or not second.nbytes() or a.device != b.device:
        return False
    first_end, second_end = first.data_ptr() + first.nbytes(), second.data_ptr() + second.nbytes()
    return first.data_ptr() < second_end and second.data_ptr() < first_end


def aliased_outputs(outputs: dict[str, torch.Tensor], inputs: dict[str, torch.Tensor | None]) -> list[str]:
    """'y shares x's storage' for each output that overlaps an input (:func:`shares_memory`)."""
    return [f"{out} shares {name}'s storage" for out, got in outputs.items() for name, given in inputs.items()
            if isinstance(given, torch.Tensor) and shares_memory(got, given)]


def check_edge_probabilities(kernel, x: torch.Tensor, seed: int) -> None:
    """p = 0 returns x bit for bit; p = 1 returns zeros (a NaN or inf there is a KernelFault: failed)."""
    kept_all, dropped_all = _dropout(kernel, x, 0.0, seed), _dropout(kernel, x, 1.0, seed)
    changed = int((kept_all != x).sum())
    nonzero = int((dropped_all != 0).sum())
    outcome.exact(changed == 0 and nonzero == 0,
                  f"p = 0 changed {changed} of {x.numel()} elements; p = 1 left {nonzero} nonzero",
                  "p = 0 must return x exactly and p = 1 zeros", d=x.shape[-1], dtype=dtype_name(x.dtype))


def check_fresh_outputs_at_edge_probabilities(kernel, x: torch.Tensor, seed: int) -> None:
    """At p = 0 and p = 1 the output is a fresh tensor: not x itself or a view of its storage (ATen's ``return
    input`` at p = 0, whose caller's in-place update of y writes x)."""
    aliased = [f"p = {p:g}: {what}" for p in (0.0, 1.0)
               for what in aliased_outputs({"y": _dropout(kernel, x, p, seed)}, {"x": x})]
    outcome.exact(not aliased, "; ".join(aliased), "the output must be a fresh tensor at p = 0 and p = 1",
                  d=x.shape[-1], dtype=dtype_name(x.dtype))


def check_empty_batch(kernel, x: torch.Tensor, p: float, seed: int, dy: torch.Tensor) -> None:
    """x (and dy) with no rows, [0, d] or [2, 0, d]: an empty y and dx of x's shape, no error
    (properties.checks.contracts.check_empty_batch_of)."""
    check_empty_batch_of(kernel, {"x": x, "p": p, "seed": seed}, {"y": dy})


def check_gradient_at_edge_probabilities(kernel, x: torch.Tensor, seed: int, dy: torch.Tensor) -> None:
    """The backward of p = 0 is the identity, dL/dx = dy bit for bit (dy * 1/(1 - 0) is exact), and of p = 1 zero,
    dL/dx = 0 exactly: a backward that scales by 1/(1-p) where its forward special-cased p = 1 gives 0 * inf = NaN
    (a NaN or inf is a KernelFault: failed)."""
    norms.require_backward(kernel)
    wrong = []
    for p, expected in ((0.0, dy), (1.0, torch.zeros_like(dy))):
        leaf = x.detach().clone().requires_grad_(True)
        try:
            (dx,) = guard.grad(kernel, _dropout(kernel, leaf, p, seed), (leaf,), dy)
        except guard.KernelFault as fault:  # a constant output (zeros_like(x)): x gets no gradient at all
            fail_on_missing_gradient(kernel, fault, p=p, d=x.shape[-1], dtype=dtype_name(x.dtype))
            return
        differ = int((dx != expected).sum())
        if differ:
            wrong.append(f"p = {p:g}: dL/dx differs from {'dy' if p == 0 else 0} in {differ} of {dx.numel()} elements")
    outcome.exact(not wrong, "; ".join(wrong), "the backward of p = 0 must return dy exactly and of p = 1 zeros",
                  d=x.shape[-1], dtype=dtype_name(x.dtype))


def check_gradient(kernel, x: torch.Tensor, p: float, seed: int, dy: torch.Tensor,
                   zeros: torch.Tensor | None = None) -> None:
    """dL/dx = dy * m / (1-p) with the forward's own mask m = (y != 0): 0 exactly where the forward dropped, the
    rounding bound of the scaling where it kept (tolerance.dropout_scaling of dy). x is differentiated in its layout
    (norms.copy_in_its_layout: a mask keyed by memory offsets in the forward and by logical ones in the backward
    differs on a strided x, pytorch#47176). ``zeros`` (bool, x's shape): those elements of x set to exactly 0 in the
    differentiated call, its mask read from the same seed's call on x (no zero, so m = (y != 0) there): the mask is
    the seed's whatever x holds, and a backward that recovers it from y / x (0/0 where x = 0, kaldi-asr/kaldi#3890)
    gets those elements wrong."""
    norms.require_backward(kernel)
    leaf = norms.copy_in_its_layout(x)
    if zeros is not None:
        kept = norms.as_float64(_dropout(kernel, x, p, seed)) != 0
        leaf[zeros] = 0
    leaf.requires_grad_(True)
    y = _dropout(kernel, leaf, p, seed)
    (dx,) = guard.grad(kernel, y, (leaf,), dy)
    if zeros is None:
        kept = norms.as_float64(y) != 0
    expected = np.where(kept, norms.as_float64(dy) / (1.0 - p), 0.0)
    bound = np.where(kept, tolerance.dropout_scaling(dy, p), 0.0)
    comparison = outcome.compare(dx, expected, bound, "dL/dx vs dL/dy * m/(1-p), m the forward's mask")
    outcome.conclude(comparison, "the gradient must be the forward's mask times 1/(1-p)",
                     p=p, d=x.shape[-1], dtype=dtype_name(x.dtype))


def check_backward_of_the_recorded_graph(kernel, x: torch.Tensor, p: float, seed: int, dy: torch.Tensor) -> None:
    """x and y written in place after the forward (``h = dropout(x); h += residual``), and a second backward of one
    graph (properties.checks.graph): a backward that reads its mask from a y it kept as an attribute reads the
    written y."""
    check_recorded_graph(kernel, lambda: {"x": x, "p": p, "seed": seed}, {"y": dy},
                         {"x": tolerance.dropout_scaling(dy, p)}, p=p, d=x.shape[-1], dtype=dtype_name(x.dtype))


def check_keep_rate(kernel, x: torch.Tensor, p: float, seed: int, alpha: float) -> None:
    """The kept count of the n elements is Binomial(n, 1-p): exact two-sided test at level alpha."""
    masks = kept_mask(kernel, x, p, seed)
    conclude([keep_rate_finding(masks, p, alpha)], "the keep rate is not 1 - p", p=p, d=x.shape[-1],
             measured=float(masks.mean()), predicted=1.0 - p)


def check_mask_distribution(kernel, x: torch.Tensor, p: float, seed: int, alpha: float) -> None:
    """The per-row kept counts, over the rows of two calls (seeds s and s + 1, half of x each), are i.i.d.
    Binomial(d, 1-p): the two-sided Chernoff test of their dispersion at level alpha."""
    half = max(1, x.shape[0] // 2)
    masks = np.concatenate([kept_mask(kernel, x[:half], p, seed), kept_mask(kernel, x[half:], p, seed + 1)])
    conclude([statistics.dispersion_finding(masks, p, alpha)],
              "the per-row kept count is not Binomial(d, 1-p) (a fixed count per row, or shared draws)",
              p=p, d=x.shape[-1])


def check_independence(kernel, x: torch.Tensor, p: float, seed: int, alpha: float) -> None:
    """Neighbouring bits, bits of one column of two rows, and the counts of two rows are those of independent bits."""
    masks = kept_mask(kernel, x, p, seed)
    conclude(statistics.independence_findings(masks, p, alpha),
              "mask bits are not independent (neighbours or rows share draws)", p=p, d=x.shape[-1])


def check_no_row_repeats_another(kernel, x: torch.Tensor, p: float, seed: int, alpha: float) -> None:
    """No row's mask is another's at a lag of up to dropout_statistics.ROW_LAGS rows and any shift (row streams that
    overlap): the exact binomial tests of dropout_statistics.lagged_rows_finding, at level alpha together."""
    masks = kept_mask(kernel, x, p, seed)
    finding = statistics.lagged_rows_finding(masks, p, alpha)
    if finding is None:
        raise ValueError(f"x of {x.shape[0]} row(s): no pair of rows to compare")
    conclude([finding], "a row's mask repeats (part of) another row's, shifted: per-row random streams overlap",
             p=p, d=x.shape[-1])


def check_seeds(kernel, x: torch.Tensor, p: float, seed: int, alpha: float) -> None:
    """The masks of seed s and of each partner of :func:`seed_findings` agree on Binomial(n, p^2 + (1-p)^2)
    elements."""
    conclude(seed_findings(lambda s: kept_mask(kernel, x, p, s), seed, p, alpha),
             "masks of different seeds are not independent (the seed is ignored or truncated)", p=p, d=x.shape[-1],
             seed=seed)


LAYOUTS = ("transposed", "every other column")


def check_layout_invariance(kernel, x: torch.Tensor, p: float, seed: int, alpha: float) -> None:
    """The mask of x as a non-contiguous view (contracts.strided: the transpose of a column-major copy, every other
    column of a wider buffer) passes the dispersion and independence tests (alpha / 2 per layout, half of it for
    the dispersion, half for the independence tests)."""
    findings = []
    share = alpha / len(LAYOUTS)
    for layout in LAYOUTS:
        masks = kept_mask(kernel, strided(x, layout), p, seed)
        findings += [finding.named(layout) for finding in (statistics.dispersion_finding(masks, p, share / 2),
                                                           *statistics.independence_findings(masks, p, share / 2))]
    conclude(findings, "a non-contiguous input gets a mask that is not i.i.d. Bernoulli(1-p)", p=p,
              d=x.shape[-1])


def check_variance_bias(kernel, x: torch.Tensor, p: float, seed: int, alpha: float) -> None:
    """Mean over R replicas of the row of Var(x m/(1-p)), m the kernel's masks, vs its exact expectation under
    i.i.d. masks: Bernstein slack at level alpha, at most a quarter of the effect of a fixed count per row and of
    blocks of 2, 4 or d elements (dropout_statistics.VarianceBiasPlan)."""
    plan = statistics.VarianceBiasPlan(norms.as_float64(x)[0], p, alpha)
    if not plan.feasible:
        raise ValueError(f"the variance-bias test cannot reach its power on this row within {plan.max_replicas} masks")
    row = x[:1]
    masks = kept_mask(kernel, row.expand(plan.replicas, row.shape[-1]).contiguous(), p, seed)
    measured = plan.measured(masks)
    conclude([Finding(plan.acceptance(), measured)],
              "the variance after dropout is not Var(x) + p(d-1)/(d(1-p)) (Var(x) + mean^2): the mask is not "
              "i.i.d. Bernoulli(1-p)", predicted=plan.null[0],
              **SERIES["dropout"].point(p=p, d=row.shape[-1], measured=measured, var=float(plan.x.var()),
                                        mean=float(plan.x.mean())))


@contextmanager
def threads(count: int) -> Iterator[None]:
    """torch's intra-op thread count set to ``count`` for the block, the caller's restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def other_thread_count() -> int:
    """A thread count other than the current one: 1, or 2 where the process runs one thread already."""
    return 2 if torch.get_num_threads() == 1 else 1


def repeated_calls(call: Callable[[torch.Tensor], tuple[torch.Tensor, ...]], x: torch.Tensor
                   ) -> dict[str, tuple[torch.Tensor, ...]]:
    """The outputs of ``call`` on x, and again: on x, on a copy of x (another address: a mask keyed by the storage's
    address), and on x under :func:`other_thread_count` threads (a mask drawn in per-thread chunks)."""
    calls = {"first": call(x), "a second call": call(x), "a call on a copy of x": call(x.clone())}
    count, running = other_thread_count(), torch.get_num_threads()
    with threads(count):
        calls[f"a call under {count} thread(s) (the process runs {running})"] = call(x)
    return calls


def determinism_differences(calls: dict[str, tuple[torch.Tensor, ...]], names: tuple[str, ...]) -> list[str]:
    """'{call}: {output} differs in k of n elements' for each of :func:`repeated_calls`' later calls whose outputs
    are not the first's bit for bit."""
    first = calls["first"]
    return [f"{call}: {name} differs in {int((a != b).sum())} of {a.numel()} elements"
            for call, outputs in calls.items() if call != "first"
            for name, a, b in zip(names, first, outputs, strict=True) if not torch.equal(a, b)]


def check_determinism(kernel, x: torch.Tensor, p: float, seed: int) -> None:
    """The same seed gives the same output, bit for bit: called again, on a copy of x and under another thread count
    (:func:`repeated_calls`)."""
    differ = determinism_differences(repeated_calls(lambda t: (_dropout(kernel, t, p, seed),), x), ("y",))
    outcome.exact(not differ, f"seed {seed}, against the first call: {'; '.join(differ)}",
                  "dropout must be a function of (x, p, seed): not of the call, x's address or the thread count",
                  p=p, d=x.shape[-1], n=x.numel())


def check_inputs_unmodified(kernel, x: torch.Tensor, p: float, seed: int, inference: bool = False) -> None:
    """x is not written by the call (``inference``: grad mode off, where an in-place path is tempting)."""
    before = x.clone()
    _dropout(kernel, x, p, seed, inference)
    outcome.exact(torch.equal(before, x), f"x changed in {int((before != x).sum())} elements",
                  "the kernel wrote into its input", d=x.shape[-1])
