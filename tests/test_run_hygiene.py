"""What a run leaves alone and where its records come from (issue 25, item 5): adapters keep the caller's global RNG
state, counterexamples saved on another GPU load on this host, and the results' commit is normverify's own."""

from __future__ import annotations

import subprocess
import types
from pathlib import Path

import pytest
import torch

from core.adapters import flashattn
from properties.run import counterexamples
from properties.run.environment import suite_commit


def test_flash_attention_dropout_leaves_the_global_rng_alone(monkeypatch):
    """Its dropout draws from torch's global generator, seeded with the kernel's seed inside a forked state."""
    def layer_norm_fn(x, weight, bias, residual, eps, dropout_p, prenorm):
        return x * (torch.rand(x.shape, device=x.device) >= dropout_p), residual

    monkeypatch.setattr(flashattn, "_layer_norm_module", lambda: types.SimpleNamespace(layer_norm_fn=layer_norm_fn))
    (kernel,) = [k for k in flashattn._load_fused() if k.kind == "dropout_add_layernorm"]
    x = torch.ones(4, 64, device="cpu")
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first = kernel.fn(x, x, None, None, 1e-5, 0.5, 7)[0]
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.equal(kernel.fn(x, x, None, None, 1e-5, 0.5, 7)[0], first)
    assert not torch.equal(kernel.fn(x, x, None, None, 1e-5, 0.5, 8)[0], first)


class _Storage:
    def __init__(self) -> None:
        self.moved_to: object = None

    def cuda(self, index: int) -> _Storage:
        self.moved_to = index
        return self

    def cpu(self) -> _Storage:
        self.moved_to = "cpu"
        return self


def test_a_counterexample_saved_on_cuda_1_loads_on_a_one_gpu_host(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert counterexamples.map_location(_Storage(), "cuda:1").moved_to == 0
    assert counterexamples.map_location(_Storage(), "cuda:0").moved_to == 0
    assert counterexamples.map_location(_Storage(), "cpu").moved_to == "cpu"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert counterexamples.map_location(_Storage(), "cuda:1").moved_to == 1


def test_a_counterexample_saved_on_cuda_loads_on_the_cpu_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert counterexamples.map_location(_Storage(), "cuda:1").moved_to == "cpu"


def _git(cwd, *arguments):
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *arguments], cwd=cwd, check=True,
                   capture_output=True)


def test_the_commit_is_normverify_s_own_not_an_enclosing_repository_s(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "f").write_text("x")
    _git(tmp_path, "add", "f")
    _git(tmp_path, "commit", "-q", "-m", "m")
    installed = tmp_path / "site-packages"
    installed.mkdir()
    assert suite_commit(installed) is None  # an installed copy inside someone else's repository
    assert suite_commit(tmp_path) is not None


def test_run_from_this_checkout_the_commit_is_its_own():
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=Path(__file__).parent, capture_output=True,
                         text=True)
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != Path(__file__).resolve().parents[1]:
        pytest.skip("tests/ is not in a git checkout of its own here")
    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                          text=True).stdout.strip()
    assert suite_commit() is not None and suite_commit().startswith(head[:7])
