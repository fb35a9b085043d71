"""Counterexample files: saved as given (dtype, strides), replayed against the kernel that failed or another."""

from __future__ import annotations

import textwrap
import uuid

import pytest
import torch

from core.registry import resolve
from properties.run import counterexamples
from verify.cli import main

BROKEN_KERNEL = '''
import torch

def layernorm(x, weight, bias, eps):
    """LayerNorm with Bessel's correction: the variance divided by d - 1 (guarded for d = 1) instead of d."""
    xf = x.float()
    centered = xf - xf.mean(-1, keepdim=True)
    y = centered / torch.sqrt(centered.pow(2).sum(-1, keepdim=True) / max(x.shape[-1] - 1, 1) + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y.to(x.dtype)
'''

CHECKS = '''
import torch
import torch.nn.functional as F
from core import guard
from properties.outcome import CheckFailure

def check_layernorm(kernel, x, weight, bias, eps):
    """Kernel output within 1e-3 of float64 F.layer_norm on the same inputs; expected vs got at the worst element."""
    got = guard.call(kernel, x, weight, bias, eps, like=x).double()
    expected = F.layer_norm(x.double(), (x.shape[-1],), None if weight is None else weight.double(),
                            None if bias is None else bias.double(), eps)
    error = (got - expected).abs()
    if error.max() > 1e-3:
        index = tuple(int(i) for i in torch.unravel_index(error.argmax(), error.shape))
        raise CheckFailure(f"at index {index} expected {expected[index]:.6g}, got {got[index]:.6g}; "
                           f"|error| = {error.max():.3g} > 0.001", float(expected[index]), float(got[index]),
                           f"at index {index}")

def check_raises(kernel, x):
    raise RuntimeError("a bug in the check itself")
'''


@pytest.fixture
def checks(tmp_path, monkeypatch):
    """A module of check functions, importable by name (as the suite's test modules are)."""
    name = f"nv_checks_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(CHECKS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return __import__(name)


@pytest.fixture
def broken(tmp_path, monkeypatch):
    """The Bessel-corrected LayerNorm, by a relative PATH.py:ATTR spec as a user would give it."""
    (tmp_path / "bessel_ln.py").write_text(textwrap.dedent(BROKEN_KERNEL))
    monkeypatch.chdir(tmp_path)
    return resolve("bessel_ln.py:layernorm", "layernorm")[0]


def non_contiguous_rows(dtype=torch.float16) -> torch.Tensor:
    """Rows of width 4 taken every other column of a [2, 8] buffer: strides (8, 2)."""
    base = torch.arange(16, dtype=torch.float32).reshape(2, 8).to(dtype)
    return base[:, ::2]


def saved(broken, checks, tmp_path, x=None):
    x = non_contiguous_rows() if x is None else x
    example = {"x": x, "weight": None, "bias": None, "eps": 1e-5}
    return counterexamples.save("ln.forward", broken, checks.check_layernorm, example, tmp_path / "cx")


def test_saved_file_keeps_dtype_strides_and_a_portable_spec(broken, checks, tmp_path):
    path = saved(broken, checks, tmp_path)
    document = counterexamples.load(path)
    x = document["inputs"]["x"]
    assert x.dtype == torch.float16 and x.stride() == (8, 2) and not x.is_contiguous()
    assert torch.equal(x, non_contiguous_rows())
    assert document["layouts"]["x"]["contiguous"] is False and document["layouts"]["x"]["stride"] == [8, 2]
    assert document["spec"] == f"{tmp_path / 'bessel_ln.py'}:layernorm"
    assert document["check"] == f"{checks.__name__}:check_layernorm" and document["claim"] == "ln.forward"
    assert saved(broken, checks, tmp_path) == path, "the same counterexample should be one file"
    assert path.name.startswith("ln.forward-bessel_ln_layernorm-"), "the file is named after the kernel (short_spec)"


