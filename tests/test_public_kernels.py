"""The built-ins of public Triton norms installed from PyPI (FlagGems, flash-attention): listed with their install
recipe when their package is missing, and, when it is installed, run unmodified on CPU tensors through the
interpreter support, computing what the adapters say (the float64 oracle within the suite's bounds, fp32, 2-D).

Whether they conform to the derivations is the conformance run's business (docs/findings.md); here only the
plumbing, plus the facts of their source that the findings rest on (FlagGems' float16 statistics).
"""

from __future__ import annotations

import importlib.util
import sys

import pytest
import torch
from test_thirdparty_adapters import assert_gradients, example

from core.adapters import _thirdparty, flaggems, flashattn
from core.registry import builtins, resolve

PACKAGE = {"flaggems-layernorm": "flag_gems", "flaggems-rmsnorm": "flag_gems", "flash-attn-layernorm": "flash_attn",
           "flash-attn-rmsnorm": "flash_attn"}
RECIPE = {"flag_gems": flaggems.RECIPE, "flash_attn": flashattn.RECIPE}


def installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


@pytest.mark.parametrize("spec", sorted(PACKAGE))
def test_listed_as_available_or_with_the_install_recipe(spec):
    reason = builtins()[spec].unavailable()
    if installed(PACKAGE[spec]):
        assert reason is None
    else:
        assert RECIPE[PACKAGE[spec]] in reason


def test_a_missing_package_names_its_recipe():
    reason = _thirdparty.missing("no_such_package_nv", "pip install no-such-package")()
    assert reason == ("the no_such_package_nv package is not installed (pip install no-such-package; "
                      "docs/findings.md, 'Install')")


@pytest.mark.parametrize("spec", sorted(PACKAGE))
def test_runs_unmodified_on_cpu_and_computes_the_norm(spec):
    if not installed(PACKAGE[spec]):
        pytest.skip(f"{PACKAGE[spec]} is not installed: {RECIPE[PACKAGE[spec]]}")
    (kernel,) = resolve(spec)
    x, weight, bias, dy = example(torch.float32, d=40, rows=6)
    for _ in range(2):  # a second call of the same shape takes the launchers' cached-kernel path
        assert_gradients(kernel, x, weight, bias, 1e-5, dy)


def test_flash_attention_imported_without_its_cuda_extension():
    if not installed("flash_attn"):
        pytest.skip(f"flash_attn is not installed: {flashattn.RECIPE}")
    resolve("flash-attn-rmsnorm")
    assert "flash_attn_2_cuda" not in sys.modules and "flash_attn.ops.triton.layer_norm" in sys.modules


def test_flaggems_layernorm_keeps_its_statistics_in_the_input_dtype():
    """The fact behind findings [FG-stats]: mean and rstd saved for the backward are float16 for float16 x."""
    if not installed("flag_gems"):
        pytest.skip(f"flag_gems is not installed: {flaggems.RECIPE}")
    resolve("flaggems-layernorm")
    ops = sys.modules["flag_gems.ops.layernorm"]
    x = torch.randn(4, 16).half()
    _, mean, rstd = ops.layer_norm(x, [16], torch.ones(16).half(), torch.zeros(16).half(), 1e-5)
    assert mean.dtype == rstd.dtype == torch.float16


def test_flaggems_rmsnorm_rounds_the_weight_gradient_to_the_input_dtype():
    """The fact behind findings [M] (a declared deviation): with float16 x and a float32 weight, FlagGems' dW is the
    float32 sum rounded to float16 (then cast back to float32 by autograd), not the float32 sum."""
    if not installed("flag_gems"):
        pytest.skip(f"flag_gems is not installed: {flaggems.RECIPE}")
    (kernel,) = resolve("flaggems-rmsnorm")
    x = torch.tensor([[1.5410]], dtype=torch.float16)
    weight = torch.tensor([1.7705], requires_grad=True)
    kernel.fn(x, weight, 1e-5).backward(x.clone())
    exact = (x.double() * x.double() * torch.rsqrt(x.double() ** 2 + 1e-5)).sum(0)
    assert weight.grad.dtype == torch.float32
    assert weight.grad.double().item() == exact.to(torch.float16).double().item() != exact.float().double().item()


def test_flash_attention_fused_kinds_run_on_cpu_as_the_guide_adapts_them():
    """flash-attn-fused (docs/validate-your-kernel.md's adapter): residual_out is the float32 sum, y the LayerNorm /
    RMSNorm of it, and the dropout + add kind keeps a mask of the seed (the same seed, the same residual_out)."""
    if not installed("flash_attn"):
        pytest.skip(f"flash_attn is not installed: {flashattn.RECIPE}")
    kernels = {kernel.kind: kernel for kernel in resolve("flash-attn-fused")}
    x, residual = torch.randn(6, 40).half(), torch.randn(6, 40).half()
    y, h = kernels["add_layernorm"].fn(x, residual, None, None, 1e-5)
    assert h.dtype == torch.float32 and torch.equal(h, x.float() + residual.float())
    torch.testing.assert_close(y.float(), torch.nn.functional.layer_norm(h, (40,), eps=1e-5), atol=2e-3, rtol=0)
    y, h = kernels["add_rmsnorm"].fn(x, residual, None, 1e-5)
    torch.testing.assert_close(y.float(), torch.nn.functional.rms_norm(h, (40,), eps=1e-5), atol=2e-3, rtol=0)
    zero = torch.zeros_like(residual)
    first = kernels["dropout_add_layernorm"].fn(x, zero, None, None, 1e-5, 0.5, 3)[1]
    again = kernels["dropout_add_layernorm"].fn(x, zero, None, None, 1e-5, 0.5, 3)[1]
    assert torch.equal(first, again) and 0.3 < (first != 0).float().mean() < 0.7
    assert torch.equal(first[first != 0], (x.float() * 2)[first != 0])
