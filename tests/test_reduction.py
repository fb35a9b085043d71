"""A declared reduction shape (core.kernel.Kernel.reduction, proofs.reduction) is a claim the suite checks: its depth
is what the source does, the bound it implies holds for kernels that follow it, and a kernel that declares a shallower
shape than it follows fails where the same kernel undeclared passes (claim numerics.error_model)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from emulated import sequential_statistics, trust_every_declared_tree

from core import trees
from core.adapters.triton_ours import interpreted_reduction
from core.kernel import Kernel
from core.registry import resolve
from core.results import KernelEntry
from proofs import simulate
from proofs.reduction import NUMPY_PAIRWISE, Reduction
from properties.run.tightness import row_ratios, suite_rows


def sequential_layernorm(x: torch.Tensor, weight, bias, eps: float) -> torch.Tensor:
    """A correct two-pass LayerNorm whose sums run left to right in float32 (depth d - 1)."""
    y = simulate.layernorm_two_pass(x.detach().numpy().astype(np.float32), eps, order="sequential")
    return torch.from_numpy(np.ascontiguousarray(y))


PAIRWISE_TWO_PASS = dataclasses.replace(NUMPY_PAIRWISE, two_pass=True)


def test_depths_of_the_shapes():
    assert [NUMPY_PAIRWISE.depth(d) for d in (1, 2, 8, 64, 128, 256, 4096)] == [0, 1, 3, 10, 18, 19, 23]
    assert Reduction(run=1).depth(1024) == 10  # a balanced pairwise tree: ceil(log2 d)
    # runs of 4, a pairwise tree of the 4 runs of a block of 16, then the 4 blocks merged one after another
    assert Reduction(run=4, block=16, max_width=64).depth(64) == 3 + 2 + 3
    assert Reduction(run=4, max_width=64).depth(65) == 64  # beyond the declared widths: any order
    with pytest.raises(ValueError):
        Reduction(run=0)


def test_numpy_pairwise_sum_matches_the_declared_shape():
    """The depth is numpy's: an exact float32 reimplementation of pairwise_sum agrees with np.sum bit for bit."""
    rng = np.random.default_rng(0)
    for width in (8, 100, 129, 4096):
        row = (rng.standard_normal(width) * 10.0 ** rng.uniform(-3, 3, width)).astype(np.float32)
        assert np.sum(row) == simulate.summed(row[None], "numpy_pairwise")[0]


def test_a_false_declaration_fails_where_the_undeclared_kernel_passes():
    """A sequential kernel declaring numpy's pairwise shape: its float32 sums err like u sqrt(d), its declared bound
    allows u log2(d); at d = 65536 most rows fail, up to 4x. Undeclared, the same kernel uses < 0.25 of its bound
    (0.12 since the half-ulp step: a tighter bound, the same error)."""
    declared = Kernel("sequential-declared-pairwise", "layernorm", sequential_layernorm, reduction=PAIRWISE_TWO_PASS)
    undeclared = dataclasses.replace(declared, reduction=None)
    x = suite_rows(65536, 10.0, torch.float32, 20, seed=1)
    x = x[[k for k in range(len(x)) if k % 5 in (0, 1)]]  # normal and uniform rows (strategies.DISTRIBUTIONS)
    caught = row_ratios(declared, x)
    assert np.median(caught) > 1 and caught.max() > 2, caught
    assert row_ratios(undeclared, x).max() <= 0.25


def test_the_built_ins_declare_what_their_source_does():
    """torch's CPU kernels declare their ATen shapes (x86), our Triton kernels numpy's pairwise sum under the
    interpreter; both pass their bound on the suite's rows at every width (tests/test_tightness.py pins the floors)."""
    for spec in ("torch", "triton"):
        for kernel in resolve(spec):
            if kernel.kind in ("layernorm", "rmsnorm") and kernel.reduction is not None:
                assert kernel.reduction.source and kernel.as_json()["reduction"]["run"] == kernel.reduction.run
                assert KernelEntry.model_validate(kernel.as_json()).reduction.source == kernel.reduction.source
                x = suite_rows(65536, 10.0, torch.float32, 4, seed=3)
                assert np.nanmax(row_ratios(kernel, x)) <= 1


