"""ATen's CPU float32 sum of a contiguous row (torch.sum and mean over the last dim; the mean square of torch's
composite rms_norm), addition by addition: its values, and sum_v A_v^2 over its addition nodes.

Source (torch 2.13, read from pytorch/pytorch): aten/src/ATen/native/cpu/SumKernel.cpp ``cascade_sum`` and
aten/src/ATen/TensorIteratorReduce.cpp ``parallel_reduce``. For a row of d float32 terms with V lanes
(Vectorized<float>: 8 with AVX2):

- ``vectorized_inner_sum`` (d >= V): the row's d // V vectors go to ``row_sum`` with ILP factor 4 (vector i into
  ILP row i % 4 of ``multi_row_sum``), the leftover d % V terms into ``final_acc`` one after another from 0, then the
  V lanes of row_sum's result one after another. d < V: ``scalar_inner_sum``, row_sum over the terms themselves.
- ``row_sum``: multi_row_sum over the size // 4 full groups of 4, the leftover (size % 4) elements added one after
  another into ILP row 0, then ILP rows 1, 2, 3 added into row 0 in turn.
- ``multi_row_sum`` (per ILP row, lane by lane): 4 accumulator levels, level_power p = max(4, CeilLog2(size) / 4):
  runs of 2^p elements summed into level 0 one after another; after each run level 0 is added into level 1, and
  level j into level j + 1 while the count of elements so far is a multiple of 2^((j + 1) p) (level 3 keeps
  everything it gets); then the leftover elements into level 0, and levels 1, 2, 3 added into level 0 in turn.
- ``parallel_reduce``: a call whose output is one element (a single row) of d >= GRAIN_SIZE terms, with T > 1
  threads, splits the row into c = min(T, ceil(d / GRAIN_SIZE)) contiguous chunks of ceil(d / c) (a split only
  when d > GRAIN_SIZE; ``at::parallel_for`` over OpenMP), each summed as above into its slot of a zeroed buffer of T
  slots, and the buffer is summed as a row of T terms. Calls with several rows split over rows: each row serial.
  With c <= 4 chunks the buffer's sum adds the c partial sums one after another whatever T (T < 8: they sit in ILP
  rows 0..c-1, folded in order; T >= 8: in lanes 0..c-1 of vector 0, merged in order): T matters through c alone.

Accumulators start at 0 and a zero slot adds exactly, so an addition whose operand sums no term (or only zeros,
whose computed value is an exact zero) is no rounding node: it is left out of sum_v A_v^2 (A_v = sum of |terms|
under node v). The same loops run on four arithmetics: float32 values (:func:`float32_sum`, checked bit for bit
against torch in tests/test_aten_sum.py), magnitudes with their node squares (:func:`tree_factor`), the deepest path
(:func:`depth`; both used by proofs.reduction.Reduction for ``exact_tree="aten_cascade_sum"``), and explicit nodes
(:func:`node_tree`, the node-by-node check of claim numerics.error_model and of the depth in the tests).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import numpy as np

from proofs.probabilistic import node_squares

GRAIN_SIZE = 32768  # at::internal::GRAIN_SIZE
ILP = 4  # row_sum's ilp_factor
LEVELS = 4  # multi_row_sum's num_levels
LANES = 8  # float32 lanes of Vectorized<float> with AVX2: the width tests/test_aten_sum.py verifies
MAX_CHUNKS = 4  # up to 4 chunks the buffer's sum adds them one after another whatever the thread count
MAX_WIDTH = MAX_CHUNKS * GRAIN_SIZE  # the widest row whose every possible tree is modelled


class Values:
    """Additions as the kernel does them: in the operands' dtype (float32; object arrays of :class:`Node` too)."""

    def chain(self, stack: np.ndarray, axis: int) -> np.ndarray:
        """((s_0 + s_1) + s_2) + ... along ``axis`` (a running sum from 0: its first addition is exact)."""
        return np.take(np.add.accumulate(stack, axis=axis), -1, axis=axis)


@dataclass
class Magnitudes:
    """Additions of magnitudes A (float64, rows on axis 0) that also sum, over the rounding nodes per row, A_v^2
    (``squares``) and A_v (``linear``), each node taken by proofs.probabilistic.node_squares with ``inflation``."""

    squares: np.ndarray
    linear: np.ndarray
    inflation: float | None = None

    def chain(self, stack: np.ndarray, axis: int) -> np.ndarray:
        """As :meth:`Values.chain` (axis >= 1); the running sums after each addition of two nonzero operands are
        its rounding nodes."""
        operands = np.moveaxis(stack, axis, 0)
        partial = np.cumsum(operands, axis=0)
        nodes = np.where((partial[:-1] > 0) & (operands[1:] > 0), node_squares(partial[1:], self.inflation), 0.0)
        per_row = np.moveaxis(nodes, 1, 0).reshape(len(self.squares), -1)
        self.squares = self.squares + per_row.sum(axis=-1)
        self.linear = self.linear + np.sqrt(per_row).sum(axis=-1)
        return partial[-1]


