"""The bounds' evaluation is the same to the last bit after its vectorization (issue 27): every function of the
hot paths (proofs.probabilistic, proofs.aten_moments, proofs.aten_sum, proofs.reduction's declared trees, and the
public bounds of proofs.error_model over them) gives, on seeded rows, exactly (np.array_equal, NaN where NaN) the
arrays stored in tests/data/bound_equivalence.npz.

The file was written by the per-row and per-node implementation (commit be5125e, before the vectorization) with
``python tests/test_bound_equivalence.py --write``; rewrite it only for a change that is meant to change a bound,
and say so in the commit. The rows are drawn by numpy's PCG64 (the same on every machine); what they exercise: widths
around every loop's edge (lanes, ILP, chunks, the interpreter's block, ATen's grain size), shifted rows, integer
rows with a fractional shift (aligned residues), rows of few repeated values, zeros, NaN keys, 16-bit grids."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

from proofs import aten_moments, aten_sum, error_model, probabilistic
from proofs.reduction import NUMPY_PAIRWISE, Reduction

STORED = Path(__file__).parent / "data" / "bound_equivalence.npz"
U32, U16 = error_model.unit_roundoff("float32"), error_model.unit_roundoff("float16")
WIDTHS = (1, 2, 3, 7, 8, 9, 17, 100, 128, 129, 1000, 4097, 8193, 40000)
# The declared trees of the built-ins (core/adapters/torch_native.py on an AVX2 CPU, core/adapters/triton_ours.py).
ATEN_MOMENTS = Reduction(run=16, lanes=8, level_cost=2, finish=8 + 2, exact_tree="aten_moments", device="cpu")
ATEN_SUM = Reduction(run=16, lanes=32, fan=16, level_cost=16, finish=9 + 8 + 2, max_width=2**18 * 8,
                     exact_tree="aten_cascade_sum", device="cpu")
INTERPRETED = dataclasses.replace(NUMPY_PAIRWISE, block=8192, two_pass=True, exact_tree="numpy_pow2", device="cpu")
# ATen's row moments: chunk counts 3, 6, 12, 15, 17 (each with a short last chunk) besides those of WIDTHS.
MOMENT_WIDTHS = (280, 700, 1416, 1800, 2056)
BOUND_WIDTHS = (2, 9, 129, 1000, 8193)  # the public bounds: one width per regime of the trees
# Arrays longer than this are stored as a digest of their bits (-0.0 taken as 0.0, every NaN as one NaN), to keep
# the file small; the shorter ones as they are (a difference is then shown).
DIGEST_SIZE = 256
DECLARED = {"none": None, "moments": ATEN_MOMENTS, "sum": ATEN_SUM, "interpreted": INTERPRETED}


def rows(width: int, seed: int) -> dict[str, np.ndarray]:
    """Seeded float64 rows of one width (3 rows each; 2 for the widest), by kind."""
    rng = np.random.default_rng(seed)
    count = 2 if width > 10000 else 3
    normal = rng.standard_normal((count, width))
    return {
        "normal": normal.astype(np.float32).astype(np.float64),
        "shifted": (normal + 1e3).astype(np.float32).astype(np.float64),
        "integers": np.round(normal * 50) + 0.375,
        "repeated": rng.choice([-1.5, 0.25, 2.0, 0.0], size=(count, width)),
        "grid16": (normal * 3).astype(np.float16).astype(np.float64),
    }


def computed() -> dict[str, np.ndarray]:
    """Every function's outputs on the seeded rows, by name."""
    found: dict[str, np.ndarray] = {}

    def put(name: str, value) -> None:
        found[name] = stored_form(np.asarray(value))

    lam = probabilistic.lam(24)
    for width in WIDTHS:
        for label, x in rows(width, seed=width).items():
            key = f"{width}/{label}"
            keys = np.round(x * 2) / 2
            keys[..., ::5] = np.nan
            put(f"grouped/{key}", probabilistic.grouped(x, keys))
            put(f"concentrated/{key}", probabilistic.concentrated(x, U16))
            put(f"aligned/{key}", probabilistic.aligned(x, U32))
            top = 2 * U32 * np.exp2(np.floor(np.log2(np.max(np.abs(x), axis=-1, keepdims=True) + 1)) + 4)
            put(f"aligned_top/{key}", probabilistic.aligned(x, U32, top=top))
            exponents = np.broadcast_to(np.arange(-4.0, 14.0, 3.0), (*x.shape[:-1], 6))
            put(f"aligned_scales/{key}", probabilistic.aligned_scales(x, U32, exponents))
            put(f"sum_factor/{key}", probabilistic.sum_factor(x, U32, lam))
            put(f"tree_factor/{key}", probabilistic.tree_factor(x, inflation=1 + 1e-6))
            put(f"independent/{key}", probabilistic.independent(x))
            _trees(put, key, x, lam)
            _moments(put, key, x)
            if width in BOUND_WIDTHS:
                _bounds(put, key, x, np.random.default_rng(width + 1).standard_normal(x.shape))
    for width in MOMENT_WIDTHS:
        for label, x in rows(width, seed=width).items():
            _moments(put, f"{width}/{label}", x)
    for width in WIDTHS:
        put(f"aten_sum.depth/{width}", aten_sum.depth(width))
        put(f"reduction.depth/{width}", [r.depth(width) for r in (ATEN_MOMENTS, ATEN_SUM, INTERPRETED)])
    return found


