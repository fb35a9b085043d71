"""nn.Module classes as kernels (``PATH.py:Class``): construction, parameters by name, kind, caching, errors."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from core.errors import UsageError
from core.registry import resolve

DATA = Path(__file__).parent / "data"
SEED001 = f"{DATA / 'seed001_layernorm.py'}:LayerNorm"
SEED002_LN = f"{DATA / 'seed002_norms.py'}:ManualLayerNorm"
SEED002_RMS = f"{DATA / 'seed002_norms.py'}:ManualRMSNorm"


def write_module(tmp_path: Path, source: str, name: str = "norms.py") -> Path:
    path = tmp_path / name
    path.write_text("import torch\nimport torch.nn as nn\n" + textwrap.dedent(source))
    return path


def inputs(d=12, rows=4, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, d, generator=generator, dtype=torch.float64),
            torch.randn(d, generator=generator, dtype=torch.float64),
            torch.randn(d, generator=generator, dtype=torch.float64))


@pytest.mark.parametrize(("spec", "kind"), [(SEED001, "layernorm"), (SEED002_LN, "layernorm"),
                                            (SEED002_RMS, "rmsnorm"), ("torch.nn:LayerNorm", "layernorm"),
                                            ("torch.nn:RMSNorm", "rmsnorm")])
def test_kind_is_inferred_from_a_shift_parameter(spec, kind):
    (kernel,) = resolve(spec)
    assert kernel.kind == kind and kernel.spec == spec and kernel.weight_offset == 0


def test_seed002_classes_compute_the_documented_norms_with_the_tests_parameters():
    x, weight, bias = inputs()
    (ln,) = resolve(SEED002_LN)
    (rms,) = resolve(SEED002_RMS)
    torch.testing.assert_close(ln.fn(x, weight, bias, 0.1), F.layer_norm(x, (12,), weight, bias, 0.1))
    torch.testing.assert_close(rms.fn(x, weight, 0.1), F.rms_norm(x, (12,), weight, 0.1))


def test_seed001_class_divides_by_the_sample_std_plus_eps():
    """What seed 001's code computes (Bessel-corrected std, eps outside the root), not what its text says."""
    x, weight, bias = inputs()
    (kernel,) = resolve(SEED001)
    centred = x - x.mean(-1, keepdim=True)
    sample_std = (centred.pow(2).sum(-1, keepdim=True) / (x.shape[-1] - 1)).sqrt()
    torch.testing.assert_close(kernel.fn(x, weight, bias, 0.1), weight * centred / (sample_std + 0.1) + bias)
    assert not torch.allclose(kernel.fn(x, weight, bias, 0.1), F.layer_norm(x, (12,), weight, bias, 0.1))


def test_gradients_reach_the_tests_own_weight_and_bias():
    x, weight, bias = (t.requires_grad_() for t in inputs())
    (kernel,) = resolve(SEED002_LN)
    kernel.fn(x, weight, bias, 1e-5).sum().backward()
    assert weight.grad is not None and bias.grad is not None and x.grad is not None
    torch.testing.assert_close(bias.grad, torch.full_like(bias, x.shape[0]))


def test_one_module_per_d_and_eps_is_built_and_reused(tmp_path):
    path = write_module(tmp_path, """
        BUILT = []
        class Counted(nn.Module):
            def __init__(self, d, eps=1e-5):
                super().__init__()
                BUILT.append((d, eps))
                self.weight = nn.Parameter(torch.ones(d))
                self.eps = eps
            def forward(self, x):
                return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
    """)
    (kernel,) = resolve(f"{path}:Counted")
    built = next(m for m in sys.modules.values() if getattr(m, "__file__", None) == str(path)).BUILT
    built.clear()  # the probe construction at load time
    x = torch.randn(3, 6)
    for eps in (1e-5, 1e-5, 1e-3, 1e-5):
        kernel.fn(x, None, eps)
    kernel.fn(torch.randn(3, 7), None, 1e-5)
    assert built == [(6, 1e-5), (6, 1e-3), (7, 1e-5)]


def test_eps_set_as_an_attribute_when_the_constructor_takes_none(tmp_path):
    path = write_module(tmp_path, """
        class FixedEps(nn.Module):
            def __init__(self, hidden_size):
                super().__init__()
                self.scale = nn.Parameter(torch.ones(hidden_size))
                self.variance_epsilon = 1e-6
            def forward(self, x):
                return self.scale * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
    """)
    (kernel,) = resolve(f"{path}:FixedEps")
    x, weight, _ = inputs()
    torch.testing.assert_close(kernel.fn(x, weight, 0.5), F.rms_norm(x, (12,), weight, 0.5))


def test_a_bias_for_a_module_without_one_is_refused():
    (forced,) = resolve("torch.nn:RMSNorm", "layernorm")
    x, weight, bias = inputs()
    with pytest.raises(ValueError, match="no shift parameter"):
        forced.fn(x, weight, bias, 1e-5)


@pytest.mark.parametrize(("source", "message"), [
    ("""
     class NoWeight(nn.Module):
         def __init__(self, d, eps=1e-5):
             super().__init__()
             self.alpha = nn.Parameter(torch.ones(d))
     """, r"no scale parameter of shape \[d\] named weight/gamma/scale/g/w \(it has \{'alpha': \(8,\)\}\)"),
    ("""
     class NeedsConfig(nn.Module):
         def __init__(self, config, d, eps=1e-5):
             super().__init__()
             self.weight = nn.Parameter(torch.ones(d))
     """, r"NeedsConfig\(8\) failed: TypeError"),
    ("""
     class NoEps(nn.Module):
         def __init__(self, d):
             super().__init__()
             self.weight = nn.Parameter(torch.ones(d))
     """, "takes no eps argument and has no eps attribute"),
    ("""
     class NoSize(nn.Module):
         def __init__(self, *, eps=1e-5):
             super().__init__()
     """, "takes no positional argument for the normalized size"),
    ("""
     class MatrixBias(nn.Module):
         def __init__(self, d, eps=1e-5):
             super().__init__()
             self.weight = nn.Parameter(torch.ones(d))
             self.bias = nn.Parameter(torch.zeros(d, d))
     """, r"MatrixBias.bias has shape \[8, 8\], not \[d\]"),
])
def test_classes_that_cannot_be_run_are_one_line_usage_errors(tmp_path, source, message):
    path = write_module(tmp_path, source)
    name = source.split("class ")[1].split("(")[0]
    with pytest.raises(UsageError, match=message) as info:
        resolve(f"{path}:{name}")
    assert "\n" not in str(info.value)


def test_an_rmsnorm_kind_for_a_module_with_a_shift_is_a_usage_error():
    with pytest.raises(UsageError, match="has a shift parameter 'beta'"):
        resolve(SEED002_LN, "rmsnorm")
    with pytest.raises(UsageError, match="not dropout"):
        resolve(SEED002_LN, "dropout")
