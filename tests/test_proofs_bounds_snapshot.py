"""proofs.error_model's bounds on fixed seeded rows are those stored in tests/data/error_model_bounds.npz.

A refactor of the error model (its split into terms and bounds, the row-quantities record) must leave every bound as
it was: the snapshot holds forward_bound, backward_bound, identity_bounds, backward_terms_magnitude and
forward_bound_finite for LayerNorm and RMSNorm, both bound models, four pairs of unit roundoffs, with and without a
declared reduction (shape only, numpy's exact tree, ATen's row moments and cascade sum) and flush-to-zero.

Regenerate it only for an intended change of the model:
``PYTHONPATH=$PWD python tests/test_proofs_bounds_snapshot.py --write``; ``--write-full PATH`` before a refactor and
``--check PATH`` after it compare every bound bit for bit (as done for the split of proofs.error_model). The snapshot
keeps a fingerprint of each bound; the test compares at a relative 1e-13: the bounds call numpy's sin/cos/log
(probabilistic.aligned), whose last bit may differ between CPUs; any change of the model moves a bound by
far more (one rounding of float32 is 6e-8 relative).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np

from proofs import error_model, reduction

SNAPSHOT = Path(__file__).resolve().parent / "data" / "error_model_bounds.npz"
U = {name: error_model.unit_roundoff(name) for name in ("float32", "float16", "bfloat16")}
UNITS = ((U["float32"], U["float32"]), (U["float32"], U["float16"]), (U["float32"], U["bfloat16"]),
         (U["float16"], U["float16"]))
DECLARED = {
    "none": None,
    "pairwise": reduction.NUMPY_PAIRWISE,
    "numpy_pow2": dataclasses.replace(reduction.NUMPY_PAIRWISE, block=8192, two_pass=True, exact_tree="numpy_pow2"),
    "aten_moments": reduction.Reduction(run=16, lanes=4, level_cost=2, finish=6, exact_tree="aten_moments"),
    "aten_cascade_sum": dataclasses.replace(reduction.NUMPY_PAIRWISE, exact_tree="aten_cascade_sum"),
}


def rows(seed: int) -> dict[str, np.ndarray]:
    """Float32-rounded rows of three shapes, offset rows (kappa ~ 1e3) among them, with weight, bias and dy."""
    rng = np.random.default_rng(seed)
    found = {}
    for name, shape in (("narrow", (3, 7)), ("wide", (2, 48)), ("batched", (2, 2, 16))):
        offset = np.array([0.0, 1e3, -3.0][:shape[0]]).reshape((-1,) + (1,) * (len(shape) - 1))
        found[name] = (rng.standard_normal(shape) + offset).astype(np.float32).astype(np.float64)
        found[name + "/weight"] = rng.uniform(0.5, 1.5, shape[-1]).astype(np.float32).astype(np.float64)
        found[name + "/bias"] = rng.standard_normal(shape[-1]).astype(np.float32).astype(np.float64)
        found[name + "/dy"] = rng.standard_normal(shape).astype(np.float32).astype(np.float64)
    return found


def bounds() -> dict[str, np.ndarray]:
    """Every bound of the snapshot, by a name that says its case."""
    data, found = rows(26), {}
    for shape in ("narrow", "wide", "batched"):
        x, weight, bias, dy = (data[shape + suffix] for suffix in ("", "/weight", "/bias", "/dy"))
        for kind, units, model, (declared_name, declared) in (
                (k, us, m, dn) for k in ("ln", "rms") for us in UNITS for m in error_model.BOUNDS
                for dn in DECLARED.items()):
            if declared_name == "aten_moments" and kind == "rms":
                continue
            u_acc, u_out = units
            case = f"{shape}/{kind}/{u_acc:g}/{u_out:g}/{model}/{declared_name}"
            spelled = {"ln": "layernorm", "rms": "rmsnorm"}[kind] if shape == "wide" else kind
            ftz = shape == "batched" and declared is None
            options = {"declared": declared, "flush_to_zero": ftz}
            found[case + "/forward"] = error_model.forward_bound(x, weight, bias if kind == "ln" else None, 1e-5,
                                                                 u_acc, u_out, spelled, model, **options)
            found[case + "/forward_unweighted"] = error_model.forward_bound(x, None, None, 1e-3, u_acc, u_out, kind,
                                                                            model, **options)
            found[case + "/finite"] = np.array(error_model.forward_bound_finite(x, 1e-5, u_acc, kind, model,
                                                                                **options))
            backward = error_model.backward_bound(x, weight, 1e-5, dy, u_acc, u_out, spelled, model,
                                                  u_weight=U["float32"], u_bias=u_out, **options)
            for name, value in zip(("dx", "dweight", "dbias"), backward, strict=False):
                found[f"{case}/backward_{name}"] = value
            found[case + "/backward_unweighted_dx"] = error_model.backward_bound(x, None, 1e-5, dy, u_acc, u_out,
                                                                                 kind, model, **options)[0]
            for name, value in error_model.identity_bounds(x, weight, 1e-5, dy, u_acc, u_out, kind, model,
                                                           **options).items():
                found[f"{case}/identity_{name}"] = value
            if declared is None:
                found[case + "/terms_magnitude"] = error_model.backward_terms_magnitude(x, weight, 1e-5, dy, u_acc,
                                                                                        kind, model)
    return found


def fingerprint(bound: np.ndarray) -> np.ndarray:
    """NaN count, inf count, sum, index-weighted sum and max of the finite values: a few numbers that move with any
    element (the snapshot stores these, not the 64 000 bounds themselves)."""
    flat = np.ravel(bound).astype(np.float64)
    finite = flat[np.isfinite(flat)]
    weights = np.arange(1, flat.size + 1)[np.isfinite(flat)] / flat.size
    return np.array([np.isnan(flat).sum(), np.isinf(flat).sum(), finite.sum(), (finite * weights).sum(),
                     finite.max(initial=0.0)])


def test_bounds_are_the_snapshot():
    stored = np.load(SNAPSHOT)
    found = bounds()
    assert list(stored["names"]) == sorted(found)
    for name, expected in zip(stored["names"], stored["fingerprints"], strict=True):
        np.testing.assert_allclose(fingerprint(found[name]), expected, rtol=1e-13, atol=0, err_msg=name)


if __name__ == "__main__":  # run from the repository root with PYTHONPATH=$PWD (the tree under test)
    command, *path = sys.argv[1:]
    if command == "--write":
        found = bounds()
        names = sorted(found)
        np.savez_compressed(SNAPSHOT, names=np.array(names), fingerprints=np.stack([fingerprint(found[n])
                                                                                    for n in names]))
    elif command == "--write-full":  # every bound, to compare bit for bit across a refactor (--check PATH)
        np.savez(path[0], **bounds())
    elif command == "--check":
        stored, found = np.load(path[0]), bounds()
        differ = [name for name in found if name in stored.files
                  and not np.array_equal(found[name], stored[name], equal_nan=True)]
        extra = sorted(set(stored.files) ^ set(found))
        print(f"{len(found)} arrays; {len(differ)} differ bit for bit; {len(extra)} missing or extra", differ[:5])
        sys.exit(1 if differ or extra else 0)