def stored_form(array: np.ndarray) -> np.ndarray:
    """The array, or for one of more than DIGEST_SIZE elements the SHA-256 of its dtype, shape and bits (with -0.0
    as 0.0 and NaN as the one quiet NaN, which np.array_equal does not tell apart) as a bytes array."""
    if array.size <= DIGEST_SIZE:
        return array
    canonical = np.ascontiguousarray(array)
    if canonical.dtype.kind == "f":
        canonical = np.where(np.isnan(canonical), np.nan, canonical + 0.0).astype(array.dtype)
    digest = hashlib.sha256(f"{canonical.dtype}{canonical.shape}".encode() + canonical.tobytes()).hexdigest()
    return np.frombuffer(digest.encode(), dtype=np.uint8)


def _trees(put, key: str, x: np.ndarray, lam: float) -> None:
    inflation = 1 + probabilistic.gamma(x.shape[-1] - 1, U32)
    for name, declared in (("interpreted", INTERPRETED), ("interpreted_block64", dataclasses.replace(
            INTERPRETED, block=64)), ("sum", ATEN_SUM)):
        for label, value in zip(("factor", "linear"), declared.tree_sums(x, inflation) or (), strict=False):
            put(f"tree_sums_{label}/{name}/{key}", value)
        nodes = declared.tree_nodes(x)
        if nodes is not None:
            put(f"tree_nodes_total/{name}/{key}", nodes[0])
            put(f"tree_nodes/{name}/{key}", nodes[1])
        split = declared.tree_split(x, inflation, U32, lam)
        if split is not None:
            put(f"tree_split/{name}/{key}", split)
    for threads in (1, 2, 4):
        put(f"float32_sum/{threads}/{key}", aten_sum.float32_sum(x, threads=threads))
    for chunks in aten_sum.chunk_counts(x.shape[-1]):
        for label, value in zip(("squares", "linear"), aten_sum.node_sums(x, chunks=chunks, inflation=inflation),
                                strict=True):
            put(f"node_sums_{label}/{chunks}/{key}", value)


def _moments(put, key: str, x: np.ndarray) -> None:
    for contract in (True, False):
        state = aten_moments.row_moments(x.astype(np.float32), 8, contract=contract)
        put(f"row_moments32/{contract}/{key}", np.stack([state.m, state.m2]))
    state = aten_moments.row_moments(x, 8, U32)
    put(f"row_moments64/{key}", np.stack([state.m, state.m2, *state.errors]))
    put(f"row_moments64_no_u/{key}", np.stack(aten_moments.row_moments(x, 8).errors))
    for lam in (None, probabilistic.lam(3)):
        put(f"moments_error_bounds/{lam is None}/{key}", np.stack(aten_moments.error_bounds(x, 8, U32, lam)))
    put(f"moments_modelled/{key}", np.stack(aten_moments.modelled(x, U32)))


def _bounds(put, key: str, x: np.ndarray, dy: np.ndarray) -> None:
    width = x.shape[-1]
    weight = np.linspace(0.5, 1.5, width)
    bias = np.linspace(-1.0, 1.0, width)
    for kind, declared_names in (("ln", ("none", "moments", "interpreted")), ("rms", ("none", "sum", "interpreted"))):
        for name in declared_names:
            for model in error_model.BOUNDS:
                options = {"model": model, "declared": DECLARED[name]}
                tag = f"{kind}/{name}/{model}/{key}"
                put(f"forward/{tag}", error_model.forward_bound(x, weight, bias if kind == "ln" else None, 1e-5, U32,
                                                                U16, kind, **options))
                for index, value in enumerate(error_model.backward_bound(x, weight, 1e-5, dy, U32, U16, kind,
                                                                         **options)):
                    put(f"backward{index}/{tag}", value)
                for part, value in sorted(error_model.identity_bounds(x, None, 1e-5, dy, U32, U16, kind,
                                                                      **options).items()):
                    put(f"identity_{part}/{tag}", value)


