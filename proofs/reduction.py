"""A declared reduction shape: how a kernel sums the d terms of a row for its statistics, and what that buys.

A summation tree computes fl(sum) = sum_i x_i prod_{v on i's path} (1 + delta_v), |delta_v| <= u, so with D the
largest number of additions any term passes through (its *depth*),

    |fl(sum) - sum| <= gamma_D sum_i |x_i|                          (Higham 2002, eq. (4.3); no assumption)

and, under the mean-independence model of proofs.probabilistic (step 3), with sum_v A_v^2 <= max_v A_v sum_v A_v
= T sum_i |x_i| depth_i <= D T^2 (T = sum_i |x_i|, A_v the sum of |x_i| under node v),

    |fl(sum) - sum| <= lambda u (1 + gamma_D) sqrt(D) T    with probability >= 1 - 2 exp(-lambda^2 / 2).

Any order has D <= d - 1 (a sequential loop), which is the order-agnostic bound; a pairwise tree has
D = ceil(log2 d). Both are derived and checked in claim numerics.error_model (proofs/claims/numerics.py).

:class:`Reduction` describes the shapes real kernels use: runs of at most ``run`` terms added one after another
in each of ``lanes`` accumulators side by side (a *chunk* is run x lanes consecutive terms), the chunks' partial
results combined by a cascade of fan-in ``fan`` in which a partial passes through at most ``level_cost`` additions
per level, then at most ``finish`` further additions (the lanes combined, remainder loops). Rows wider than
``block`` are reduced one block at a time, the blocks combined one after another (their totals, or lane by lane
before one reduction of the block-wide lanes: the same depth). ``max_width``: the widest row the shape is declared
for (wider rows: the order-agnostic bound). ``two_pass``: the variance is the sum of squared deviations from the
row's one computed mean, over all its blocks (a mean error e enters it as d e^2 only); otherwise (Welford/Chan
updates, blocks merged by Chan's update) the first-order term 2 phi_mu kappa of the error model stays.

``exact_tree="numpy_pow2"`` declares the tree itself, addition by addition (:meth:`Reduction.tree_factor`): a row
of at most ``block`` terms is np.sum over it zero-padded to the next power of two; a wider row is added block by
block into ``block`` lanes (lane k: x_k + x_{k+block} + ..., one after another, the last block zero-padded), then
np.sum over the lanes (Triton's tutorial 05 form, kernels/norm.py under the interpreter).

A declaration is a claim about the kernel's source; the conformance suite checks the kernel against the bound it
implies, so a kernel that declares a shallower shape than it follows fails (tests/test_tightness.py). A declared exact
tree is more: the suite emulates it bit for bit on the machine in use before trusting it (core.trees), since which
tree a kernel computes depends on the build (CPU capability, FMA contraction, compiled or interpreted). ``device``
names the device type the declaration is made for ("" any), ``contract`` whether the tree's multiply-adds are fused.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where a tree is evaluated: core.kernel (and `normverify list`) import this
    import numpy as np


# The trees a shape can declare node by node: numpy's pairwise sum (tree_factor), ATen's CPU row moments (Welford
# chunks, Chan cascade: proofs.aten_moments, used by error_model.moments_factors), ATen's CPU float32 sum with 8
# lanes (SumKernel.cpp cascade_sum, thread splits: proofs.aten_sum, tree_factor).
EXACT_TREES = ("", "numpy_pow2", "aten_moments", "aten_cascade_sum")


@dataclass(frozen=True)
class Reduction:
    """A kernel's declared reduction shape (module docstring); ``source`` cites the code it was read from."""

    run: int
    lanes: int = 1
    fan: int = 2
    level_cost: int = 1
    finish: int = 0
    block: int = 0  # 0: the whole row is one block
    max_width: int = 0  # 0: any width
    two_pass: bool = False
    exact_tree: str = ""  # "numpy_pow2": np.sum over the row padded to a power of two, or over block-wide lanes
    source: str = ""
    device: str = ""  # the device type the declaration is made for ("cpu": ATen's CPU kernels, the interpreter); "" any
    contract: bool = True  # the exact tree's multiply-adds fused (FMA), as the build compiles them (aten_moments)

    def __post_init__(self) -> None:
        if min(self.run, self.lanes, self.fan - 1, self.level_cost) < 1 or min(self.finish, self.block,
                                                                              self.max_width) < 0:
            raise ValueError(f"a reduction needs run, lanes, level_cost >= 1, fan >= 2 and "
                             f"finish, block, max_width >= 0; got {self}")
        if self.exact_tree not in EXACT_TREES or (self.exact_tree and self.block & (self.block - 1)):
            raise ValueError(f"exact_tree is one of {EXACT_TREES} (with a block 0 or a power of two); got {self}")

    def declared_for(self, d: int) -> bool:
        """Whether the shape is declared for rows of width d (``max_width``)."""
        return not self.max_width or d <= self.max_width

    def depth(self, d: int) -> int:
        """D: the most additions a term of a row of width d passes through, at most d - 1 (any order); an exact
        ``aten_cascade_sum`` tree's own (proofs.aten_sum.depth), where it is modelled."""
        if d < 2 or not self.declared_for(d):
            return max(d - 1, 0)
        if self.exact_tree == "aten_cascade_sum":
            from proofs import aten_sum

            exact = aten_sum.depth(d)
            if exact is not None:
                return exact
        block = min(d, self.block) if self.block else d
        chunks = -(-block // (self.run * self.lanes))
        levels = 0
        while self.fan**levels < chunks:
            levels += 1
        within = min(self.run, -(-block // self.lanes)) - 1 + self.level_cost * levels + self.finish
        return min(d - 1, within + -(-d // block) - 1)

    def welford(self, d: int) -> bool:
        """Whether the variance of a width-d row carries the first-order mean term (Welford, Chan merges): not for a
        two-pass shape, whose squared deviations are all from the row's one computed mean, however many blocks."""
        return not (self.two_pass and self.declared_for(d))

    def tree_factor(self, terms: np.ndarray, inflation: float | None = None) -> np.ndarray | None:
        """sqrt(sum_v A_v^2) / T of the row's own summation tree (last axis kept), where the shape declares it
        exactly (``exact_tree``) for this width; None elsewhere (the cap sqrt(D) applies). ``inflation``: each
        A_v^2 taken as proofs.probabilistic.node_squares (half an ulp of the node's binade)."""
        found = self.tree_sums(terms, inflation)
        return None if found is None else found[0]

    def tree_sums(self, terms: np.ndarray, inflation: float | None = None) -> tuple | None:
        """(sqrt(sum_v A_v^2) / T, sum_v A_v / T) of the row's own tree (last axis kept; :meth:`tree_factor`): the
        probabilistic factor's share, and the rigorous first-order one (|fl(sum) - sum| <= u (1 + gamma_D) sum_v A_v,
        no independence assumption); None where no exact tree is declared for this width.
        numpy_pow2: the nodes of :meth:`tree_nodes`; aten_cascade_sum: proofs.aten_sum.tree_sums (the largest over
        the trees a call may use)."""
        import numpy as np

        from proofs.probabilistic import node_squares

        width = np.shape(terms)[-1]
        if self.exact_tree == "aten_cascade_sum" and self.declared_for(width):
            from proofs import aten_sum

            return aten_sum.tree_sums(terms, inflation)
        found = self.tree_nodes(terms)
        if found is None:
            return None
        total, nodes = found
        squares = node_squares(nodes, inflation)
        scale = _inverse(total)
        return (np.sqrt(np.sum(squares, axis=-1)) * scale)[..., None], \
            (np.sum(np.sqrt(squares), axis=-1) * scale)[..., None]

    def tree_nodes(self, terms: np.ndarray) -> tuple | None:
        """(T, A) of a declared numpy_pow2 tree: T = sum|x| per row, A the magnitude bounds A_v (the sum of |x_i|
        under node v) of its addition nodes along the last axis; None for other trees or widths.

        The row zero-padded to L = min(next_pow2(d), block) times ceil(d / L) and folded into L lanes; adding block
        j >= 1 into the lanes is one node per lane, A = the lane's running sum of |x|; then numpy's tree over the L
        lane totals (:func:`_numpy_pairwise_nodes`). One block: no lane nodes. Nodes that add a zero (padding) are
        exact; counting them only enlarges the bounds."""
        import numpy as np

        width = np.shape(terms)[-1]
        if self.exact_tree != "numpy_pow2" or not self.declared_for(width):
            return None
        lanes = 1 << max(width - 1, 0).bit_length()
        lanes = min(lanes, self.block) if self.block else lanes
        blocks = -(-width // lanes)
        magnitudes = np.abs(np.asarray(terms, dtype=np.float64))
        batch = magnitudes.shape[:-1]
        magnitudes = np.concatenate([magnitudes, np.zeros((*batch, blocks * lanes - width))], axis=-1)
        running = np.cumsum(magnitudes.reshape(*batch, blocks, lanes), axis=-2)
        total, nodes = _numpy_pairwise_nodes(running[..., -1, :])
        return total, np.concatenate([running[..., 1:, :].reshape(*batch, (blocks - 1) * lanes), *nodes], axis=-1)

    def tree_split(self, terms: np.ndarray, inflation: float, u: float, lam_value: float,
                   pattern: np.ndarray | None = None) -> np.ndarray | None:
        """The split factor of the row's own tree: a bound on |fl(sum) - sum| / T (last axis kept;
        proofs.probabilistic.split_sum on the nodes' half-ulp increments u 2^floor(log2(inflation A_v)), ``inflation``
        = 1 + gamma_D bounding |t_v| / A_v): the nodes whose binade's ulp the
        signed terms (``pattern``, default ``terms``) are aligned with (probabilistic.aligned_scales) and the largest
        others rigorously, the rest by Azuma-Hoeffding. None where no node list is declared (aten_cascade_sum)."""
        import numpy as np

        from proofs import probabilistic

        found = self.tree_nodes(terms)
        if found is None:
            return None
        total, nodes = found
        if nodes.size == 0:  # a row of one term (or no row): no addition, no rounding
            return np.zeros((*nodes.shape[:-1], 1))
        finite = np.isfinite(nodes).all(axis=-1) & np.isfinite(inflation)  # else no finite bound: inf
        nodes = np.where(np.isfinite(nodes), nodes, 0.0)
        increments = np.sqrt(probabilistic.node_squares(nodes, inflation))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            exponents = np.floor(np.log2(np.where((nodes > 0) & finite[..., None], inflation * nodes, 1.0)))
        scales, index = np.unique(exponents, return_inverse=True)  # the binades the nodes reach
        signed = np.asarray(terms if pattern is None else pattern, dtype=np.float64)
        alike = probabilistic.aligned_scales(signed, u, np.broadcast_to(scales, (*nodes.shape[:-1], scales.size)))
        forced = np.take_along_axis(alike, index.reshape(nodes.shape), axis=-1) & (nodes > 0)
        split = probabilistic.split_sum(u * inflation * increments, lam_value, forced)
        return np.where(finite, split * _inverse(total), np.inf)[..., None]

    def as_json(self) -> dict:
        return asdict(self)


def _inverse(total: np.ndarray) -> np.ndarray:
    import numpy as np

    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(total > 0, 1 / np.where(total > 0, total, 1.0), 0.0)


def _numpy_pairwise_nodes(magnitudes: np.ndarray) -> tuple:
    """(T, [A arrays]) over the addition nodes of numpy's pairwise_sum of rows whose width is a power of two
    (proofs.simulate._numpy_pairwise, the same tree), from the terms' magnitudes: below 8 terms a running sum;
    else blocks of min(width, 128) (8 lanes over every 8th term, then a 3-level tree), then the halving tree of the
    blocks' totals. Each array's last axis lists nodes."""
    import numpy as np

    width, batch = magnitudes.shape[-1], magnitudes.shape[:-1]
    if width < 8:
        partial = np.cumsum(magnitudes, axis=-1)
        return partial[..., -1], [partial[..., 1:]]
    block = min(width, 128)
    lanes = np.cumsum(magnitudes.reshape(*batch, width // block, block // 8, 8), axis=-2)
    # each addition to a lane: its running sum
    nodes = [lanes[..., 1:, :].reshape(*batch, width - 8 * (width // block))]
    level = lanes[..., -1, :]
    for _ in range(3):  # ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)) in each block
        level = level[..., 0::2] + level[..., 1::2]
        nodes.append(level.reshape(*batch, level.shape[-2] * level.shape[-1]))
    totals = level[..., 0]
    while totals.shape[-1] > 1:  # the halves, pairwise over consecutive blocks
        totals = totals[..., 0::2] + totals[..., 1::2]
        nodes.append(totals)
    return totals[..., 0], nodes


# numpy's pairwise summation of a contiguous float array (numpy/_core/src/umath/loops_utils.h.src, pairwise_sum):
# 8 accumulators over runs of at most 16 terms, combined by a 3-level tree, and halves combined above 128 terms.
NUMPY_PAIRWISE = Reduction(run=16, lanes=8, finish=3, source="numpy pairwise_sum (loops_utils.h.src)")


def depth(reduction: Reduction | None, d: int) -> int:
    """The declared depth of a width-d sum, d - 1 (any order) when nothing is declared."""
    return max(d - 1, 0) if reduction is None else reduction.depth(d)
