"""The numerical checks that the Fact steps of claim numerics.error_model run (proofs/claims/numerics.py).

Each is a function of no argument returning True when the statement of its step holds on seeded float32, float16 and
bfloat16 computations simulated in numpy (proofs.simulate) or emulated bit for bit (proofs.aten_sum), and, where the
step says so, that a wrong computation breaks it (a one-pass variance, a sequential sum declared as a tree, aligned
rows): the bound of a sum in any order, the probabilistic factor and when it falls back to the worst case, the
declared reduction trees, the forward and backward bounds of proofs.error_model on adversarial rows. The exact
(SymPy) checks on concrete rows live in proofs/claims/symbolic_checks.py.
"""

from __future__ import annotations

import dataclasses
import itertools
from functools import cache

import numpy as np

from proofs import aten_sum, error_model, oracles, probabilistic, reduction, simulate


def sum_order_bound_holds() -> bool:
    """|fl(sum) - sum| <= gamma_{n-1} sum|x| for sequential and pairwise float32 sums of hard rows."""
    rng = np.random.default_rng(0)
    u = error_model.unit_roundoff("float32")
    for width in (7, 64, 1000):
        rows = (rng.standard_normal((50, width)) * 10.0 ** rng.integers(-3, 4, (50, width))).astype(np.float32)
        exact = rows.astype(np.float64).sum(axis=-1)
        bound = (width - 1) * u / (1 - (width - 1) * u) * np.abs(rows.astype(np.float64)).sum(axis=-1)
        for order in ("sequential", "pairwise"):
            if np.any(np.abs(simulate.summed(rows, order).astype(np.float64) - exact) > bound):
                return False
    return True


@cache
def worst_ratios(method: str, widths: tuple[int, ...], mean_over_std: tuple[float, ...], dtype: str,
                 model: str = error_model.DEFAULT_BOUND) -> float:
    """max |y_sim - y_oracle| / forward_bound (``model``) over adversarial rows, eps 1e-12..1e-2, for one method."""
    rng = np.random.default_rng(1)
    storage = {"float32": np.float32, "float16": np.float16}[dtype]
    u_out = error_model.unit_roundoff(dtype)
    worst = 0.0
    for width in widths:
        for shift in mean_over_std:
            for epsilon in (1e-12, 1e-5, 1e-2):
                row = simulate.adversarial_rows(rng, 4, width, shift, storage)
                if method == "one_pass":
                    got = simulate.layernorm_one_pass(row, epsilon, out=storage)
                elif method == "rms":
                    got = simulate.rmsnorm_reference(row, epsilon, out=storage)
                else:
                    got = simulate.layernorm_two_pass(row, epsilon, out=storage, order=method)
                kind = "rms" if method == "rms" else "ln"
                exact = oracles.rmsnorm(row, None, epsilon) if kind == "rms" else oracles.layernorm(row, None, None,
                                                                                                   epsilon)
                bound = error_model.forward_bound(row, None, None, epsilon, error_model.unit_roundoff("float32"),
                                                  u_out, kind, model)
                finite = np.isfinite(bound)
                if finite.any():
                    ratio = np.abs(got.astype(np.float64) - exact)[finite] / bound[finite]
                    worst = max(worst, float(np.max(ratio)))
    return worst


def backward_within_bound() -> bool:
    """A float32 LayerNorm backward simulated in numpy (sequential and pairwise sums) stays within backward_bound on
    adversarial rows (|mean|/std 0 and 1e3, d = 2, 64, 1024), both bound models."""
    rng = np.random.default_rng(3)
    u = error_model.unit_roundoff("float32")
    for width, model in itertools.product((2, 64, 1024), error_model.BOUNDS):
        for shift in (0.0, 1e3):
            row = simulate.adversarial_rows(rng, 4, width, shift, np.float32)
            upstream = rng.standard_normal(row.shape).astype(np.float32).astype(np.float64)
            for order in ("sequential", "pairwise"):
                got = simulate.layernorm_backward(row, upstream, 1e-5, order=order).astype(np.float64)
                exact = oracles.layernorm_vjp(row, None, 1e-5, upstream)[0]
                bound = error_model.backward_bound(row, None, 1e-5, upstream, u, u, "ln", model)[0]
                if np.any(np.abs(got - exact) > bound):
                    return False
    return True