@pytest.fixture(scope="module")
def stored() -> dict[str, np.ndarray]:
    with np.load(STORED) as archive:
        return dict(archive)


def test_every_bound_function_gives_the_stored_arrays_bit_for_bit(stored):
    found = computed()
    assert sorted(found) == sorted(stored), "the set of cases changed: rewrite the file only with a reason"
    differ = [name for name in found if found[name].dtype != stored[name].dtype
              or not np.array_equal(found[name], stored[name], equal_nan=found[name].dtype.kind == "f")]
    assert not differ, f"{len(differ)} of {len(found)} arrays differ, e.g. {differ[:5]}"


@pytest.mark.parametrize("kind", ("ln", "rms"))
def test_the_residual_kinds_bounds_are_the_two_calls_they_stand_for(kind):
    """error_model.residual_backward_bounds (one evaluation of the kernel's pieces where its row quantities are the
    oracle's) gives backward_bound at u_out = u_acc with the parameters' own unit roundoffs, and
    backward_terms_magnitude, bit for bit: without and with a declared tree, with flush-to-zero, each bound model."""
    width = BOUND_WIDTHS[2]
    declared_names = ("none", "moments") if kind == "ln" else ("none", "sum")
    for label, x in rows(width, seed=width).items():
        dy = np.random.default_rng(width + 1).standard_normal(x.shape)
        for weight in (None, np.linspace(0.5, 1.5, width)):
            for name, model, flush in itertools.product(declared_names, error_model.BOUNDS, (False, True)):
                options = {"declared": DECLARED[name], "flush_to_zero": flush}
                bounds, terms = error_model.residual_backward_bounds(x, weight, 1e-5, dy, U32, kind, model,
                                                                     u_weight=U16, u_bias=U32, **options)
                expected = error_model.backward_bound(x, weight, 1e-5, dy, U32, U32, kind, model, u_weight=U16,
                                                      u_bias=U32, **options)
                case = f"{label}, weight {weight is not None}, {name}, {model}, flush {flush}"
                assert len(bounds) == len(expected), case
                for found, wanted in zip(bounds, expected, strict=True):
                    assert (found is None and wanted is None) or np.array_equal(found, wanted, equal_nan=True), case
                assert np.array_equal(terms, error_model.backward_terms_magnitude(x, weight, 1e-5, dy, U32, kind,
                                                                                  model), equal_nan=True), case


def test_the_residue_fraction_is_np_mods_on_every_kind_of_operand():
    """probabilistic._residue_fraction computes np.mod(a, q) / q by a / q - floor(a / q) where that is exact: the
    same bits on negative terms far below q, terms far above it, zeros, subnormals, and (through np.mod) on moduli
    that are not normal powers of two, infinite or NaN terms."""
    rng = np.random.default_rng(27)
    magnitudes = np.exp2(rng.integers(-1074, 1023, 4000).astype(np.float64)) * rng.uniform(1, 2, 4000)
    a = np.concatenate([magnitudes * rng.choice([-1.0, 1.0], 4000), [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324,
                                                                      -5e-324, -1e-300, 1e300]])
    for q in (2.0**-1074, 2.0**-1030, 2.0**-149, 2.0**-24, 1.0, 2.0**40, 2.0**1023, 3.0, 0.1, np.inf, 0.0):
        with np.errstate(all="ignore"):
            expected = np.mod(a, q) / q
        assert np.array_equal(probabilistic._residue_fraction(a, np.float64(q)), expected, equal_nan=True), q


def test_the_moduli_tested_in_blocks_give_the_moduli_tested_at_once(monkeypatch):
    x = rows(1000, seed=3)["integers"]
    exponents = np.broadcast_to(np.arange(-10.0, 19.0), (*x.shape[:-1], 29))
    at_once = probabilistic.aligned_scales(x, U32, exponents)
    monkeypatch.setattr(probabilistic, "SCALES_AT_ONCE", 7000)  # 2 moduli a block, the last alone
    assert np.array_equal(probabilistic.aligned_scales(x, U32, exponents), at_once) and at_once.any()


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_bound_equivalence.py --write  (from the repository root)")
    np.savez_compressed(STORED, **computed())
    print(f"wrote {STORED}")