@pytest.mark.parametrize(("width", "mean_over_std"), [(8192, 10.0), (8192, 1e3), (65536, 10.0), (65536, 1e3)])
def test_the_order_agnostic_bound_holds_for_a_sequential_kernel(width, mean_over_std):
    """Undeclared, the default bound covers the worst order on the suite's rows, structured ones included: integer
    rows with a fractional shift and rows shifted beyond the partial sums' ulp make a sequential sum's roundings share
    a sign (ratio 2 to 7 before proofs.probabilistic.aligned sent them to the worst case)."""
    undeclared = Kernel("sequential", "layernorm", sequential_layernorm)
    ratios = row_ratios(undeclared, suite_rows(width, mean_over_std, torch.float32, 10, seed=width))
    assert np.nanmax(ratios, initial=0.0) <= 1


def _numpy_tree(magnitudes: np.ndarray) -> tuple[float, float]:
    """(T, sum_v A_v^2) of numpy's pairwise_sum tree, node by node (numpy/_core/src/umath/loops_utils.h.src)."""
    width = len(magnitudes)
    if width < 8:
        partial = np.cumsum(magnitudes)
        return partial[-1], float(np.sum(partial[1:] ** 2))
    if width > 128:
        half = width // 2 - (width // 2) % 8
        (left, q_left), (right, q_right) = _numpy_tree(magnitudes[:half]), _numpy_tree(magnitudes[half:])
        return left + right, q_left + q_right + (left + right) ** 2
    lanes, squares = list(magnitudes[:8]), 0.0
    for start in range(8, width - width % 8, 8):
        for j in range(8):
            lanes[j] += magnitudes[start + j]
            squares += lanes[j] ** 2
    while len(lanes) > 1:
        lanes = [lanes[k] + lanes[k + 1] for k in range(0, len(lanes), 2)]
        squares += sum(v**2 for v in lanes)
    total = lanes[0]
    for value in magnitudes[width - width % 8:]:
        total += value
        squares += total**2
    return total, squares


def _lanes_tree(magnitudes: np.ndarray, block: int) -> tuple[float, float]:
    """(T, sum_v A_v^2) of the declared numpy_pow2 tree, node by node: a row of several blocks is added block by
    block into min(next_pow2(d), block) lanes (a node per lane and block after the first), then numpy's tree of the
    lanes."""
    width = len(magnitudes)
    lanes = min(1 << (width - 1).bit_length(), block)
    padded = np.concatenate([magnitudes, np.zeros(-width % lanes)])
    running, squares = list(padded[:lanes]), 0.0
    for start in range(lanes, len(padded), lanes):
        for k in range(lanes):
            running[k] += padded[start + k]
            squares += running[k] ** 2
    total, tree = _numpy_tree(np.array(running))
    return total, tree + squares


@pytest.mark.parametrize(("width", "block"), [(5, 8192), (8, 8192), (100, 8192), (512, 8192), (4096, 8192),
                                              (8192, 8192), (7, 4), (300, 128), (1000, 128), (20000, 8192)])
def test_the_exact_tree_factor_is_the_declared_tree_node_by_node(width, block):
    shape = dataclasses.replace(NUMPY_PAIRWISE, exact_tree="numpy_pow2", block=block)
    rng = np.random.default_rng(width)
    row = np.abs(rng.standard_normal(width)) * 10.0 ** rng.uniform(-2, 2, width)
    total, squares = _lanes_tree(row, block)
    assert np.isclose(shape.tree_factor(row[None])[0, 0], np.sqrt(squares) / total, rtol=1e-12)


