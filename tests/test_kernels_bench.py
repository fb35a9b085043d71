"""normverify bench: what runs without a GPU (byte counts, ratios, the CSV, the no-GPU exit, and a whole tiny run on
the CPU through the interpreter, which also shows that a wrong kernel is flagged, not only timed)."""

from __future__ import annotations

import csv
import math

import pytest
import torch

from kernels import bench
from verify.cli import main


def test_bytes_moved_is_reads_plus_writes():
    assert bench.bytes_moved("layernorm", "forward", 4096, 1024, torch.float16) == 2 * 4096 * 1024 * 2
    assert bench.bytes_moved("rmsnorm", "forward+backward", 10, 3, torch.float32) == 5 * 10 * 3 * 4
    assert bench.bytes_moved("add+layernorm", "forward", 10, 3, torch.float32) == 4 * 10 * 3 * 4
    assert bench.bytes_moved("add+rmsnorm", "forward+backward", 10, 3, torch.float16) == 7 * 10 * 3 * 2


def _m(provider: str, gb: float, error: str = "") -> bench.Measurement:
    return bench.Measurement("layernorm", "forward", "float16", 4096, 512, provider, 1.0, 2.0, gb, 0.5, "cudagraph",
                             error=error)


def test_ours_vs_the_better_of_the_others_ignores_errors():
    ratios = bench.ours_vs_best([_m("ours", 900), _m("torch", 1000), _m("liger", 2000, error="RuntimeError: d")])
    assert ratios == {("layernorm", "forward", "float16", 4096, 512): pytest.approx(0.9)}


def test_csv_keeps_every_measurement(tmp_path):
    results = [_m("ours", 900), _m("liger", math.nan, error="RuntimeError: too wide")]
    bench.write_csv(results, tmp_path / "out" / "bench.csv")
    rows = list(csv.DictReader((tmp_path / "out" / "bench.csv").open()))
    assert [r["provider"] for r in rows] == ["ours", "liger"] and rows[1]["error"] == "RuntimeError: too wide"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_without_a_gpu_it_says_so_and_exits_0(capsys, tmp_path):
    assert main(["bench", "--csv", str(tmp_path / "b.csv")]) == 0
    assert "no CUDA device" in capsys.readouterr().out
    assert not (tmp_path / "b.csv").exists()


def test_on_the_cpu_it_needs_tiny_sizes_given(capsys):
    assert main(["bench", "--device", "cpu"]) == 2
    assert "tiny --rows and --width" in capsys.readouterr().err


def _tiny_cpu_run(tmp_path, kind: str) -> tuple[int, list[dict]]:
    code = main(["bench", "--device", "cpu", "--kind", kind, "--dtype", "float32", "--rows", "6", "--width", "24",
                 "--csv", str(tmp_path / "b.csv")])
    return code, list(csv.DictReader((tmp_path / "b.csv").open()))


@pytest.mark.parametrize("kind", ["layernorm", "add+rmsnorm"])
def test_a_tiny_cpu_run_measures_every_provider_and_mode(tmp_path, capsys, kind):
    code, rows = _tiny_cpu_run(tmp_path, kind)
    assert code == 0
    ours = [r for r in rows if r["provider"] == "ours"]
    assert sorted(r["mode"] for r in ours) == ["forward", "forward+backward"]
    assert {r["provider"] for r in rows} >= {"ours", "torch"}
    for r in ours:
        assert r["error"] == "" and r["method"] == "cpu-loop"
        assert float(r["device_us"]) > 0 and float(r["wall_us"]) > 0 and float(r["roofline"]) > 0
        assert float(r["max_rel_err"]) < bench.ERROR_LIMIT[torch.float32]
    out = capsys.readouterr().out
    assert "ours/best" in out and "launch configuration" in out


def test_a_wrong_kernel_is_flagged_and_the_run_fails(tmp_path, capsys, monkeypatch):
    right = bench.providers

    def with_wrong_ours(kind):
        found = right(kind)
        found["ours"] = lambda x, r, w, b: torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5) * 1.01
        return found

    monkeypatch.setattr(bench, "providers", with_wrong_ours)
    code, rows = _tiny_cpu_run(tmp_path, "layernorm")
    assert code == 1
    assert all(float(r["max_rel_err"]) > 0.005 for r in rows if r["provider"] == "ours")
    assert "over the limit" in capsys.readouterr().out


def test_the_warm_up_calls_every_provider_forward_and_backward():
    expected = len(bench.providers("add+layernorm"))
    assert bench.warm_up_one("add+layernorm", "float32", (8, 24), "cpu", rows=3) == 2 * expected
    assert bench.warm_up_one("add+layernorm", "bfloat16", (8,), "cpu", rows=3) == 1  # torch only: ours refuses bf16


def _launch_sweep():
    """scripts/launch_sweep.py as a module."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "launch_sweep.py"
    spec = importlib.util.spec_from_file_location("launch_sweep", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_launch_sweep_launches_our_forward_with_the_warps_and_block_it_names(monkeypatch):
    from kernels import rows

    launched = []
    monkeypatch.setattr(rows, "launch",
                        lambda kernel, grid, *args, **meta: launched.append((meta["num_warps"], meta["BLOCK"])))
    rule = rows.num_warps
    x, weight = torch.randn(4, 64), torch.randn(64)
    sweep = _launch_sweep()
    for warps in (2, 8):
        sweep._ours("rmsnorm", warps)(x, None, weight, None)
    sweep._ours("layernorm", 4, block=16)(x, None, weight, None)  # the forward with a 16-column block: 4 blocks
    assert launched == [(2, 64), (8, 64), (4, 16)]
    assert rows.num_warps is rule  # the rule is back after each call


def test_the_launch_sweep_runs_on_the_cpu(tmp_path, monkeypatch):
    out = tmp_path / "sweep.csv"
    monkeypatch.setattr("sys.argv", ["launch_sweep.py", str(out), "--dry-run", "--widths", "64", "--warps", "1,2",
                                     "--rows", "8", "--dtypes", "float32"])
    assert _launch_sweep().main() == 0
    measured = list(csv.DictReader(out.open()))
    assert {r["provider"] for r in measured} >= {"torch", "ours-w1", "ours-w2"}
    assert all(r["error"] == "" for r in measured)
    assert len(out.with_suffix(".txt").read_text().splitlines()) == 2  # one case per kind


def test_the_launch_sweep_measures_the_forward_s_blocks(tmp_path, monkeypatch):
    out = tmp_path / "sweep.csv"
    monkeypatch.setattr("sys.argv", ["launch_sweep.py", str(out), "--dry-run", "--widths", "64", "--warps", "1",
                                     "--rows", "8", "--dtypes", "float32", "--kinds", "rmsnorm,add+layernorm",
                                     "--blocks", "32,64"])
    assert _launch_sweep().main() == 0
    measured = list(csv.DictReader(out.open()))
    assert {r["provider"] for r in measured} >= {"ours-b32-w1", "ours-b64-w1"}
    assert all(r["error"] == "" for r in measured)
    assert "the rule (ours-b64-w1)" in out.with_suffix(".txt").read_text()
