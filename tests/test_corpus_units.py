"""The corpus itself, without the conformance suite: every kernel loads from its SPEC, every bug is really
there (the kernel disagrees with float64 torch where its bug shows), and every broken kernel is minimal
(it agrees with float64 torch where its bug cannot show), every correct kernel agrees everywhere tried.

References: torch's own layer_norm / rms_norm in float64 on the exact (already rounded) inputs.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from corpus import BROKEN, CORPUS, CORRECT

from core.kinds import RECORDS
from core.registry import Kernel, resolve

ROOT = Path(__file__).resolve().parents[1]
CORPUS_DIR = ROOT / "tests" / "corpus"


def kernel(spec: str) -> Kernel:
    (found,) = resolve(str(ROOT / spec) if spec.startswith("tests/") else spec)
    return found


def corpus_kernel(attr_path: str) -> Kernel:
    return kernel(f"tests/corpus/{attr_path}")


# --- inputs and references --------------------------------------------------------------------------------------


def rows(n: int, d: int, mean: float = 0.0, std: float = 1.0, dtype: torch.dtype = torch.float32,
         seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return (mean + std * torch.randn(n, d, generator=generator, dtype=torch.float64)).to(dtype)


def parameters(d: int, seed: int = 1, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    weight = 1.0 + 0.5 * torch.randn(d, generator=generator, dtype=torch.float64)
    bias = 0.5 * torch.randn(d, generator=generator, dtype=torch.float64)
    return weight.to(dtype), bias.to(dtype)


def _double(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.double()


def reference(k: Kernel, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
              eps: float) -> torch.Tensor:
    """Float64 torch on the same rounded inputs, with the kernel's declared weight convention."""
    gamma = None if weight is None else k.weight_offset + _double(weight)
    if k.kind == "rmsnorm":
        return F.rms_norm(_double(x), (x.shape[-1],), gamma, eps)
    return F.layer_norm(_double(x), (x.shape[-1],), gamma, _double(bias), eps)


def run(k: Kernel, x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
        eps: float) -> torch.Tensor:
    return k.fn(x, weight, eps) if k.kind == "rmsnorm" else k.fn(x, weight, bias, eps)


def forward_error(k: Kernel, x: torch.Tensor, weight=None, bias=None, eps: float = 1e-5) -> float:
    """max |kernel - float64 reference| (inf when the kernel returns NaN/inf)."""
    got = run(k, x, weight, bias, eps).detach().double()
    error = (got - reference(k, x, weight, bias, eps)).abs()
    return float("inf") if not bool(torch.isfinite(error).all()) else float(error.max())


# --- the manifest -----------------------------------------------------------------------------------------------

# A claim id of any family (ln, rms, dropout, add_ln, ..., blocks), longest family first.
FAMILIES = sorted({family for record in RECORDS for family in record.families}, key=len, reverse=True)
CLAIM_ID = re.compile(rf"\b(?:{'|'.join(FAMILIES)})\.[a-z_]+\b")