@pytest.mark.parametrize(("width", "block"), [(100, None), (300, 128), (1000, 128), (20000, None)])
def test_the_interpreted_kernel_computes_the_declared_tree_bit_for_bit(width, block):
    """kernels/norm.py under the interpreter: its saved mean and rstd are, bit for bit, those of the declared tree
    (two-pass over the whole row, each sum through simulate.lanes_sum), while the per-block sums added one after
    another (a scalar accumulator) give other bits: the check can tell the trees apart. block None: the kernel's own
    (next_pow2(d) up to kernels.rows.FORWARD_MAX_BLOCK = the declaration's block)."""
    from kernels import interpret, norm

    interpret.enable()
    declared = interpreted_reduction()
    lanes = block or declared.block
    rng = np.random.default_rng(width)
    x = (rng.standard_normal((6, width)) * 10.0 ** rng.uniform(-3, 3, (6, width)) + [[0.0], [1e3]] * 3)
    x = x.astype(np.float32)
    eps = np.float32(1e-5)
    mean = simulate.lanes_sum(x, lanes) / np.float32(width)
    squares = np.square(x - mean[:, None])
    rstd = np.float32(1.0) / np.sqrt(simulate.lanes_sum(squares, lanes) / np.float32(width) + eps)
    _, got_mean, got_rstd = norm.forward(torch.from_numpy(x), None, None, float(eps), rms=False, block=block)
    assert np.array_equal(got_mean.numpy(), mean) and np.array_equal(got_rstd.numpy(), rstd)
    _, _, got_rms = norm.forward(torch.from_numpy(x), None, None, float(eps), rms=True, block=block)
    rms = np.float32(1.0) / np.sqrt(simulate.lanes_sum(np.square(x), lanes) / np.float32(width) + eps)
    assert np.array_equal(got_rms.numpy(), rms)
    if width > lanes:
        per_block = np.add.accumulate(np.stack([np.sum(b, axis=-1) for b in np.array_split(
            np.concatenate([x, np.zeros((6, -width % lanes), np.float32)], -1), -(-width // lanes), -1)], -1), -1)
        assert not np.array_equal(per_block[:, -1] / np.float32(width), mean)


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_our_triton_kernels_use_their_exact_tree_beyond_one_block(kind):
    """At d = 65536 (8 blocks), |mean|/std = 0, our Triton kernels' median ratio is 0.064 (LayerNorm) and 0.057
    (RMSNorm; docs/tightness.md): at least 0.05, which a bound 10x looser fails; and the declared tree, not the cap
    sqrt(D), gives it: no row's ratio is lower than under the cap and one's is >= 1.3x it (1.55 LN, 1.83 RMS; the
    rows whose squares are `aligned` fall back to gamma_D under both)."""
    (kernel,) = resolve("triton", kind)
    if kernel.reduction is None or not kernel.reduction.exact_tree:
        pytest.skip("compiled on a GPU: no exact tree declared")
    x = suite_rows(65536, 0.0, torch.float32, 4, seed=65536)
    ratios = row_ratios(kernel, x)
    capped = row_ratios(dataclasses.replace(kernel, reduction=dataclasses.replace(kernel.reduction, exact_tree="")), x)
    assert ratios.max() <= 1.0 and np.median(ratios) >= 0.05, ratios
    assert np.all(ratios >= capped) and np.max(ratios / capped) >= 1.3, (ratios, capped)


def test_the_triton_declaration_holds_for_rows_of_several_blocks(monkeypatch):
    """Two-pass at every width (no Welford term), the declared tree's factor beyond one block, and the sequential
    kernel declaring it is refuted by the tree check (core.trees), whose bound would catch it at d = 65536."""
    declared = interpreted_reduction()
    assert not declared.welford(65536) and not declared.welford(8192)
    assert declared.tree_factor(np.ones((1, 65536)))[0, 0] < 1.5 < np.sqrt(declared.depth(65536))
    with pytest.raises(ValueError):
        dataclasses.replace(declared, block=6000)  # the lanes' tree is numpy's over a power of two
    false = Kernel("sequential-declared-triton", "layernorm", sequential_layernorm, reduction=declared,
                   statistics=sequential_statistics)
    assert trees.check(false, torch.device("cpu"), torch.float32).status == "refuted"
    trust_every_declared_tree(monkeypatch)
    x = suite_rows(65536, 10.0, torch.float32, 10, seed=1)
    caught = row_ratios(false, x[[k for k in range(len(x)) if k % 5 in (0, 1)]])
    assert np.median(caught) > 1, caught