class Depths:
    """Additions of the deepest path below each operand, every term nonzero (int arrays)."""

    def chain(self, stack: np.ndarray, axis: int) -> np.ndarray:
        """A chain of n additions puts its first operand under all n of them and operand k >= 1 under n - k + 1."""
        operands = np.moveaxis(stack, axis, 0)
        count = len(operands) - 1
        under = np.minimum(count - np.arange(count + 1) + 1, count)
        return np.max(operands + under.reshape(-1, *[1] * (operands.ndim - 1)), axis=0)


@dataclass(eq=False)
class Node:
    """An explicit summation tree: a leaf (|term|) or the sum of two nodes."""

    magnitude: float
    children: tuple[Node, ...] = field(default=())

    def __add__(self, other: Node | int) -> Node:
        """A new node; adding the int 0 of an empty buffer slot is exact, no node (as 0.0f + x == x)."""
        return self if isinstance(other, int) and other == 0 else Node(self.magnitude + other.magnitude, (self, other))

    __radd__ = __add__

    @property
    def rounds(self) -> bool:
        """Whether this node is a rounding: it adds two operands of nonzero magnitude."""
        return len(self.children) == 2 and min(c.magnitude for c in self.children) > 0

    def squares(self) -> float:
        """sum_v A_v^2 over the rounding nodes under this one (itself included)."""
        return (self.magnitude**2 if self.rounds else 0.0) + sum(c.squares() for c in self.children)

    def depth(self) -> int:
        """The most rounding nodes any leaf passes through."""
        return max((c.depth() for c in self.children), default=0) + int(self.rounds)


def _chain(arithmetic, items: list) -> np.ndarray | None:
    """The items (arrays of one shape, None for an accumulator still 0) added one after another; None if none."""
    present = [item for item in items if item is not None]
    if not present:
        return None
    return present[0] if len(present) == 1 else arithmetic.chain(np.stack(present, axis=1), axis=1)


def _ceil_log2(size: int) -> int:
    """c10 utils::CeilLog2: 1 for size <= 2, else ceil(log2 size)."""
    return 1 if size <= 2 else (size - 1).bit_length()