def test_wrappers_of_the_same_name_in_two_directories_give_two_file_names(checks, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    names = []
    for project in ("flaggems", "unsloth"):
        (tmp_path / project).mkdir()
        (tmp_path / project / "wrap.py").write_text(textwrap.dedent(BROKEN_KERNEL))
        kernel = resolve(f"{tmp_path / project / 'wrap.py'}:layernorm", "layernorm")[0]
        example = {"x": non_contiguous_rows(), "weight": None, "bias": None, "eps": 1e-5}
        names.append(counterexamples.save("ln.forward", kernel, checks.check_layernorm, example, tmp_path / "cx").name)
    assert [name.rpartition("-")[0] for name in names] == ["ln.forward-flaggems_wrap_layernorm",
                                                           "ln.forward-unsloth_wrap_layernorm"]


def test_load_recreates_a_recorded_layout_that_came_back_otherwise(broken, checks, tmp_path):
    path = saved(broken, checks, tmp_path)
    document = torch.load(path, weights_only=True)
    document["inputs"]["x"] = document["inputs"]["x"].contiguous()
    torch.save(document, path)
    x = counterexamples.load(path)["inputs"]["x"]
    assert x.stride() == (8, 2) and torch.equal(x, non_contiguous_rows())


def test_an_expanded_input_comes_back_expanded(broken, checks, tmp_path):
    """Autograd's upstream gradient of a summed loss has stride 0: its counterexample keeps that layout."""
    x = torch.arange(4, dtype=torch.float16)[None].expand(3, 4)
    path = saved(broken, checks, tmp_path, x=x)
    assert counterexamples.load(path)["inputs"]["x"].stride() == (0, 1)
    document = torch.load(path, weights_only=True)
    document["inputs"]["x"] = document["inputs"]["x"].contiguous()  # come back otherwise: the layout is re-created
    torch.save(document, path)
    loaded = counterexamples.load(path)["inputs"]["x"]
    assert loaded.stride() == (0, 1) and torch.equal(loaded, x)


def test_replay_reproduces_the_failure_with_expected_and_got(broken, checks, tmp_path):
    result = counterexamples.replay(saved(broken, checks, tmp_path))
    assert result.outcome == "failed" and not result.passed
    assert result.kernel.endswith("bessel_ln.py:layernorm")
    assert float(result.expected) == pytest.approx(-1.34164, rel=1e-4)  # row (0, 2, 4, 6): -3 / sqrt(5)
    assert float(result.got) == pytest.approx(-1.16190, rel=1e-3)  # -3 / sqrt(20/3)


def test_replay_against_a_correct_kernel_passes(broken, checks, tmp_path):
    result = counterexamples.replay(saved(broken, checks, tmp_path), "torch")
    assert result.passed and result.kernel == "torch:layernorm" and result.message == ""


def test_replay_command_exit_codes_and_output(broken, checks, tmp_path, capsys):
    path = saved(broken, checks, tmp_path)
    assert main(["replay", str(path)]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "expected" in out and "got" in out and "-1.34164" in out and "-1.162" in out
    assert "stride (8, 2)" in out, "the inputs should show their non-contiguous layout"
    assert main(["replay", str(path), "--kernel", "torch"]) == 0
    assert "PASSED" in capsys.readouterr().out


def test_a_check_that_crashes_is_an_error_not_a_pass(broken, checks, tmp_path):
    path = counterexamples.save("ln.forward", broken, checks.check_raises, {"x": torch.ones(2, 3)}, tmp_path)
    result = counterexamples.replay(path)
    assert result.outcome == "error" and "a bug in the check itself" in result.message


def test_unreplayable_checks_and_kernels_are_refused_when_saving(broken, tmp_path):
    with pytest.raises(ValueError, match="module-level"):
        counterexamples.save("ln.forward", broken, lambda kernel, x: None, {"x": torch.ones(1)}, tmp_path)


@pytest.mark.parametrize("content", [None, b"not a torch file", "wrong schema"])
def test_unreadable_files_are_one_line_errors(tmp_path, capsys, content):
    path = tmp_path / "cx.pt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content == "wrong schema":
        torch.save({"schema": "something/else"}, path)
    assert main(["replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("normverify replay: ") and len(err.strip().splitlines()) == 1


def test_expected_and_got_are_the_failures_attributes_never_its_message():
    from properties import outcome

    with pytest.raises(outcome.CheckFailure) as failed:
        outcome.conclude(outcome.compare([0.0, 0.75], [0.0, 0.5], [0.01, 0.01], "y"))
    assert failed.value.where == "y: at index (1,)"
    assert counterexamples.expected_and_got(failed.value) == ("0.5", "0.75")
    assert counterexamples.expected_and_got(AssertionError("expected 0.5, got 0.75")) == (None, None)



def test_a_suite_check_is_saved_by_its_checks_module_and_old_test_module_names_still_replay(broken, tmp_path):
    from properties.checks.forward import check_forward

    example = {"x": non_contiguous_rows(torch.float32), "weight": None, "bias": None, "eps": 1e-5}
    path = counterexamples.save("ln.forward", broken, check_forward, example, tmp_path)
    document = torch.load(path, weights_only=True)
    assert document["check"] == "properties.checks.forward:check_forward"
    document["check"] = "properties.test_forward:check_forward"  # as saved before the checks left the tests
    torch.save(document, path)
    result = counterexamples.replay(path)
    assert result.outcome == "failed" and result.check == "properties.test_forward:check_forward"
