"""proofs.aten_moments follows torch's CPU layer_norm statistics: the float32 emulation of ATen's row moments gives
torch's mean bit for bit (the chunking, cascade order, lane merges and FMA contractions of the tree the error
model propagates), its variance within the model's bound, and the declaration is what torch's built-in uses."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from emulated import verified_kernel

from proofs import aten_moments, error_model, probabilistic
from properties.run.tightness import suite_rows

WIDTHS = (1, 3, 7, 8, 9, 17, 100, 127, 128, 129, 1000, 4095, 4096, 12345, 65536)


@pytest.fixture(scope="module")
def declared():
    """torch:layernorm's declared tree, where core.trees verified it on this build (lanes, FMA contraction)."""
    return verified_kernel("torch", "layernorm").reduction


@pytest.mark.parametrize("d", WIDTHS)
@pytest.mark.parametrize("mean_over_std", [0.0, 10.0, 1e3])
def test_the_float32_emulation_is_torchs_mean_bit_for_bit(declared, d, mean_over_std):
    lanes = declared.lanes
    x = suite_rows(d, mean_over_std, torch.float32, 5, seed=d)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [d], None, None, 1e-5)
    got = aten_moments.row_moments(x.numpy(), lanes, contract=declared.contract)
    assert np.array_equal(got.m.astype(np.float32), mean[:, 0].numpy())
    exact = x.double().numpy()
    u = error_model.unit_roundoff("float32")
    modelled = aten_moments.modelled(exact, u)[1][:, 0]
    e_m2 = aten_moments.error_bounds(exact, lanes, u, probabilistic.lam(1))[1]
    m2 = ((exact - exact.mean(-1, keepdims=True)) ** 2).sum(-1)
    torch_m2 = (1 / rstd[:, 0].double() ** 2 - np.float32(1e-5)).numpy() * d  # rstd's own roundings: a few u
    assert np.all(np.abs(torch_m2 - m2)[modelled] <= e_m2[modelled] + 4 * u * m2[modelled] + 1e-5 * d * u)