def _node_sums(weights: tuple[float, ...]) -> list[float]:
    """sum_v A_v^2 of every full binary tree over the leaves ``weights`` (A_v the sum of the leaves under v)."""
    @cache
    def of(subset: frozenset[int]) -> tuple[float, ...]:
        if len(subset) == 1:
            return (0.0,)
        first, *others = sorted(subset)
        total = sum(weights[k] for k in subset) ** 2
        found = []
        for size in range(len(others)):
            for chosen in itertools.combinations(others, size):
                left = frozenset((first, *chosen))
                found += [a + b + total for a in of(left) for b in of(subset - left)]
        return tuple(found)

    return list(of(frozenset(range(len(weights)))))


def decreasing_sequential_is_the_worst_tree() -> bool:
    """max over trees of sum_v A_v^2 = sum_{k=2}^m T_k^2 (T_k: sum of the k largest weights), m = 2..6."""
    rng = np.random.default_rng(7)
    for m in range(2, 7):
        for weights in (rng.exponential(size=m), np.ones(m), rng.integers(0, 3, m).astype(float)):
            ordered = np.cumsum(np.sort(weights)[::-1])
            bound = float(np.sum(ordered[1:] ** 2))
            if not np.isclose(max(_node_sums(tuple(weights))), bound, rtol=1e-12):
                return False
    return True


