"""scripts/gpu_check.py's plumbing that runs anywhere: which built-ins a call takes, and what its summary says of a
run cut off by the deadline (the H100 calls of 2026-11-26 ended that way)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.py"
spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
gpu_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_check)

BUILTINS = ["torch", "triton", "flash-attn-layernorm", "flash-attn-fused", "flaggems-rmsnorm", "liger-layernorm"]


def test_only_and_skip_select_built_ins_by_glob():
    assert gpu_check.selected(BUILTINS, "", "") == BUILTINS
    assert gpu_check.selected(BUILTINS, "flash-attn-*,flaggems-*", "") == [
        "flash-attn-layernorm", "flash-attn-fused", "flaggems-rmsnorm"]
    assert gpu_check.selected(BUILTINS, "", "flash-attn-*, flaggems-*") == ["torch", "triton", "liger-layernorm"]


def test_the_summary_names_the_built_ins_a_cut_off_run_did_not_reach(tmp_path):
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"complete": False, "environment": {"device": "cuda"}, "errors": [], "results": [
        {"spec": "torch", "kernel": "torch:layernorm", "claim": "ln.forward", "status": "passed",
         "worst_ratio": 0.9, "duration_s": 1.0}]}))
    steps = {"conformance": {"exit": 124, "seconds": 300.0, "timed_out": True}}
    lines = gpu_check.summary_lines([results], steps, "CUDA", BUILTINS[:3])
    assert "kernels with no test reached: triton, flash-attn-layernorm" in lines
    assert "conformance exit 124 in 300.0 s (timed out)" in lines[-2]
    assert lines[-1].startswith("kernel x claim: 1 passed; harness errors: 0")


def test_the_per_width_compiling_built_ins_run_after_the_others():
    runs = gpu_check.conformance_runs(BUILTINS, gpu_check.LAST)
    assert runs == [("conformance", ["torch", "triton", "liger-layernorm"]),
                    ("conformance, per-width compiling", ["flash-attn-layernorm", "flash-attn-fused",
                                                          "flaggems-rmsnorm"])]
    assert gpu_check.conformance_runs(BUILTINS, "") == [("conformance", BUILTINS)]
    assert gpu_check.conformance_runs(["flaggems-rmsnorm"], gpu_check.LAST) == [
        ("conformance, per-width compiling", ["flaggems-rmsnorm"])]


def test_the_summary_merges_both_runs(tmp_path):
    def results(name: str, spec: str, status: str) -> Path:
        path = tmp_path / name
        path.write_text(json.dumps({"complete": True, "environment": {"device": "cuda"}, "errors": [], "results": [
            {"spec": spec, "kernel": f"{spec}:layernorm", "claim": "ln.forward", "status": status,
             "worst_ratio": 0.5, "duration_s": 1.0}]}))
        return path

    paths = [results("results.json", "torch", "passed"), results("results-2.json", "flash-attn-layernorm", "failed"),
             tmp_path / "results-3.json"]  # a run that wrote nothing
    steps = {"conformance": {"exit": 0, "seconds": 10.0, "timed_out": False}}
    lines = gpu_check.summary_lines(paths, steps, "CUDA", ["torch", "flash-attn-layernorm", "flaggems-rmsnorm"])
    assert "kernels with no test reached: flaggems-rmsnorm" in lines
    assert "results-3.json: no results written (see its log)" in lines
    assert lines[-1] == "kernel x claim: 1 failed, 1 passed; harness errors: 1 (1 run errors, 0 claims in error)"


def test_the_corpus_s_correct_kernels_are_listed_by_path():
    specs = gpu_check.correct_corpus()
    assert {"tests/corpus/composed.py:ADD_LN_CHAN_CHUNKS", "tests/corpus/correct.py:LN_TWO_PASS_FLOAT64"} <= set(specs)
    assert all(":" in spec for spec in specs)  # the built-ins among the correct ones run as built-ins
    assert gpu_check.conformance_runs(specs, gpu_check.LAST) == [("conformance", specs)]


def test_no_shrink_reaches_the_conformance_run(tmp_path):
    """--no-shrink: the conformance runs report failures unminimized (no device time shrinking); default: minimized."""
    assert gpu_check.parse(["out"]).shrink and not gpu_check.parse(["out", "--no-shrink"]).shrink
    assert "--no-shrink" not in gpu_check.conformance_command(["torch"], tmp_path / "r.json", False)
    assert "--no-shrink" in gpu_check.conformance_command(["torch"], tmp_path / "r.json", False, shrink=False)
