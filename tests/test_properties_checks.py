"""Each conformance check passes a correct kernel and CAN fail: a tiny kernel breaking exactly what it checks.

Unit level and in-process: the check functions of properties/ are called directly on hand-made examples
(the full broken-kernel corpus runs the whole suite: tests/test_corpus*.py).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from corpus.memory import read_as_if_contiguous

from core.registry import Kernel
from properties import evidence
from properties.checks import (
    affine,
    contracts,
    dropout,
    forward,
    gradients,
    mean_stability,
    special_inputs,
    spectral_norm,
    variance,
)


def _layernorm(x, weight, bias, eps):
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def _rmsnorm(x, weight, eps):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def _one_pass_variance(x, weight, bias, eps):
    mean = x.mean(-1, keepdim=True)
    var = (x * x).mean(-1, keepdim=True) - mean * mean
    return (x - mean) / torch.sqrt(var.clamp_min(0) + eps)


def _eps_outside_root(x, weight, bias, eps):
    centred = x - x.mean(-1, keepdim=True)
    return centred / (centred.pow(2).mean(-1, keepdim=True).sqrt() + eps)


def _eps_ignored(x, weight, bias, eps):
    return _layernorm(x, weight, bias, 1e-5)


def _shifted_mean(x, weight, bias, eps):
    return _layernorm(x, weight, bias, eps) + 1e-3 * x.mean(-1, keepdim=True)


class _NoVarianceTerm(torch.autograd.Function):
    """LayerNorm whose backward forgets the variance term: dx = (g - mean g) / s."""

    @staticmethod
    def forward(ctx, x, eps):
        centred = x - x.mean(-1, keepdim=True)
        s = torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(s)
        return centred / s

    @staticmethod
    def backward(ctx, dy):
        (s,) = ctx.saved_tensors
        return (dy - dy.mean(-1, keepdim=True)) / s, None


def _no_variance_term(x, weight, bias, eps):
    return _NoVarianceTerm.apply(x, eps)


def _wrong_scale_backward(x, weight, bias, eps):
    y = _layernorm(x, weight, bias, eps)
    return y + (y - y.detach())  # the value of y, twice its derivative


def _rows_mixed(x, weight, bias, eps):
    return _layernorm(x, weight, bias, eps) + 1e-3 * x.mean()


def _strides_ignored(x, weight, bias, eps):
    return _layernorm(torch.as_strided(x, x.shape, _contiguous_strides(x.shape)), weight, bias, eps)


def _contiguous_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _input_overwritten(x, weight, bias, eps):
    y = _layernorm(x, weight, bias, eps)
    with torch.no_grad():
        x.mul_(2)
    return y


def _nan_spreads(x, weight, bias, eps):
    return _layernorm(x, weight, bias, eps) + 0 * x.sum()


def _no_rescale(x, p, seed):
    generator = torch.Generator().manual_seed(seed)
    return x * (torch.rand(x.shape, generator=generator) >= p)


def _keep_and_drop_swapped(x, p, seed):
    generator = torch.Generator().manual_seed(seed)
    return torch.where(torch.rand(x.shape, generator=generator) < p, x / p, 0).to(x.dtype)


def _one_mask_for_all_rows(x, p, seed):
    generator = torch.Generator().manual_seed(seed)
    keep = torch.rand(x.shape[-1:], generator=generator) >= p
    return torch.where(keep, x / (1 - p), 0).to(x.dtype)


_OWN_STREAM = torch.Generator().manual_seed(12345)


def _seed_ignored(x, p, seed):
    """Masks from a stream of its own that the seed never reaches (one drawing from torch's global generator is
    stopped earlier, by the guard: tests/test_guard.py)."""
    keep = torch.rand(x.shape, generator=_OWN_STREAM) >= p
    return torch.where(keep, x / (1 - p), 0).to(x.dtype)


def _dropout(x, p, seed):
    generator = torch.Generator().manual_seed(seed)
    return torch.where(torch.rand(x.shape, generator=generator) >= p, x / (1 - p), 0).to(x.dtype)


def _dropout_in_place(x, p, seed):
    return x.copy_(_dropout(x, p, seed))


def kernel(fn, kind="layernorm", **fields) -> Kernel:
    return Kernel(fn.__name__.strip("_"), kind, fn, dtypes=(torch.float32,), **fields)


CORRECT_LN = kernel(_layernorm)
CORRECT_RMS = kernel(_rmsnorm, "rmsnorm")
CORRECT_DROPOUT = kernel(_dropout, "dropout")


def _row(d=16, offset=0.0, scale=1.0, n=3, seed=0) -> torch.Tensor:
    return (offset + torch.randn(n, d, generator=torch.Generator().manual_seed(seed))) * scale


def _ln_example(**row) -> dict:
    x = _row(**row)
    return {"x": x, "weight": None, "bias": None, "eps": 1e-5}


def _passes_and_fails(check, broken: Kernel, example: dict, correct: Kernel = CORRECT_LN) -> str:
    evidence.check(check, correct, example)
    with pytest.raises(AssertionError) as failure:
        evidence.check(check, broken, example)
    return str(failure.value)


def test_forward_check_catches_one_pass_variance_by_a_wide_margin():
    message = _passes_and_fails(forward.check_forward, kernel(_one_pass_variance), _ln_example(offset=1e4))
    assert float(message.rsplit("error/bound = ", 1)[1].split(")")[0]) > 10


def test_jacobian_and_identity_checks_catch_a_backward_without_the_variance_term():
    example = {**_ln_example(), "dy": _row(seed=1)}
    assert "dx" in _passes_and_fails(gradients.check_vjp, kernel(_no_variance_term), example)
    assert "c . dx" in _passes_and_fails(gradients.check_gradient_identities, kernel(_no_variance_term), example)


def test_spectral_norm_checks_catch_a_doubled_jacobian():
    broken = kernel(_wrong_scale_backward)
    _passes_and_fails(spectral_norm.check_spectral_norm, broken, _ln_example(d=8, n=1))
    example = {"x": _row(d=4096, n=1), "eps": 1e-5, "start": _row(d=4096, n=1, seed=2)}
    _passes_and_fails(spectral_norm.check_matrix_free_spectral_norm, broken, example)


def test_mean_and_shift_checks_catch_an_output_that_follows_the_mean():
    example = _ln_example()
    _passes_and_fails(mean_stability.check_mean_stability, kernel(_shifted_mean), example)
    example["shifted"] = example["x"] + 10
    _passes_and_fails(mean_stability.check_shift_invariance, kernel(_shifted_mean), example)


def test_variance_checks_catch_eps_outside_the_root():
    x = _row(d=64) * math.sqrt(1e-2)
    broken = kernel(_eps_outside_root)
    _passes_and_fails(variance.check_normalized_variance, broken, {"x": x, "eps": 1e-2})
    _passes_and_fails(variance.check_variance_sensitivity, broken, {"x": x, "scaled": 1.5 * x, "eps": 1e-2})


def test_affine_check_catches_an_ignored_eps():
    x = _row() * math.sqrt(1e-2)
    example = {"x": x, "transformed": 2 * x + 1, "a": 2.0, "eps": 1e-2}
    _passes_and_fails(affine.check_affine, kernel(_eps_ignored), example)


def test_contract_checks_catch_mixed_rows_ignored_strides_and_written_inputs():
    example = _ln_example()
    changed = example["x"].clone()
    changed[0] += 1
    _passes_and_fails(contracts.check_changing_one_row, kernel(_rows_mixed), {**example, "changed": changed})
    strided = contracts.strided(example["x"], "every other column")
    _passes_and_fails(contracts.check_noncontiguous_x, kernel(_strides_ignored), {**example, "x": strided})
    _passes_and_fails(contracts.check_inputs_unmodified, kernel(_input_overwritten),
                      {**example, "dy": _row(seed=3)})


@pytest.mark.parametrize("layout", contracts.CHANNEL_UPSTREAM_LAYOUTS)
@pytest.mark.parametrize("shape", [(3, 5), (1, 5), (2, 3, 4, 4), (2, 1, 3), (3, 2, 2, 2, 3)])
def test_each_layout_is_a_non_contiguous_view_holding_the_values_it_can(layout, shape):
    """strided() keeps t's values, but for the expanded layouts, which hold t's first slice or element everywhere."""
    t = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    view = contracts.strided(t, layout)
    assert view.shape == t.shape and not view.is_contiguous()
    if 0 in view.stride():
        assert torch.equal(view, t[:1].expand_as(t)) or torch.equal(view, t.reshape(-1)[0].expand(shape))
    else:
        assert torch.equal(view, t)
    if layout == "channels last" and len(shape) in (4, 5) and shape[1] > 1:
        assert view.stride(1) == 1


class _UpstreamAsContiguous(torch.autograd.Function):
    """The identity, whose backward reads dy as if it were contiguous (corpus.memory)."""

    @staticmethod
    def forward(ctx, y):
        return y.clone()

    @staticmethod
    def backward(ctx, dy):
        return read_as_if_contiguous(dy)


def _upstream_strides_ignored(x, weight, bias, eps):
    return _UpstreamAsContiguous.apply(_layernorm(x, weight, bias, eps))


@pytest.mark.parametrize("layout", contracts.UPSTREAM_LAYOUTS)
def test_the_upstream_layout_check_catches_a_backward_reading_dy_as_contiguous(layout):
    """In every layout, the expanded ones (autograd's gradient of a summed loss: stride 0) included."""
    example = _ln_example()
    dy = contracts.strided(_row(seed=3), layout)
    _passes_and_fails(contracts.check_noncontiguous_upstream, kernel(_upstream_strides_ignored), {**example, "dy": dy})


class _LayerNormDxIntoDy(torch.autograd.Function):
    """LayerNorm without parameters whose backward stores dx in dy's memory, as a kernel's stores do: where the rows of
    dy share memory (a stride of 0) the last row's dx is every row's."""

    @staticmethod
    def forward(ctx, x, eps):
        ctx.save_for_backward(x)
        ctx.eps = eps
        return _layernorm(x, None, None, eps)

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            leaf = x.detach().requires_grad_()
            (dx,) = torch.autograd.grad(_layernorm(leaf, None, None, ctx.eps), leaf, dy)
        return (dx[-1].expand(dx.shape) if dy.stride(0) == 0 else dx), None


def _layernorm_dx_into_dy(x, weight, bias, eps):
    return _LayerNormDxIntoDy.apply(x, eps)


@pytest.mark.parametrize(("in_place", "cause"), [((), "strides ignored"),
                                                 (("dy",), "writes dx into the upstream gradient's buffer")])
def test_the_upstream_layout_check_names_a_declared_write_into_a_shared_dy(in_place, cause):
    """A backward whose dx lands in the memory of a stride-0 dy: 'writes dx into the upstream gradient's buffer' for
    a kernel declaring in_place=("dy",) (Liger-Kernel#370), 'strides ignored' for one that does not."""
    dy = contracts.strided(_row(seed=3), "broadcast over the first axis")
    assert dy.stride(0) == 0
    broken = kernel(_layernorm_dx_into_dy, in_place=in_place)
    assert cause in _passes_and_fails(contracts.check_noncontiguous_upstream, broken, {**_ln_example(), "dy": dy})


def test_nonfinite_check_catches_a_nan_that_leaves_its_row():
    example = _ln_example()
    poisoned = example["x"].clone()
    poisoned[0, 0] = math.nan
    _passes_and_fails(special_inputs.check_nonfinite_stays_in_its_row, kernel(_nan_spreads),
                      {**example, "poisoned": poisoned})


@pytest.mark.parametrize(("check", "broken", "n", "d", "offset", "p", "alpha"), [
    (dropout.check_values, _no_rescale, 4, 64, 3.0, 0.5, None),
    (dropout.check_keep_rate, _keep_and_drop_swapped, 16, 1024, 3.0, 0.25, 1e-12),
    (dropout.check_variance_bias, _one_mask_for_all_rows, 1, 8, 3.0, 0.5, 1e-12),
    (dropout.check_determinism, _seed_ignored, 4, 64, 3.0, 0.5, None),
])
def test_dropout_checks_catch_their_bug(check, broken, n, d, offset, p, alpha):
    example = {"x": _row(n=n, d=d, offset=offset), "p": p, "seed": 7, **({"alpha": alpha} if alpha else {})}
    _passes_and_fails(check, kernel(broken, "dropout"), example, correct=CORRECT_DROPOUT)


def test_dropout_input_check_catches_a_written_input():
    example = {"x": _row(n=2, d=8) + 3, "p": 0.5, "seed": 1}
    _passes_and_fails(dropout.check_inputs_unmodified, kernel(_dropout_in_place, "dropout"), example,
                      correct=CORRECT_DROPOUT)
