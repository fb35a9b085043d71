"""proofs.aten_sum is ATen's CPU float32 sum, addition by addition (claim numerics.error_model): bit for bit against
torch's own sum and rms_norm on the suite's rows (1 row and several per call, widths 1 to 65536 and beyond, threads 1
to 9, 16-bit inputs through the composite's upcast), its magnitudes' sum_v A_v^2 is the node-by-node sum of the same
tree, and a kernel that declares the tree but sums otherwise fails where it passes undeclared."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import torch
from emulated import sequential_statistics, trust_every_declared_tree, verified_kernel

from core import trees
from core.adapters.torch_native import cpu_reductions
from core.kernel import Kernel
from core.registry import resolve
from proofs import aten_sum, simulate
from proofs.reduction import Reduction
from properties.checks.dropout import threads as threads_of_torch
from properties.run.tightness import row_ratios, suite_rows

WIDTHS = (1, 2, 3, 5, 7, 8, 9, 17, 31, 64, 100, 129, 512, 1000, 4096, 4097, 8192, 16383, 32768, 32769, 65536)


@pytest.fixture(scope="module")
def verified():
    """torch:rmsnorm's declared tree, where core.trees verified it on this build (else the tests skip, saying why)."""
    return verified_kernel("torch", "rmsnorm")


needs_verified_tree = pytest.mark.usefixtures("verified")


def squares_of(x: torch.Tensor) -> torch.Tensor:
    """The terms torch's composite rms_norm sums: the input upcast to float32, squared in float32."""
    return x.float().pow(2)


@needs_verified_tree
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_float32_sum_is_torchs_bit_for_bit_on_the_suite_rows(dtype):
    """Each row alone (a one-row call: split over threads beyond GRAIN_SIZE) and all rows in one call."""
    threads = torch.get_num_threads()
    for d in WIDTHS:
        for ratio in (0.0, 10.0, 1e3):
            terms = squares_of(suite_rows(d, ratio, dtype, 5 if d <= 8192 else 2, seed=d))
            together = aten_sum.float32_sum(terms.numpy(), threads=threads)
            assert np.array_equal(terms.sum(-1).numpy(), together), (d, ratio)
            for row in terms.split(1):
                assert np.array_equal(row.sum(-1).numpy(), aten_sum.float32_sum(row.numpy(), threads=threads)), d


@needs_verified_tree
@pytest.mark.parametrize("threads", [1, 2, 3, 4, 8, 9, 33])
def test_a_one_row_call_splits_over_threads_as_emulated(threads):
    """two_pass_reduction: min(T, ceil(d / 32768)) chunks into a buffer of T slots (T >= 8: the buffer's own sum is
    vectorized); the serial tree is not torch's there (so the check sees the split)."""
    rng = np.random.default_rng(threads)
    with threads_of_torch(threads):
        for d in (32768, 32769, 65536, 100000, aten_sum.MAX_WIDTH, 300000):
            rows = (rng.standard_normal((4, d)) * 10.0 ** rng.uniform(-3, 3, (4, d))).astype(np.float32)
            got = np.concatenate([torch.from_numpy(row).sum(-1).numpy() for row in rows[:, None]])
            assert np.array_equal(got, np.concatenate([aten_sum.float32_sum(row, threads=threads)
                                                      for row in rows[:, None]])), d
            if threads > 1 and d > aten_sum.GRAIN_SIZE:
                assert not np.array_equal(got, aten_sum.float32_sum(rows, threads=threads)), d  # rows: serial


@needs_verified_tree
@pytest.mark.parametrize("rows", [1, 4])
def test_rms_norm_is_the_composite_over_the_emulated_mean_square(rows):
    """F.rms_norm's output equals x * rsqrt(sum / d + eps) with the emulated sum, in every dtype: the statistic is
    this sum (torch's composite: pow(2).mean in float32, CPU mean = sum then divide)."""
    for d in (8, 100, 4096, 65536):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            x = suite_rows(d, 10.0, dtype, rows, seed=d + rows)
            total = aten_sum.float32_sum(squares_of(x).numpy(), threads=torch.get_num_threads())
            mean_square = torch.from_numpy(total / np.float32(d))[:, None]
            expected = (x.float() * torch.rsqrt(mean_square + 1e-5)).to(dtype)
            assert torch.equal(torch.nn.functional.rms_norm(x, (d,), None, 1e-5), expected), (d, dtype)


def test_a_different_tree_is_seen():
    """The bit-for-bit check has power: numpy's pairwise and a sequential float32 sum of the same rows differ."""
    rng = np.random.default_rng(9)
    rows = (rng.standard_normal((4, 4096)) * 10.0 ** rng.uniform(-3, 3, (4, 4096))).astype(np.float32)
    emulated = aten_sum.float32_sum(rows)
    for order in ("sequential", "numpy_pairwise"):
        assert not np.array_equal(emulated, simulate.summed(rows, order))


