"""Our fused residual add + norm kernels (kernels/fused_norm.py) on the CPU through Triton's interpreter, against
the float64 oracles of proofs.fused_oracles on the exact rounded inputs, within the derived bounds of
properties.bounds.tolerance (proofs.error_model): residual_out exact in float32, y = N(residual_out), and both
gradients J^T dy + dh, forward and backward, for LayerNorm and RMSNorm, with and without dropout."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kernels
from core.kernel import Kernel
from kernels import fused_norm
from proofs import fused_oracles
from properties.bounds import tolerance
from properties.norms import as_float64
from properties.outcome import ratios

WIDTHS = (1, 2, 7, 1000, 4097)


def _values(shape, seed: int, scale: float = 1.0, offset: float = 0.0) -> torch.Tensor:
    return offset + scale * torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def _example(d: int, dtype: torch.dtype, seed: int) -> dict:
    return {"x": _values((3, d), seed).to(dtype), "residual": _values((3, d), seed + 1, 3.0, 2.0).to(dtype),
            "weight": _values((d,), seed + 2, 0.5, 1.0).to(dtype), "bias": _values((d,), seed + 3).to(dtype),
            "dy": _values((3, d), seed + 4).to(dtype), "dh": _values((3, d), seed + 5).to(dtype)}


def _call(kind: str, example: dict, residual_in_fp32: bool, p: float = 0.0, seed: int = 0):
    leaves = {name: example[name].clone().requires_grad_(True) for name in ("x", "residual", "weight", "bias")}
    if kind == "rmsnorm":
        del leaves["bias"]
        y, h = kernels.add_rms_norm(*leaves.values(), 1e-5, residual_in_fp32=residual_in_fp32)
    elif p > 0:
        y, h = kernels.dropout_add_layer_norm(*leaves.values(), 1e-5, p, seed, residual_in_fp32=residual_in_fp32)
    else:
        y, h = kernels.add_layer_norm(*leaves.values(), 1e-5, residual_in_fp32=residual_in_fp32)
    grads = torch.autograd.grad((y, h), list(leaves.values()), (example["dy"], example["dh"].to(h.dtype)))
    return y, h, dict(zip(leaves, grads, strict=True))


def _record(kind: str, residual_in_fp32: bool = False, dropout: bool = False) -> Kernel:
    """Our fused kernel's record, for the bounds (its declarations: the float32 residual_out)."""
    name = "dropout_add_layernorm" if dropout else f"add_{kind}"
    return Kernel("ours", name, lambda *args: None, residual_dtype="float32" if residual_in_fp32 else "storage")


def _worst(got, expected, bound) -> float:
    return float(np.max(ratios(got, expected, bound)))


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("residual_in_fp32", [False, True])
@pytest.mark.parametrize("d", WIDTHS)
def test_add_norm_matches_the_oracle_within_the_derived_bounds(kind, dtype, residual_in_fp32, d):
    example = _example(d, dtype, seed=d)
    y, h, grads = _call(kind, example, residual_in_fp32)
    residual_dtype = torch.float32 if residual_in_fp32 else dtype
    assert (y.dtype, h.dtype) == (dtype, residual_dtype)
    expected_h, h_bound = tolerance.residual_out(example["x"], example["residual"], residual_dtype)
    assert _worst(h, expected_h, h_bound) <= 1.0
    if residual_dtype == torch.float32:
        assert np.array_equal(as_float64(h), expected_h)  # bit for bit
    h64, gamma = as_float64(h), as_float64(example["weight"])
    beta = as_float64(example["bias"]) if kind == "layernorm" else None
    expected_y, _ = fused_oracles.add_norm(h64, np.zeros_like(h64), gamma, beta, 1e-5, kind)
    record = _record(kind, residual_in_fp32)
    bias = example["bias"] if kind == "layernorm" else None
    assert _worst(y, expected_y, tolerance.forward(record, example["x"], example["weight"], bias, 1e-5, h=h)) <= 1.0
    dy, dh = as_float64(example["dy"]), as_float64(example["dh"].to(residual_dtype))
    through, *parameters = fused_oracles.add_norm_vjp(h64, gamma, 1e-5, dy, dh, kind)
    bounds = tolerance.backward(record, example["x"], example["weight"], 1e-5, example["dy"], bias=bias, h=h.detach(),
                                dh=example["dh"], residual=example["residual"])
    expected = {"x": through, "residual": through, **dict(zip(("weight", "bias"), parameters, strict=False))}
    for name, got in grads.items():
        assert got.dtype == example[name].dtype
        assert _worst(got, expected[name], bounds[name]) <= 1.0, name


