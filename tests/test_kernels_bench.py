"""normverify bench: what runs without a GPU (the byte counts, the ratios, the CSV, the no-GPU exit)."""

from __future__ import annotations

import csv
import math

import pytest
import torch

from kernels import bench
from verify.cli import main


def test_bytes_moved_is_reads_plus_writes():
    assert bench.bytes_moved("forward", 4096, 1024, torch.float16) == 2 * 4096 * 1024 * 2
    assert bench.bytes_moved("forward+backward", 10, 3, torch.float32) == 5 * 10 * 3 * 4


def _m(provider: str, gb: float, error: str = "") -> bench.Measurement:
    return bench.Measurement("layernorm", "forward", "float16", 4096, 512, provider, 1.0, gb, error)


def test_ours_vs_the_better_of_the_others_ignores_errors():
    ratios = bench.ours_vs_best([_m("ours", 900), _m("torch", 1000), _m("liger", 2000, error="RuntimeError: d")])
    assert ratios == {("layernorm", "forward", "float16", 512): pytest.approx(0.9)}


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