@pytest.mark.parametrize("chunks", [1, 2, 3])
def test_magnitude_squares_are_the_node_by_node_sum(chunks):
    """sum_v A_v^2 of the magnitude arithmetic equals the sum over the explicit tree's nodes that add two nonzero
    operands, zeros (sparse rows) included; both trees are the same loops (a one-row call split into ``chunks``)."""
    rng = np.random.default_rng(chunks)
    for d in (1, 2, 3, 7, 8, 9, 33, 129, 1000, 4097, 70000):
        row = np.abs(rng.standard_normal(d)) * 10.0 ** rng.uniform(-2, 2, d) * (rng.uniform(size=d) < 0.7)
        tree = aten_sum.node_tree(row, threads=chunks)
        expected = chunks if d > aten_sum.GRAIN_SIZE else 1
        assert np.isclose(aten_sum.squares(row[None], chunks=expected)[0], tree.squares(), rtol=1e-12)
        assert np.isclose(tree.magnitude, row.sum(), rtol=1e-12)


def test_the_tree_factor_covers_every_call():
    """The factor is the largest over the serial tree and every split a thread count can give (to MAX_WIDTH): a row
    called alone with any number of threads, or with other rows, was summed by one of them."""
    rng = np.random.default_rng(4)
    for d in (64, 32769, 65536, 100000, aten_sum.MAX_WIDTH):
        rows = np.abs(rng.standard_normal((2, d)))
        factor = aten_sum.tree_factor(rows)[..., 0]
        for chunks in aten_sum.chunk_counts(d):
            assert np.all(np.sqrt(aten_sum.squares(rows, chunks=chunks)) / rows.sum(-1) <= factor * (1 + 1e-12))
    assert len(aten_sum.chunk_counts(65536)) == 2 and aten_sum.tree_factor(np.ones((1, aten_sum.MAX_WIDTH + 1))) is None


def test_the_depth_is_the_deepest_path_of_every_possible_tree():
    """aten_sum.depth (the declaration's D, gamma_D and the cap sqrt(D)) is the explicit trees' deepest path, the
    largest over the serial tree and the thread splits; never above the shape formula it replaces."""
    shape = dataclasses.replace(cpu_reductions().get("rmsnorm") or Reduction(run=16), exact_tree="")
    for d in (1, 2, 8, 9, 16, 17, 33, 100, 513, 4097, 8192, 40000, 65536):
        deepest = max(aten_sum.node_tree(np.ones(d), threads=chunks).depth() for chunks in aten_sum.chunk_counts(d))
        assert aten_sum.depth(d) == deepest, d
        if shape.lanes == 4 * aten_sum.LANES:
            assert deepest <= shape.depth(d), d
    assert aten_sum.depth(aten_sum.MAX_WIDTH + 1) is None


def sequential_rmsnorm(x: torch.Tensor, weight, eps: float) -> torch.Tensor:
    """A correct RMSNorm whose mean square is summed left to right in float32 (depth d - 1)."""
    y = simulate.rmsnorm_reference(x.detach().numpy().astype(np.float32), eps, order="sequential")
    return torch.from_numpy(np.ascontiguousarray(y))


@needs_verified_tree
def test_a_sequential_kernel_declaring_the_aten_tree_is_refuted_and_the_tree_would_catch_it(monkeypatch):
    """Declaring torch's cascade tree for a sequential sum: the tree check compares the kernel's rstd with the
    emulated tree's and refutes the declaration, so the kernel is bounded order-agnostically (and passes, being a
    correct kernel). Had the tree been trusted, its bound catches the kernel at d = 65536: its errors grow like
    u sqrt(d) (or like u d where the roundings align) where the tree allows about 2u; most rows fail, by up to 100x."""
    declared = Kernel("sequential-declared-aten", "rmsnorm", sequential_rmsnorm, reduction=cpu_reductions()["rmsnorm"],
                      statistics=functools.partial(sequential_statistics, rms=True))
    assert trees.check(declared, torch.device("cpu"), torch.float32).status == "refuted"
    undeclared = dataclasses.replace(declared, reduction=None)
    x = torch.cat([suite_rows(65536, ratio, torch.float32, 10, seed=5) for ratio in (0.0, 10.0)])
    assert row_ratios(declared, x).max() <= 0.5 and row_ratios(undeclared, x).max() <= 0.5
    trust_every_declared_tree(monkeypatch)
    caught = row_ratios(declared, x)
    assert np.median(caught) > 1 and caught.max() > 10, caught


@needs_verified_tree
def test_torch_rmsnorm_uses_its_tree():
    """torch:rmsnorm declares the tree, and it is what lifts its fp32 median error/bound at d = 4096 from ~0.037
    (the shape's depth and the cap sqrt(D)) to ~0.07: at least 0.05 and 1.5x the shape's, never above 1."""
    (kernel,) = [k for k in resolve("torch") if k.kind == "rmsnorm"]
    assert kernel.reduction.exact_tree == "aten_cascade_sum"
    shape_only = dataclasses.replace(kernel, reduction=dataclasses.replace(kernel.reduction, exact_tree=""))
    for mean_over_std in (0.0, 10.0):
        x = suite_rows(4096, mean_over_std, torch.float32, 60, seed=4096)
        declared, shape = row_ratios(kernel, x), row_ratios(shape_only, x)
        assert declared.max() <= 1 and np.median(declared) >= max(0.05, 1.5 * np.median(shape)), np.median(declared)