def _multi_row_sum(arithmetic, data: np.ndarray) -> np.ndarray | None:
    """multi_row_sum over data (rows, size, ILP, *lane): the ILP rows' sums (rows, ILP, *lane); None for size 0."""
    size = data.shape[1]
    power = max(4, _ceil_log2(size) // LEVELS)
    step = 1 << power
    runs = size // step
    acc: list[np.ndarray | None] = [None] * LEVELS
    if runs:
        totals = arithmetic.chain(data[:, :runs * step].reshape(len(data), runs, step, *data.shape[2:]), axis=2)
        for run in range(runs):
            acc[0], done = totals[:, run], (run + 1) * step
            for j in range(1, LEVELS):
                acc[j], acc[j - 1] = _chain(arithmetic, [acc[j], acc[j - 1]]), None
                if done & ((step - 1) << (j * power)):
                    break
    tail = [data[:, i] for i in range(runs * step, size)]
    return _chain(arithmetic, [_chain(arithmetic, tail), *acc[1:]])


def _row_sum(arithmetic, data: np.ndarray) -> np.ndarray:
    """row_sum over data (rows, size, *lane): multi_row_sum of the ILP groups, leftovers into ILP row 0, rows folded."""
    size = data.shape[1]
    groups = size // ILP
    partial = _multi_row_sum(arithmetic, data[:, :groups * ILP].reshape(len(data), groups, ILP, *data.shape[2:]))
    rows = [None] * ILP if partial is None else [partial[:, k] for k in range(ILP)]
    leftover = [data[:, i] for i in range(groups * ILP, size)]
    return _chain(arithmetic, [rows[0], *leftover, *rows[1:]])


def _inner_sum(arithmetic, terms: np.ndarray, lanes: int) -> np.ndarray:
    """One loop call's sum of each row of terms (rows, d): vectorized_inner_sum for d >= V, else scalar_inner_sum."""
    width = terms.shape[-1]
    if width < lanes:
        return _row_sum(arithmetic, terms)
    vectors = width // lanes
    lane_sums = _row_sum(arithmetic, terms[:, :vectors * lanes].reshape(len(terms), vectors, lanes))
    scalars = [terms[:, k] for k in range(vectors * lanes, width)] + [lane_sums[:, k] for k in range(lanes)]
    return _chain(arithmetic, scalars)


def _one_row_call(arithmetic, terms: np.ndarray, lanes: int, threads: int) -> np.ndarray:
    """The sum of each row of terms called alone with ``threads`` threads: for d > GRAIN_SIZE and T > 1
    two_pass_reduction (a chunk per thread into a zeroed buffer of T slots, then the buffer's sum), else the serial
    tree (a buffer of one slot adds nothing)."""
    width = terms.shape[-1]
    chunks = min(threads, -(-width // GRAIN_SIZE)) if width > GRAIN_SIZE else 1
    size = -(-width // chunks)
    slots = [_inner_sum(arithmetic, terms[:, start:start + size], lanes) for start in range(0, width, size)]
    buffer = np.stack(slots + [np.zeros_like(slots[0])] * (threads - len(slots)), axis=1)
    return _inner_sum(arithmetic, buffer, lanes)


def chunk_counts(width: int) -> range:
    """How many chunks a one-row call of this width may be split into: 1 (serial: one thread, several rows in the
    call, d <= GRAIN_SIZE) to ceil(d / GRAIN_SIZE) (T >= that many threads)."""
    return range(1, max(1, -(-width // GRAIN_SIZE)) + 1)


def float32_sum(values: np.ndarray, lanes: int = LANES, threads: int = 1) -> np.ndarray:
    """The float32 sum over the last axis as ATen computes it for ``values`` given to torch in one call (rows:
    the leading axes; a single row of d > GRAIN_SIZE terms is split over ``threads``)."""
    rows = np.asarray(values, dtype=np.float32)
    flat = rows.reshape(-1, rows.shape[-1])
    if flat.shape[-1] == 0:
        return np.zeros(rows.shape[:-1], np.float32)
    found = _one_row_call(Values(), flat, lanes, threads) if len(flat) == 1 else _inner_sum(Values(), flat, lanes)
    return found.reshape(rows.shape[:-1])


def node_tree(terms: np.ndarray, lanes: int = LANES, threads: int = 1) -> Node:
    """The explicit tree of one row (1-D terms) called alone: :class:`Node` s from the same loops."""
    leaves = np.empty((1, len(terms)), dtype=object)
    for k, value in enumerate(np.abs(np.asarray(terms, dtype=np.float64))):
        leaves[0, k] = Node(float(value))
    return _one_row_call(Values(), leaves, lanes, threads)[0]


def squares(terms: np.ndarray, lanes: int = LANES, chunks: int = 1, inflation: float | None = None) -> np.ndarray:
    """sum_v A_v^2 of each row's tree (last axis), the row split into ``chunks`` (one per thread) or not (1)."""
    return node_sums(terms, lanes, chunks, inflation)[0]


def node_sums(terms: np.ndarray, lanes: int = LANES, chunks: int = 1,
              inflation: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(sum_v A_v^2, sum_v A_v) of each row's tree (:class:`Magnitudes`), split as :func:`squares`."""
    magnitudes = np.abs(np.asarray(terms, dtype=np.float64))
    flat = magnitudes.reshape(-1, magnitudes.shape[-1])
    arithmetic = Magnitudes(np.zeros(len(flat)), np.zeros(len(flat)), inflation)
    _one_row_call(arithmetic, flat, lanes, chunks)
    return arithmetic.squares.reshape(magnitudes.shape[:-1]), arithmetic.linear.reshape(magnitudes.shape[:-1])


@cache
def depth(width: int) -> int | None:
    """D: the most additions a term passes through, the largest over the trees a call may use (as
    :func:`tree_factor`); None for width > MAX_WIDTH."""
    if width > MAX_WIDTH:
        return None
    if width < 2:
        return 0
    leaves = np.zeros((1, width), dtype=np.int64)  # T = chunks: no zero slots, which Depths would count
    return max(int(_one_row_call(Depths(), leaves, LANES, chunks)[0]) for chunks in chunk_counts(width))


def tree_factor(terms: np.ndarray, inflation: float | None = None) -> np.ndarray | None:
    """sqrt(sum_v A_v^2) / T per row (last axis kept; 0 for a zero row) of ATen's sum with V = 8 lanes: the largest
    over the trees a call may use (serial, or a one-row call split into 2 to ceil(d / GRAIN_SIZE) chunks, whichever
    the thread count), so it bounds the tree that summed the row however torch was called. None for d > MAX_WIDTH
    (more chunks: the buffer's order depends on the thread count)."""
    found = tree_sums(terms, inflation)
    return None if found is None else found[0]


def tree_sums(terms: np.ndarray, inflation: float | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """(sqrt(sum_v A_v^2) / T, sum_v A_v / T) per row (last axis kept), each the largest over the trees a call may
    use (:func:`tree_factor`); None for d > MAX_WIDTH."""
    magnitudes = np.abs(np.asarray(terms, dtype=np.float64))
    width = magnitudes.shape[-1]
    if width > MAX_WIDTH:
        return None
    found = [node_sums(magnitudes, chunks=chunks, inflation=inflation) for chunks in chunk_counts(width)]
    total = magnitudes.sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(total > 0, 1 / np.where(total > 0, total, 1.0), 0.0)
        return (np.sqrt(np.max([f[0] for f in found], axis=0)) * scale)[..., None], \
            (np.max([f[1] for f in found], axis=0) * scale)[..., None]
