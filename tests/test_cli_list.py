"""normverify list: every built-in SPEC and whether it runs here; --probe: each kernel's kind, weight and device."""

from __future__ import annotations

import json

import pytest

from core.registry import Builtin, Kernel
from verify import cli
from verify.commands import list as list_command


def _gemma(x, weight, eps):
    return x


BUILTINS = {
    "gemma-like": Builtin("gemma-like", "a (1 + w) RMSNorm", lambda: [
        Kernel("gemma-like:rmsnorm", "rmsnorm", _gemma, spec="gemma-like", weight_offset=1.0, device="cpu",
               description="scale (1 + w)")]),
    "gpu-only": Builtin("gpu-only", "needs a GPU", lambda: [], unavailable=lambda: "no CUDA device"),
}


@pytest.fixture
def fake_builtins(monkeypatch):
    monkeypatch.setattr(list_command, "builtins", lambda: BUILTINS)
    monkeypatch.setenv("COLUMNS", "200")


def test_without_probe_nothing_is_loaded(fake_builtins, capsys, monkeypatch):
    def no_loading():
        raise AssertionError("list without --probe loaded a built-in")

    monkeypatch.setitem(BUILTINS, "gemma-like", Builtin("gemma-like", "a (1 + w) RMSNorm", no_loading))
    assert cli.main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["SPEC", "HERE", "DESCRIPTION"]
    assert lines[1].split(None, 2) == ["gemma-like", "yes", "a (1 + w) RMSNorm"]
    assert lines[2].startswith("gpu-only") and lines[2].endswith("needs a GPU") and "no: no CUDA device" in lines[2]


def test_probe_lists_kind_weight_convention_and_device(fake_builtins, capsys):
    assert cli.main(["list", "--probe"]) == 0
    out = capsys.readouterr().out
    gemma = next(line for line in out.splitlines() if "gemma-like:rmsnorm" in line)
    for words in ("rmsnorm", "1 + w", "scale (1 + w)", "cpu"):
        assert words in gemma
    gpu = next(line for line in out.splitlines() if "gpu-only" in line)
    assert "unavailable: no CUDA device" in gpu


def test_piped_output_is_one_aligned_line_per_row_at_any_width(fake_builtins, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    assert cli.main(["list", "--probe"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + len(BUILTINS), lines
    assert lines[1].index(" rmsnorm ") + 1 == lines[0].index("KIND"), "columns are aligned under their headers"


def test_json_has_a_record_per_row(fake_builtins, capsys):
    assert cli.main(["list", "--json", "--probe"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["spec"], r["available"]) for r in rows] == [("gemma-like", True), ("gpu-only", False)]
    assert rows[0]["kind"] == "rmsnorm" and rows[0]["capabilities"]["device"] == "cpu"
    assert rows[1]["reason"] == "no CUDA device"


def test_available_hides_what_cannot_run_here(fake_builtins, capsys):
    assert cli.main(["list", "--available"]) == 0
    out = capsys.readouterr().out
    assert "gemma-like" in out and "gpu-only" not in out