def test_multi_block_rows_give_the_single_block_result():
    """A row split into blocks of 16 (statistics merged, h read back from residual_out) matches one block."""
    example = _example(100, torch.float32, seed=3)
    args = (example["x"], example["residual"], example["weight"], example["bias"], 1e-5)
    one = fused_norm.forward(*args, rms=False, residual_dtype=torch.float32)
    blocks = fused_norm.forward(*args, rms=False, residual_dtype=torch.float32, block=16)
    assert torch.equal(one[1], blocks[1])
    bound = tolerance.forward(_record("layernorm", True), example["x"], example["weight"], example["bias"], 1e-5,
                              h=one[1])
    assert _worst(blocks[0], as_float64(one[0]), 2 * bound) <= 1.0


def test_strided_inputs_are_read_through_their_strides():
    example = _example(33, torch.float32, seed=5)
    wide = torch.zeros(3, 66)
    wide[:, ::2] = example["x"]
    strided_x, transposed_residual = wide[:, ::2], example["residual"].t().contiguous().t()
    y, h = kernels.add_layer_norm(strided_x, transposed_residual, example["weight"], example["bias"])
    y_ref, h_ref = kernels.add_layer_norm(example["x"], example["residual"], example["weight"], example["bias"])
    assert torch.equal(h, h_ref) and torch.equal(y, y_ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_dropout_add_uses_the_dropout_mask_and_its_gradient(dtype):
    example = _example(64, dtype, seed=11)
    p, seed = 0.25, 1234
    _, h, grads = _call("layernorm", example, residual_in_fp32=True, p=p, seed=seed)
    mask = as_float64(kernels.dropout(torch.ones(3, 64), p, seed)) * (1 - p)  # the same mask: 0 or 1
    assert 0.5 < mask.mean() < 0.95
    # h = fl32(residual + fl32(x * fl32(1/(1-p))) m): within two float32 roundings of the exact value
    exact = as_float64(example["residual"]) + mask * as_float64(example["x"]) / (1 - p)
    u32 = 2.0**-24
    assert _worst(h, exact, ((1 + u32) ** 3 - 1) * (np.abs(exact) + np.abs(as_float64(example["x"])) / (1 - p))) <= 1
    h64, gamma = as_float64(h), as_float64(example["weight"])
    dy, dh = as_float64(example["dy"]), as_float64(example["dh"].float())
    through, *_ = fused_oracles.add_norm_vjp(h64, gamma, 1e-5, dy, dh, "layernorm")
    bounds = tolerance.backward(_record("layernorm", True, dropout=True), example["x"], example["weight"], 1e-5,
                                example["dy"], bias=example["bias"], h=h.detach(), dh=example["dh"],
                                residual=example["residual"], p=p)
    assert _worst(grads["x"], mask * through / (1 - p), bounds["x"]) <= 1.0
    assert _worst(grads["residual"], through, bounds["residual"]) <= 1.0


def test_bad_inputs_are_one_line_errors():
    x = torch.zeros(2, 4)
    with pytest.raises(ValueError, match="residual has shape"):
        kernels.add_rms_norm(x, torch.zeros(2, 5), None)
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\)"):
        kernels.dropout_add_layer_norm(x, x, None, None, 1e-5, 1.0, 0)
    with pytest.raises(TypeError, match="seed must be an int"):
        kernels.dropout_add_layer_norm(x, x, None, None, 1e-5, 0.5, 1.5)
