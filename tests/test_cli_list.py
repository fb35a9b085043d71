"""normverify list: every built-in with its kernels' kind, weight convention and device, or why it cannot run here."""

from __future__ import annotations

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


def test_lists_kind_weight_convention_and_availability(fake_builtins, capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    gemma = next(line for line in out.splitlines() if "gemma-like:rmsnorm" in line)
    for words in ("rmsnorm", "1 + w", "scale (1 + w)", "cpu"):
        assert words in gemma
    gpu = next(line for line in out.splitlines() if "gpu-only" in line)
    assert "unavailable: no CUDA device" in gpu


def test_available_hides_what_cannot_run_here(fake_builtins, capsys):
    assert cli.main(["list", "--available"]) == 0
    out = capsys.readouterr().out
    assert "gemma-like:rmsnorm" in out and "gpu-only" not in out