def float32_sums_within_the_probabilistic_factor() -> bool:
    """Sequential, pairwise and blocked (256, sequential across blocks) float32 sums of the suite's row
    distributions stay within sum_factor * sum|x|; a sequential sum of a constant row breaks the sqrt bound by
    more than 2x, and probabilistic.independent rejects that row (the fallback to the worst case)."""
    rng = np.random.default_rng(11)
    u = error_model.unit_roundoff("float32")
    lam = probabilistic.lam(1)
    for width, offset in itertools.product((100, 1000, 8192), (0.0, 10.0, 1e3)):
        for values in (rng.standard_normal((20, width)), rng.uniform(-1, 1, (20, width)),
                       rng.standard_normal((20, width)) * (rng.uniform(size=(20, width)) < 0.2),
                       rng.integers(-8, 9, (20, width)).astype(float)):
            rows = (offset + values).astype(np.float32)
            exact = rows.astype(np.float64)
            bound = probabilistic.sum_factor(exact, u, lam)[..., 0] * np.abs(exact).sum(-1)
            blocked = simulate.summed(np.stack([simulate.summed(b, "pairwise") for b in
                                                np.array_split(rows, -(-width // 256), axis=-1)], -1), "sequential")
            for got in (simulate.summed(rows, "sequential"), simulate.summed(rows, "pairwise"), blocked):
                if np.any(np.abs(got.astype(np.float64) - exact.sum(-1)) > bound):
                    return False
    constant = np.full((1, 65536), 0.1, np.float32)
    error = abs(float(simulate.summed(constant, "sequential")[0]) - float(constant.astype(np.float64).sum()))
    sqrt_bound = lam * u * float(probabilistic.tree_factor(constant)[0, 0]) * float(np.abs(constant).sum())
    return error > 2 * sqrt_bound and not probabilistic.independent(constant)[0, 0]


def aligned_rows_fall_back() -> bool:
    """Rows whose residues modulo the partial sums' ulps are concentrated break the sqrt bound in a sequential float32
    sum (shifted far from 0 at d = 65536; integers plus a fractional shift at d = 8192), and probabilistic.aligned
    flags them (the worst case applies); normal rows with a small offset are not flagged."""
    rng = np.random.default_rng(17)
    u = error_model.unit_roundoff("float32")
    lam = probabilistic.lam(1)
    shifted = (999.7 + rng.standard_normal((4, 65536))).astype(np.float32)
    integers = (49.3 + rng.integers(-8, 9, (4, 8192))).astype(np.float32)
    for rows in (shifted, integers):
        exact = rows.astype(np.float64)
        error = np.abs(simulate.summed(rows, "sequential").astype(np.float64) - exact.sum(-1))
        sqrt_bound = lam * u * probabilistic.tree_factor(exact)[..., 0] * np.abs(exact).sum(-1)
        if not (np.all(error > sqrt_bound) and np.all(probabilistic.aligned(exact, u))):
            return False
    spread = (10.0 + rng.standard_normal((4, 8192))).astype(np.float32).astype(np.float64)
    return not np.any(probabilistic.aligned(spread, u))


def declared_sums_within_the_depth_bounds() -> bool:
    """numpy's float32 pairwise sum (np.sum: the Triton interpreter's tl.sum) of the suite's row distributions stays
    within min(gamma_D, P_D) sum|x|, D = reduction.NUMPY_PAIRWISE's depth, and the declared exact tree of our Triton
    kernels (exact_tree="numpy_pow2", block 8192: np.sum over the row zero-padded to a power of two, or over 8192
    lanes the blocks of a wider row were added into, simulate.lanes_sum) within the factor of its own sum_v A_v^2 and
    depth; a sequential float32 sum of offset rows at d = 65536 exceeds that bound on most rows (a false declaration
    is caught) but not the order-agnostic one."""
    rng = np.random.default_rng(13)
    u = error_model.unit_roundoff("float32")
    lam = probabilistic.lam(1)
    lanes = dataclasses.replace(reduction.NUMPY_PAIRWISE, exact_tree="numpy_pow2", block=8192)
    for width, offset in itertools.product((8, 100, 1000, 8192, 20000, 65536), (0.0, 10.0, 1e3)):
        for values in (rng.standard_normal((8, width)), rng.uniform(-1, 1, (8, width)),
                       rng.integers(-8, 9, (8, width)).astype(float)):
            rows = (offset + values).astype(np.float32)
            exact = rows.astype(np.float64)
            trees = ((np.sum(rows, axis=-1), reduction.NUMPY_PAIRWISE.depth(width), None),
                     (simulate.lanes_sum(rows, lanes.block), lanes.depth(width), lanes.tree_factor(exact)))
            for got, depth, tree in trees:
                factor = probabilistic.sum_factor(exact, u, lam, depth=depth, exact=tree)[..., 0]
                if np.any(np.abs(got.astype(np.float64) - exact.sum(-1)) > factor * np.abs(exact).sum(-1)):
                    return False
    rows = (1e3 + rng.standard_normal((16, 65536))).astype(np.float32)
    exact = rows.astype(np.float64)
    error = np.abs(simulate.summed(rows, "sequential").astype(np.float64) - exact.sum(-1))
    declared = probabilistic.sum_factor(exact, u, lam, depth=reduction.NUMPY_PAIRWISE.depth(65536))[..., 0]
    agnostic = probabilistic.sum_factor(exact, u, lam)[..., 0]
    total = np.abs(exact).sum(-1)
    caught = error / (declared * total)
    return bool(np.median(caught) > 1 and caught.max() > 3 and np.all(error < agnostic * total))


def aten_cascade_sum_within_its_tree() -> bool:
    """ATen's CPU float32 sum (proofs.aten_sum: torch's own bit for bit, tests/test_aten_sum.py): its magnitude
    arithmetic's sum_v A_v^2 is the explicit tree's node-by-node sum (sparse rows: zero operands are no nodes); its
    sums of normal, uniform and integer rows squared and offset (d to 65536, a one-row call's thread split
    included) stay within lambda u (1 + gamma_D) sqrt(sum_v A_v^2); a sequential sum of offset rows at d = 65536
    exceeds that bound on most rows."""
    rng = np.random.default_rng(19)
    for width in (2, 3, 7, 9, 33, 129, 1000):
        row = np.abs(rng.standard_normal(width)) * (rng.uniform(size=width) < 0.7)
        if not np.isclose(aten_sum.squares(row[None])[0], aten_sum.node_tree(row).squares(), rtol=1e-12):
            return False
    u = error_model.unit_roundoff("float32")
    lam = probabilistic.lam(1)
    for width, offset in itertools.product((8, 100, 1000, 8192, 65536), (0.0, 10.0, 1e3)):
        for values in (rng.standard_normal((4, width)), rng.uniform(-1, 1, (4, width)),
                       rng.integers(-8, 9, (4, width)).astype(float)):
            terms = np.square((offset + values).astype(np.float32))
            exact = terms.astype(np.float64)
            bound = probabilistic.sum_factor(exact, u, lam, exact=aten_sum.tree_factor(exact))[..., 0]
            got = aten_sum.float32_sum(terms)  # one call of 4 rows; below, the first row alone (split if wide)
            if np.any(np.abs(got - exact.sum(-1)) > bound * exact.sum(-1)) or np.any(
                    np.abs(aten_sum.float32_sum(terms[:1], threads=2) - exact[0].sum()) > bound[0] * exact[0].sum()):
                return False
    terms = np.square((10.0 + rng.standard_normal((16, 65536))).astype(np.float32))
    exact = terms.astype(np.float64)
    error = np.abs(simulate.summed(terms, "sequential").astype(np.float64) - exact.sum(-1))
    bound = probabilistic.sum_factor(exact, u, lam, exact=aten_sum.tree_factor(exact))[..., 0] * exact.sum(-1)
    return bool(np.median(error / bound) > 1)


def exact_trees_within_their_node_sums() -> bool:
    """The rigorous worst case of a declared tree, u (1 + gamma_D) sum_v A_v with each node at half an ulp of its
    binade (Reduction.tree_sums), holds for the float32 sums of both exact trees (ATen's cascade sum, bit for bit
    torch's; our Triton lanes tree, bit for bit the interpreter's) on structured rows, where the probabilistic factor
    falls back to it: integers plus a shift, a constant, two values, rows 1e3 std off 0, their squares; d to 65536.
    A sequential sum declared as the Triton tree exceeds it on the offset rows at d = 65536."""
    rng = np.random.default_rng(31)
    u = error_model.unit_roundoff("float32")
    lanes = dataclasses.replace(reduction.NUMPY_PAIRWISE, block=8192, two_pass=True, exact_tree="numpy_pow2")
    cascade = dataclasses.replace(reduction.NUMPY_PAIRWISE, exact_tree="aten_cascade_sum")
    for width in (8, 100, 1000, 8192, 20000, 65536):
        rows = np.stack([rng.integers(-8, 9, width) + 0.1, np.full(width, 0.1), rng.choice([0.3, 7.1], width),
                         1e3 + rng.standard_normal(width)]).astype(np.float32)
        for terms in (rows, np.square(rows)):
            exact = terms.astype(np.float64)
            for shape, got in ((lanes, simulate.lanes_sum(terms, lanes.block)), (cascade, aten_sum.float32_sum(terms))):
                depth = min(reduction.depth(shape, width), width - 1)
                if shape is cascade:
                    depth = aten_sum.depth(width)
                linear = shape.tree_sums(exact, 1 + probabilistic.gamma(depth, u))[1][..., 0]
                bound = u * (1 + probabilistic.gamma(depth, u)) * linear * np.abs(exact).sum(-1)
                if np.any(np.abs(got.astype(np.float64) - exact.sum(-1)) > bound):
                    return False
    rows = (1e3 + rng.standard_normal((8, 65536))).astype(np.float32)
    exact = rows.astype(np.float64)
    depth = reduction.depth(lanes, 65536)
    bound = u * (1 + probabilistic.gamma(depth, u)) * lanes.tree_sums(exact, 1 + probabilistic.gamma(depth, u))[1]
    error = np.abs(simulate.summed(rows, "sequential").astype(np.float64) - exact.sum(-1))
    return bool(np.median(error / (bound[..., 0] * exact.sum(-1))) > 1)


def split_trees_within_their_bound() -> bool:
    """The split bound of our Triton kernels' declared tree (Reduction.tree_split: nodes at aligned ulps and the
    largest others rigorously, the rest by Azuma-Hoeffding) holds for its float32 sums (simulate.lanes_sum, the
    interpreter's bits) of normal rows offset 1e3, integers plus 0.1, 49.3 and 4900.25, lognormal rows and their
    squares, d to 65536, wherever the terms are independent (probabilistic.independent); a sequential sum declared as
    that tree exceeds it on every offset row at d = 65536."""
    rng = np.random.default_rng(37)
    u = error_model.unit_roundoff("float32")
    lam = probabilistic.lam(1)
    lanes = dataclasses.replace(reduction.NUMPY_PAIRWISE, block=8192, two_pass=True, exact_tree="numpy_pow2")
    for width in (8, 100, 1000, 8192, 20000, 65536):
        rows = np.stack([1e3 + rng.standard_normal(width), rng.integers(-8, 9, width) + 0.1,
                         rng.integers(-8, 9, width) + 49.3, rng.integers(-8, 9, width) + 4900.25,
                         rng.lognormal(0, 2, width)]).astype(np.float32)
        depth = min(reduction.depth(lanes, width), width - 1)
        for terms in (rows, np.square(rows)):
            exact = terms.astype(np.float64)
            split = lanes.tree_split(exact, 1 + probabilistic.gamma(depth, u), u, lam)[..., 0]
            error = np.abs(simulate.lanes_sum(terms, lanes.block).astype(np.float64) - exact.sum(-1))
            if np.any((error > split * np.abs(exact).sum(-1)) & probabilistic.independent(exact)[..., 0]):
                return False
    rows = (1e3 + rng.standard_normal((8, 65536))).astype(np.float32)
    exact = rows.astype(np.float64)
    split = lanes.tree_split(exact, 1 + probabilistic.gamma(reduction.depth(lanes, 65536), u), u, lam)[..., 0]
    error = np.abs(simulate.summed(rows, "sequential").astype(np.float64) - exact.sum(-1))
    return bool(np.all(error > split * exact.sum(-1)))


def half_ulp_bounds_round_to_nearest() -> bool:
    """|round(t) - t| <= u 2^floor(log2|t|) for float64 t rounded to float32/float16/bfloat16 (normal range), random
    and at the binade edges (just below and above powers of two), and some t come within 2^-10 of the bound."""
    from proofs.mechanisms import round_to

    rng = np.random.default_rng(29)
    edges = np.exp2(np.arange(-8, 9))
    values = np.concatenate([rng.uniform(-1, 1, 10**6) * np.exp2(rng.integers(-8, 9, 10**6)),
                             edges * (1 - 2.0**-30), edges * (1 + 2.0**-30), -edges])
    for dtype, smallest_normal in (("float32", 2.0**-126), ("float16", 2.0**-14), ("bfloat16", 2.0**-126)):
        u = error_model.unit_roundoff(dtype)
        normal = values[np.abs(values) >= smallest_normal]  # below: the underflow term eta of the model
        half_ulp = u * np.exp2(np.floor(np.log2(np.abs(normal))))
        error = np.abs(round_to(normal, dtype) - normal)
        if np.any(error > half_ulp) or np.max(error / half_ulp) < 1 - 2.0**-10:
            return False
    return True


def two_pass_within_the_bound() -> bool:
    """max |y_sim - y| / B <= 1 for two-pass (sequential, pairwise) and Welford LayerNorm and for RMSNorm, float32 and
    float16 output, both bound models (:func:`worst_ratios`: |mean|/std to 1e4, d to 1024, eps 1e-12..1e-2)."""
    return all(worst_ratios(method, (3, 64, 1024), (0.0, 1e2, 1e4), dtype, model) <= 1
               for method in ("sequential", "pairwise", "welford", "rms") for dtype in ("float32", "float16")
               for model in error_model.BOUNDS)


def one_pass_breaks_the_bound() -> bool:
    """A one-pass variance E[x^2] - mu^2 exceeds the bound more than tenfold at |mean|/std = 1e4, d <= 64."""
    return worst_ratios("one_pass", (8, 64), (1e4,), "float32") > 10