def test_corpus_has_at_least_25_broken_and_5_correct_kernels():
    assert len(BROKEN) >= 25
    assert len(CORRECT) >= 5
    assert len({entry.spec for entry in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize("entry", CORPUS, ids=lambda entry: entry.spec)
def test_every_spec_loads_to_kernels_with_unique_names(entry):
    kernels = resolve(str(ROOT / entry.spec) if entry.spec.startswith("tests/") else entry.spec)
    assert kernels and all(isinstance(k, Kernel) for k in kernels)
    if entry.spec.startswith("tests/"):
        (k,) = kernels
        assert k.spec == entry.spec, "the kernel's spec must replay it"


def test_kernel_names_are_unique_across_the_corpus():
    names = [k.name for entry in CORPUS for k in resolve(str(ROOT / entry.spec) if ":" in entry.spec else entry.spec)]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("entry", BROKEN, ids=lambda entry: entry.spec)
def test_each_broken_kernel_names_exactly_its_expected_claims(entry):
    """The description (the bug's docstring) names the claims of the manifest, and only claims of its kind (the
    families checked on its kernels: LayerNorm's include the block claims)."""
    k = kernel(entry.spec)
    named = set(CLAIM_ID.findall(k.description))
    assert entry.expect <= named, f"{k.name}: description does not name {sorted(entry.expect - named)}"
    assert all(claim.partition(".")[0] in k.families for claim in entry.expect)


def test_every_kernel_in_the_corpus_files_is_in_the_manifest():
    listed = {entry.spec for entry in CORPUS}
    for path in sorted(CORPUS_DIR.glob("[!_]*.py")):
        module_spec = importlib.util.spec_from_file_location(f"corpus_listing_{path.stem}", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        for attr, value in vars(module).items():
            if isinstance(value, Kernel):
                assert f"tests/corpus/{path.name}:{attr}" in listed, f"{path.name}:{attr} is not in the manifest"


def test_the_claims_in_the_manifest_exist():
    from proofs.claims import CLAIMS

    unknown = {claim for entry in CORPUS for claim in entry.expect} - set(CLAIMS)
    assert not unknown


@pytest.mark.parametrize("entry", [e for e in CORRECT if e.declared_for], ids=lambda e: e.spec)
def test_a_correct_kernel_run_on_some_claims_only_is_a_correct_kernel_with_declarations_added(entry):
    """``declared_for`` (the corpus run's claims of it): its kernel is another correct entry's, the same function of
    the same kind, with only the declarations that those claims read changed."""
    import dataclasses

    from proofs.claims import CLAIMS

    def packaged(spec: str) -> Kernel:  # from the corpus package, where one file's kernels reuse another's functions
        path, attr = spec.removeprefix("tests/corpus/").split(":")
        return getattr(importlib.import_module(f"corpus.{path.removesuffix('.py')}"), attr)

    k = packaged(entry.spec)
    twins = [packaged(e.spec) for e in CORRECT if not e.declared_for and e.spec.startswith("tests/corpus/")]
    twin = next((t for t in twins if t.fn is k.fn and t.kind == k.kind), None)
    assert twin is not None, f"{k.name}: no correct entry computes with its function"
    differ = {f.name for f in dataclasses.fields(Kernel) if getattr(k, f.name) != getattr(twin, f.name)}
    assert differ <= {"name", "spec", "description", "batch_invariant", "deterministic"}, differ
    assert entry.declared_for <= set(CLAIMS) and all(claim.partition(".")[0] in k.families
                                                     for claim in entry.declared_for)
    if differ & {"batch_invariant", "deterministic"}:
        assert {claim.partition(".")[2] for claim in entry.declared_for} == {"batch_invariance", "determinism"}


# --- forward bugs: benign where the bug cannot show, wrong where it does -------------------------------------------

# (kernel, benign input, input that shows the bug); each input: (x, weight, bias, eps).
D = 64
W, B = parameters(D)
TYPICAL = (rows(8, D), W, B, 1e-5)
FORWARD_BUGS = {
    "statistics.py:LN_ONE_PASS_VARIANCE": (TYPICAL, (rows(8, D, mean=1e4), W, B, 1e-5)),
    "statistics.py:LN_EPS_OUTSIDE_ROOT": (TYPICAL, (rows(8, D, std=1e-2), W, B, 1e-2)),
    "statistics.py:LN_UNBIASED_VARIANCE": ((torch.full((2, D), 3.0), W, B, 1e-5), (rows(8, 3), W[:3], B[:3], 1e-5)),
    "statistics.py:LN_NO_EPS": (TYPICAL, (torch.full((2, D), 3.0), W, B, 1e-5)),
    "statistics.py:LN_MAX_VARIANCE_EPS": ((rows(8, D), W, B, 1e-12), (rows(8, D), W, B, 1e-2)),
    "statistics.py:LN_EPS_IGNORED": (TYPICAL, (rows(8, D, std=1e-2), W, B, 1e-2)),
    "statistics.py:LN_EPS_UNUSUAL_CONSTANT": ((rows(8, D), W, B, 3e-4), (rows(8, D, std=1e-2), W, B, 1e-2)),
    "statistics.py:LN_WHOLE_TENSOR_STATISTICS": ((rows(1, D), W, B, 1e-5),
                                                 (torch.cat([rows(1, D), rows(1, D, mean=5.0, std=3.0)]), W, B, 1e-5)),
    "statistics.py:LN_ROW_BLOCK_STATISTICS": ((rows(1, D), W, B, 1e-5),
                                              (torch.cat([rows(1, D), rows(1, D, mean=5.0, std=3.0)]), W, B, 1e-5)),
    "statistics.py:RMS_CENTRES": ((torch.cat([rows(8, D // 2), -rows(8, D // 2)], -1), W, None, 1e-5),  # mean 0
                                   (rows(8, D, mean=1.0), W, None, 1e-5)),
    "statistics.py:RMS_SUM_OF_SQUARES": ((rows(8, 1), W[:1], None, 1e-5), TYPICAL),
    "statistics.py:RMS_EPS_IGNORED": ((rows(8, D), W, None, 1e-6), (rows(8, D, std=1e-2), W, None, 1e-2)),
    "statistics.py:RMS_EPS_UNUSUAL_CONSTANT": ((rows(8, D), W, None, 2.5e-3), (rows(8, D, std=1e-2), W, None, 1e-2)),
    "statistics.py:RMS_NO_EPS": ((rows(8, D), W, None, 1e-12), (torch.zeros(2, D), W, None, 1e-5)),
    "statistics.py:RMS_WHOLE_TENSOR_STATISTICS": ((rows(1, D), W, None, 1e-5),
                                                  (torch.cat([rows(1, D), rows(1, D, std=5.0)]), W, None, 1e-5)),
    "statistics.py:RMS_GEMMA_OFFSET_MISSING": ((rows(8, D), None, None, 1e-5), (rows(8, D), W, None, 1e-5)),
    "rows.py:LN_SEQUENCE_FIRST_FLATTEN": ((rows(6, D), W, B, 1e-5), (rows(6, D).reshape(2, 3, D), W, B, 1e-5)),
    "padded_block.py:LN_PADDED_LANES": ((rows(8, D), W, B, 1e-5), (rows(8, D - 1, mean=1.0), W[:-1], B[:-1], 1e-5)),
    "derived.py:LN_ONE_PASS_AROUND_ONE_SHIFT": ((rows(8, D, mean=100.0), W, B, 1e-5),
                                                (torch.cat([rows(1, D), rows(1, D, mean=1e4)]), W, B, 1e-5)),
    "derived.py:LN_FLUSH_TO_ZERO": ((rows(8, D, std=1e-3), W, B, 1e-12), (rows(8, D, std=2.0**-64), W, B, 4.0**-64)),
    "derived.py:RMS_FLUSH_TO_ZERO": ((rows(8, D, std=1e-3), W, None, 1e-12),
                                     (rows(8, D, std=2.0**-64), W, None, 4.0**-64)),
}
AGREES = 1e-4  # fp32 output vs float64: a correct kernel is within ~1e-6 here
DISAGREES = 1e-2


@pytest.mark.parametrize("attr_path", FORWARD_BUGS)
def test_forward_bug_is_minimal(attr_path):
    benign, _ = FORWARD_BUGS[attr_path]
    assert forward_error(corpus_kernel(attr_path), *benign) < AGREES


@pytest.mark.parametrize("attr_path", FORWARD_BUGS)
def test_forward_bug_shows(attr_path):
    _, showing = FORWARD_BUGS[attr_path]
    assert forward_error(corpus_kernel(attr_path), *showing) > DISAGREES


def test_one_pass_variance_is_wrong_by_orders_of_magnitude_at_mean_over_std_1e4():
    x = rows(8, 256, mean=1e4)
    textbook = forward_error(corpus_kernel("statistics.py:LN_TEXTBOOK"), x)
    one_pass = forward_error(corpus_kernel("statistics.py:LN_ONE_PASS_VARIANCE"), x)
    assert one_pass > 1e3 * textbook
    assert one_pass > 0.1


def test_fp16_accumulation_is_wrong_only_for_fp16_and_by_far_more_than_rounding():
    k = corpus_kernel("statistics.py:LN_STORAGE_DTYPE_ACCUMULATION")
    textbook = corpus_kernel("statistics.py:LN_TEXTBOOK")
    x32 = rows(4, 4096, mean=10.0)
    assert forward_error(k, x32) < AGREES
    x16 = x32.half()
    assert forward_error(k, x16) > 10 * forward_error(textbook, x16)


def test_eps_outside_the_root_is_far_off_at_small_variance():
    x = rows(4, D, std=1e-3)
    assert forward_error(corpus_kernel("statistics.py:LN_EPS_OUTSIDE_ROOT"), x, eps=1e-5) > 0.5


def test_row_statistics_bugs_make_rows_depend_on_each_other():
    x = rows(8, D)
    changed = x.clone()
    changed[0] = 7.0 + 3.0 * changed[0]
    for attr_path in ("statistics.py:LN_WHOLE_TENSOR_STATISTICS", "statistics.py:LN_ROW_BLOCK_STATISTICS",
                      "statistics.py:RMS_WHOLE_TENSOR_STATISTICS"):
        k = corpus_kernel(attr_path)
        assert not torch.equal(run(k, x, W, B, 1e-5)[1], run(k, changed, W, B, 1e-5)[1]), attr_path
    blocks = corpus_kernel("statistics.py:LN_ROW_BLOCK_STATISTICS")
    assert torch.equal(run(blocks, x, W, B, 1e-5)[4:], run(blocks, changed, W, B, 1e-5)[4:])


def test_nan_row_spreads_only_with_whole_tensor_statistics():
    x = rows(4, D)
    x[0, 3] = float("nan")
    assert torch.isnan(run(corpus_kernel("statistics.py:LN_WHOLE_TENSOR_STATISTICS"), x, W, B, 1e-5)[1]).all()
    assert torch.isfinite(run(corpus_kernel("statistics.py:LN_TEXTBOOK"), x, W, B, 1e-5)[1]).all()


def test_padded_lanes_are_right_exactly_at_powers_of_two():
    k = corpus_kernel("padded_block.py:LN_PADDED_LANES")
    for d in (1, 2, 16, 128):
        assert forward_error(k, rows(3, d, mean=2.0), *parameters(d), 1e-5) < AGREES, d
    for d in (3, 17, 100):
        assert forward_error(k, rows(3, d, mean=2.0), *parameters(d), 1e-5) > DISAGREES, d


# --- backward bugs ----------------------------------------------------------------------------------------------


def gradients(k: Kernel, x: torch.Tensor, weight, bias, eps: float, dy: torch.Tensor) -> dict[str, torch.Tensor]:
    leaves = {"x": x.clone().requires_grad_(True), "weight": weight.clone().requires_grad_(True)}
    if k.kind == "layernorm":
        leaves["bias"] = bias.clone().requires_grad_(True)
    y = run(k, leaves["x"], leaves["weight"], leaves.get("bias"), eps)
    return dict(zip(leaves, torch.autograd.grad(y, list(leaves.values()), dy), strict=True))


def reference_gradients(k: Kernel, x, weight, bias, eps: float, dy) -> dict[str, torch.Tensor]:
    leaves = {"x": x.double().clone().requires_grad_(True), "weight": weight.double().clone().requires_grad_(True)}
    if k.kind == "layernorm":
        leaves["bias"] = bias.double().clone().requires_grad_(True)
    y = reference(k, leaves["x"], leaves["weight"], leaves.get("bias"), eps)
    return dict(zip(leaves, torch.autograd.grad(y, list(leaves.values()), _double(dy)), strict=True))


def gradient_errors(k: Kernel, x, weight, bias, eps: float, dy) -> dict[str, float]:
    got, want = gradients(k, x, weight, bias, eps, dy), reference_gradients(k, x, weight, bias, eps, dy)
    return {name: float((got[name].double() - want[name]).abs().nan_to_num(float("inf")).max()) for name in want}


DY = rows(8, D, seed=5)
BACKWARD_BUGS = {  # kernel -> the gradients its bug makes wrong (on TYPICAL, with random gamma and beta)
    "fused.py:LN_BWD_NO_GAMMA": {"x"},
    "fused.py:LN_BWD_NO_MEAN_TERM": {"x"},
    "fused.py:LN_BWD_NO_VARIANCE_TERM": {"x"},
    "fused.py:LN_DGAMMA_FROM_OUTPUT": {"weight"},
    "fused.py:LN_DGAMMA_MISSING": {"weight"},
    "fused.py:RMS_BWD_NO_VARIANCE_TERM": {"x"},
}
GRADIENT_CONTROLS = ["fused.py:LN_FUSED", "fused.py:RMS_FUSED", "statistics.py:LN_TEXTBOOK",
                     "statistics.py:RMS_TEXTBOOK", "correct.py:LN_TWO_PASS_FLOAT64", "correct.py:LN_WELFORD",
                     "correct.py:RMS_TWO_PASS_FLOAT64", "correct.py:RMS_LLAMA", "correct.py:RMS_GEMMA"]


@pytest.mark.parametrize("attr_path", GRADIENT_CONTROLS)
@pytest.mark.parametrize("d", [1, 3, 1000, 4099])
def test_correct_kernels_forward_matches_float64(attr_path, d):
    """Several Welford chunks from d = 1000 on; |mean|/std = 100."""
    weight, bias = parameters(d)
    assert forward_error(corpus_kernel(attr_path), rows(3, d, mean=100.0), weight, bias) < AGREES


@pytest.mark.parametrize("attr_path", GRADIENT_CONTROLS)
def test_correct_kernels_gradients_match_float64(attr_path):
    errors = gradient_errors(corpus_kernel(attr_path), *TYPICAL, DY)
    assert max(errors.values()) < AGREES, errors


@pytest.mark.parametrize("attr_path", BACKWARD_BUGS)
def test_backward_bug_breaks_exactly_its_gradients(attr_path):
    errors = gradient_errors(corpus_kernel(attr_path), *TYPICAL, DY)
    wrong = {name for name, error in errors.items() if error > DISAGREES}
    assert wrong == BACKWARD_BUGS[attr_path], errors
    assert all(errors[name] < AGREES for name in errors.keys() - wrong), errors


BFLOAT16_UNIT_ROUNDOFF = 2.0**-8


def worst_bfloat16_dx_error(k: Kernel, d: int, seeds: int = 20) -> float:
    """max |dx - float64 dx| / max(rstd |gamma dy|) over bf16 examples: the error relative to the size of the
    terms dx is the nearly cancelling sum of (a correct kernel: about the bf16 rounding of dx, <= u)."""
    worst = 0.0
    for seed in range(seeds):
        x = rows(4, d, seed=seed).bfloat16()
        weight, bias = parameters(d, seed=seed + 100, dtype=torch.bfloat16)
        dy = rows(4, d, seed=seed + 200).bfloat16()
        error = gradient_errors(k, x, weight, bias, 1e-5, dy)["x"]
        centred = x.double() - x.double().mean(-1, keepdim=True)
        rstd = 1.0 / (centred.square().mean(-1, keepdim=True) + 1e-5).sqrt()
        worst = max(worst, error / float((rstd * (dy.double() * weight.double()).abs()).max()))
    return worst


@pytest.mark.parametrize("attr_path", ["statistics.py:LN_TEXTBOOK", "fused.py:LN_FUSED", "correct.py:LN_WELFORD",
                                       "correct.py:LN_TWO_PASS_FLOAT64"])
def test_correct_kernels_keep_bfloat16_gradients_accurate(attr_path):
    for d in (2, 13):
        assert worst_bfloat16_dx_error(corpus_kernel(attr_path), d) <= 2 * BFLOAT16_UNIT_ROUNDOFF, d


def worst_bfloat16_dbias_error(k: Kernel, seeds: int = 20) -> float:
    """max |dbias - sum of dy (float64)| / |sum of dy| over bf16 examples of 4 rows, d = 31, in units of u."""
    worst = 0.0
    for seed in range(seeds):
        x, dy = rows(4, 31, seed=seed).bfloat16(), rows(4, 31, seed=seed + 200).bfloat16()
        weight, bias = parameters(31, seed=seed + 100, dtype=torch.bfloat16)
        dbias = gradients(k, x, weight, bias, 1e-5, dy)["bias"].double()
        exact = dy.double().sum(0)
        worst = max(worst, float(((dbias - exact).abs() / exact.abs()).max()) / BFLOAT16_UNIT_ROUNDOFF)
    return worst


@pytest.mark.skipif(torch.cuda.is_available(), reason="the declaration is about torch's CPU layer_norm")
def test_torch_cpu_layer_norm_backward_rounds_in_half_precision():
    """Why the torch built-in declares backward_precision="storage" on the CPU (core/adapters/torch_native.py):
    aten.native_layer_norm keeps mean and rstd in the bf16/fp16 storage dtype, and the backward's dbias over 4
    rows is off by several u, where a float32 sum of 4 bf16 values rounded once is within u (relative)."""
    (torch_layernorm,) = resolve("torch", "layernorm")
    assert torch_layernorm.backward_precision == "storage"
    _, mean, rstd = torch.ops.aten.native_layer_norm(torch.ones(2, 8, dtype=torch.float16), [8], None, None, 1e-5)
    assert mean.dtype == rstd.dtype == torch.float16
    assert worst_bfloat16_dbias_error(torch_layernorm) > 4
    assert worst_bfloat16_dbias_error(corpus_kernel("fused.py:LN_FUSED")) <= 1


def test_casting_at_each_use_loses_bfloat16_gradient_accuracy_only():
    """At d = 1 the exact dx is 0 (LayerNorm of one element is beta): casting once gives exactly 0, casting at each
    use leaves the bf16 rounding error of one partial gradient, about u rstd |gamma dy| with rstd = 1/sqrt(eps)."""
    x, dy = rows(4, 1).bfloat16(), rows(4, 1, seed=5).bfloat16()
    weight, bias = parameters(1, dtype=torch.bfloat16)
    twice = gradients(corpus_kernel("statistics.py:LN_CAST_AT_EACH_USE"), x, weight, bias, 1e-5, dy)["x"]
    once = gradients(corpus_kernel("statistics.py:LN_TEXTBOOK"), x, weight, bias, 1e-5, dy)["x"]
    assert float(twice.abs().max()) > 0.01
    assert float(once.abs().max()) == 0.0
    k = corpus_kernel("statistics.py:LN_CAST_AT_EACH_USE")
    assert max(gradient_errors(k, *TYPICAL, DY).values()) < AGREES  # float32: the casts are exact
    assert forward_error(k, rows(4, D).bfloat16(), None, None) < 8 * BFLOAT16_UNIT_ROUNDOFF


def test_xhat_from_output_is_right_for_nonzero_gamma_and_breaks_at_gamma_zero():
    k = corpus_kernel("fused.py:LN_BWD_XHAT_FROM_OUTPUT")
    assert max(gradient_errors(k, *TYPICAL, DY).values()) < AGREES
    x, weight, bias, eps = TYPICAL
    zeroed = weight.clone()
    zeroed[::4] = 0.0
    assert gradient_errors(k, x, zeroed, bias, eps, DY)["weight"] == float("inf")


def test_gradient_identities_broken_by_the_missing_terms():
    """Row sum of dx is 0 for LN with constant gamma; x . dx = 0 at eps = 0 (scale invariance)."""
    x, _, bias, _ = TYPICAL
    ones = torch.ones(D)
    for attr_path, identity in (("fused.py:LN_BWD_NO_MEAN_TERM", "sum"), ("fused.py:LN_BWD_NO_VARIANCE_TERM", "dot"),
                                ("fused.py:LN_FUSED", "sum"), ("fused.py:LN_FUSED", "dot")):
        dx = gradients(corpus_kernel(attr_path), x, ones, bias, 0.0, DY)["x"]
        value = dx.sum(-1) if identity == "sum" else (x * dx).sum(-1)
        broken = attr_path != "fused.py:LN_FUSED"
        assert (float(value.abs().max()) > DISAGREES) == broken, (attr_path, identity)


# --- layout and buffers ------------------------------------------------------------------------------------------


def test_strides_ignored_is_right_for_contiguous_and_wrong_for_a_transposed_input():
    for attr_path in ("fused.py:LN_STRIDES_IGNORED", "fused.py:RMS_STRIDES_IGNORED"):
        k = corpus_kernel(attr_path)
        x = rows(D, 8).t()
        assert forward_error(k, x.contiguous(), W, B) < AGREES
        assert forward_error(k, x, W, B) > DISAGREES


def test_upstream_strides_ignored_is_wrong_only_for_a_non_contiguous_upstream_gradient():
    k = corpus_kernel("fused.py:LN_UPSTREAM_STRIDES_IGNORED")
    dy = rows(D, 8, seed=5).t()
    assert max(gradient_errors(k, *TYPICAL, dy.contiguous()).values()) < AGREES
    assert gradient_errors(k, *TYPICAL, dy)["x"] > DISAGREES


@pytest.mark.parametrize("attr_path", ["fused.py:LN_INPUT_OVERWRITTEN", "fused.py:RMS_INPUT_OVERWRITTEN"])
def test_input_overwritten_writes_x_but_computes_the_right_values(attr_path):
    k = corpus_kernel(attr_path)
    x, weight, bias, eps = TYPICAL
    given = x.clone()
    y = run(k, given, weight, bias, eps)
    assert not torch.equal(given, x)
    assert float((y.double() - reference(k, x, weight, bias, eps)).abs().max()) < AGREES
    got = gradients(k, x, weight, bias, eps, DY)
    want = reference_gradients(k, x, weight, bias, eps, DY)
    assert max(float((got[name].double() - want[name]).abs().max()) for name in want) < AGREES


def test_upstream_overwritten_writes_dy_but_dx_is_right():
    k = corpus_kernel("fused.py:LN_UPSTREAM_OVERWRITTEN")
    x, weight, bias, eps = TYPICAL
    dy = DY.clone()
    got = gradients(k, x, weight, bias, eps, dy)
    assert torch.allclose(dy, DY * weight)
    want = reference_gradients(k, x, weight, bias, eps, DY)
    assert float((got["x"].double() - want["x"]).abs().max()) < AGREES


# --- dropout ----------------------------------------------------------------------------------------------------

X = rows(64, 256, mean=1.0, seed=3)


def dropout(attr_path: str, x: torch.Tensor = X, p: float = 0.2, seed: int = 11) -> torch.Tensor:
    return corpus_kernel(attr_path).fn(x.clone(), p, seed)


def kept(y: torch.Tensor) -> torch.Tensor:
    return y != 0


def test_bernoulli_dropout_is_deterministic_scaled_and_keeps_1_minus_p():
    y = dropout("dropout.py:DROPOUT_BERNOULLI")
    assert torch.equal(y, dropout("dropout.py:DROPOUT_BERNOULLI"))
    assert not torch.equal(y, dropout("dropout.py:DROPOUT_BERNOULLI", seed=12))
    assert torch.allclose(y[kept(y)], X[kept(y)] / 0.8)
    assert abs(float(kept(y).double().mean()) - 0.8) < 0.01  # 16384 draws: sd 0.003
    assert torch.equal(dropout("dropout.py:DROPOUT_BERNOULLI", p=1.0), torch.zeros_like(X))
    assert torch.equal(dropout("dropout.py:DROPOUT_BERNOULLI", p=0.0), X)


def test_dropout_without_rescale_keeps_x_unscaled():
    y = dropout("dropout.py:DROPOUT_NO_RESCALE")
    assert torch.equal(y[kept(y)], X[kept(y)])


def test_dropout_keep_drop_swapped_keeps_p():
    y = dropout("dropout.py:DROPOUT_KEEP_DROP_SWAPPED")
    assert abs(float(kept(y).double().mean()) - 0.2) < 0.01
    assert torch.allclose(y[kept(y)], X[kept(y)] / 0.8)


def test_dropout_seed_ignored_changes_between_calls():
    assert not torch.equal(dropout("dropout.py:DROPOUT_SEED_IGNORED"), dropout("dropout.py:DROPOUT_SEED_IGNORED"))


def test_dropout_mask_per_row_drops_whole_rows_at_the_right_rate():
    y = dropout("dropout.py:DROPOUT_MASK_PER_ROW", x=rows(4096, 8, mean=1.0, seed=3))
    per_row = kept(y).all(-1) | (~kept(y)).all(-1)
    assert per_row.all()
    assert abs(float(kept(y).double().mean()) - 0.8) < 0.02  # 4096 rows: sd 0.006


def test_dropout_input_overwritten_writes_x():
    x = X.clone()
    y = corpus_kernel("dropout.py:DROPOUT_INPUT_OVERWRITTEN").fn(x, 0.2, 11)
    assert torch.equal(y, dropout("dropout.py:DROPOUT_BERNOULLI"))
    assert not torch.equal(x, X)


def test_dropout_identity_below_a_tenth_returns_x_only_there():
    assert torch.equal(dropout("dropout.py:DROPOUT_IDENTITY_BELOW_A_TENTH", p=0.05), X)
    assert torch.equal(dropout("dropout.py:DROPOUT_IDENTITY_BELOW_A_TENTH"), dropout("dropout.py:DROPOUT_BERNOULLI"))


def test_dropout_nan_at_one_is_nan_only_at_one():
    assert torch.isnan(dropout("dropout.py:DROPOUT_NAN_AT_ONE", p=1.0)).all()
    assert torch.equal(dropout("dropout.py:DROPOUT_NAN_AT_ONE"), dropout("dropout.py:DROPOUT_BERNOULLI"))


@pytest.mark.parametrize(("attr", "same_as"), [("DROPOUT_FIXED_INTERNAL_SEED", 12), ("DROPOUT_SEED_PARITY", 13)])
def test_dropout_seed_bugs_give_another_seed_the_same_mask(attr, same_as):
    y = dropout(f"dropout.py:{attr}")
    assert torch.equal(y, dropout(f"dropout.py:{attr}"))
    assert torch.equal(y, dropout(f"dropout.py:{attr}", seed=same_as))


def test_dropout_unseeded_when_large_is_deterministic_only_up_to_65536_elements():
    small, large = rows(256, 256, mean=1.0, seed=3), rows(257, 256, mean=1.0, seed=3)
    assert torch.equal(dropout("dropout.py:DROPOUT_UNSEEDED_WHEN_LARGE", x=small),
                       dropout("dropout.py:DROPOUT_UNSEEDED_WHEN_LARGE", x=small))
    assert not torch.equal(dropout("dropout.py:DROPOUT_UNSEEDED_WHEN_LARGE", x=large),
                           dropout("dropout.py:DROPOUT_UNSEEDED_WHEN_LARGE", x=large))


def test_dropout_fixed_count_drops_round_p_d_in_every_row():
    assert (kept(dropout("dropout.py:DROPOUT_FIXED_COUNT_PER_ROW")).sum(-1) == 256 - round(0.2 * 256)).all()


@pytest.mark.parametrize("k", [2, 4])
def test_dropout_blocks_share_one_draw(k):
    blocks = kept(dropout(f"dropout.py:DROPOUT_BLOCKS_OF_{k}")).view(-1, k)
    assert (blocks == blocks[:, :1]).all()
    assert abs(float(blocks.double().mean()) - 0.8) < 0.02  # 4096 blocks of 4: sd 0.006


def test_dropout_neighbour_copies_correlates_neighbours():
    masks = kept(dropout("dropout.py:DROPOUT_NEIGHBOUR_COPIES")).double()
    agreement = float((masks[:, 1:] == masks[:, :-1]).double().mean())
    assert abs(agreement - (0.68 + 2 * 0.25 * 0.16)) < 0.01  # p^2 + q^2 + 2 rho p q; 16320 pairs: sd 0.004


def test_dropout_strided_counters_repeat_shifted_rows_on_a_transposed_input():
    masks = kept(dropout("dropout.py:DROPOUT_STRIDED_COUNTERS", x=X.t()))
    assert torch.equal(masks[1:, :-1], masks[:-1, 1:])
    assert not torch.equal(kept(dropout("dropout.py:DROPOUT_STRIDED_COUNTERS"))[1:, :-1],
                           kept(dropout("dropout.py:DROPOUT_STRIDED_COUNTERS"))[:-1, 1:])


@pytest.mark.parametrize("attr", ["DROPOUT_BACKWARD_OTHER_MASK", "DROPOUT_BACKWARD_UNSCALED"])
def test_dropout_backward_bugs_differ_from_mask_over_1_minus_p(attr):
    x = X.clone().requires_grad_(True)
    y = corpus_kernel(f"dropout.py:{attr}").fn(x, 0.2, 11)
    (dx,) = torch.autograd.grad(y, x, torch.ones_like(y))
    assert torch.equal(y, dropout("dropout.py:DROPOUT_BERNOULLI"))
    assert not torch.allclose(dx, kept(y) / 0.8)


# --- the recorded graph (graph.py) ------------------------------------------------------------------------------

GRAPH_LAYERNORMS = ["graph.py:LN_CHECKPOINTED", "graph.py:LN_INPUTS_KEPT_AS_ATTRIBUTES",
                    "graph.py:LN_BACKWARD_SCALES_SAVED_XHAT"]


def recorded(k: Kernel) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """(the leaves, y) of one call of a LayerNorm kernel on TYPICAL, graph attached."""
    x, weight, bias, eps = TYPICAL
    leaves = {"x": x.clone().requires_grad_(True), "weight": weight.clone().requires_grad_(True),
              "bias": bias.clone().requires_grad_(True)}
    return leaves, run(k, leaves["x"], leaves["weight"], leaves["bias"], eps)


@pytest.mark.parametrize("attr_path", GRAPH_LAYERNORMS)
def test_graph_kernels_are_right_on_a_graph_left_alone(attr_path):
    assert max(gradient_errors(corpus_kernel(attr_path), *TYPICAL, DY).values()) < AGREES


def test_inputs_kept_as_attributes_differentiate_at_the_written_values():
    leaves, y = recorded(corpus_kernel("graph.py:LN_INPUTS_KEPT_AS_ATTRIBUTES"))
    with torch.no_grad():
        leaves["x"].mul_(torch.linspace(0.5, 1.5, D))
    (dx,) = torch.autograd.grad(y, leaves["x"], DY)
    want = reference_gradients(corpus_kernel("graph.py:LN_CHECKPOINTED"), *TYPICAL, DY)["x"]
    assert float((dx.double() - want).abs().max()) > DISAGREES


def test_checkpointed_control_refuses_a_backward_after_its_input_was_written():
    leaves, y = recorded(corpus_kernel("graph.py:LN_CHECKPOINTED"))
    with torch.no_grad():
        leaves["x"].mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.autograd.grad(y, leaves["x"], DY)


def test_backward_scaling_saved_xhat_is_wrong_only_the_second_time():
    leaves, y = recorded(corpus_kernel("graph.py:LN_BACKWARD_SCALES_SAVED_XHAT"))
    want = reference_gradients(corpus_kernel("graph.py:LN_CHECKPOINTED"), *TYPICAL, DY)["x"]
    (first,) = torch.autograd.grad(y, leaves["x"], DY, retain_graph=True)
    (second,) = torch.autograd.grad(y, leaves["x"], DY)
    assert float((first.double() - want).abs().max()) < AGREES
    assert float((second.double() - want).abs().max()) > DISAGREES


def test_the_readme_counts_the_corpus_as_it_is():
    """README's layout table says how many broken and correct kernels the corpus holds: the manifest's counts."""
    found = re.search(r"a corpus of (\d+) broken and (\d+) correct kernels", (ROOT / "README.md").read_text())
    assert found, "README.md no longer states the corpus' size"
    assert (int(found.group(1)), int(found.group(2))) == (len(BROKEN), len(CORRECT))
