"""Facts about the torch built-ins of the new kinds that docs/findings.md reports, pinned on their minimal inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from core.registry import resolve
from proofs import fused_oracles
from properties.checks.groupnorm import check_channels_last
from properties.outcome import CheckFailure


def _errors(offset: float) -> tuple[float, float]:
    """Worst |error| of F.group_norm against the float64 oracle, contiguous and channels-last, at mean/std offset."""
    x = (offset + torch.randn(4, 32, 8, 8, generator=torch.Generator().manual_seed(1))).float()
    exact = fused_oracles.groupnorm(x.double().numpy(), 8, None, None, 1e-5)
    return tuple(float(np.abs(F.group_norm(x.to(memory_format=layout), 8, eps=1e-5).double().numpy() - exact).max())
                 for layout in (torch.contiguous_format, torch.channels_last))


def test_channels_last_group_norm_error_grows_like_a_one_pass_variance():
    """[R5]: the channels-last path's error grows with (mean/std)^2 (x100 per x10 of the offset); the contiguous
    path's stays near u_float32 times the offset."""
    (c10, l10), (c100, l100) = _errors(10.0), _errors(100.0)
    assert l10 > 10 * c10 and l100 > 100 * c100
    assert 50 < l100 / l10 < 400


def test_torch_groupnorm_fails_the_layout_claim_on_offset_rows():
    """gn.layout_invariance catches it where |mean|/std is large: rows near 100 with std 1, float32, G = 2."""
    x = 100 + torch.randn(2, 4, 4, 4, generator=torch.Generator().manual_seed(0))
    (kernel,) = resolve("torch-groupnorm")
    with pytest.raises(CheckFailure, match="channels-last"):
        check_channels_last(kernel, x.to(memory_format=torch.channels_last), 2, None, 1e-5)


def test_group_norm_backward_raises_for_a_bias_without_weight_and_only_that_is_declared():
    """[R3]: F.group_norm's backward raises for weight=None with a bias that needs a gradient; with a weight it
    works. The declared deviation of torch-groupnorm explains that fault on such examples only."""
    from core.guard import KernelFault
    from properties.expectations import BUILTIN_DEVIATIONS, bias_without_weight

    x = torch.randn(2, 4, 3, generator=torch.Generator().manual_seed(0), requires_grad=True)
    bias = torch.zeros(4, requires_grad=True)
    with pytest.raises(RuntimeError, match="does not have a device"):
        F.group_norm(x, 2, None, bias, 1e-5).sum().backward()
    F.group_norm(x, 2, torch.ones(4, requires_grad=True), bias, 1e-5).sum().backward()
    (kernel,) = resolve("torch-groupnorm")
    declared = next(d for d in BUILTIN_DEVIATIONS if d.applies is bias_without_weight)
    fault = KernelFault(kernel.name, "raised", "raised RuntimeError: tensor does not have a device")
    assert declared.explains(kernel, "gn.jacobian", fault, {"x": x, "weight": None, "bias": bias})
    assert not declared.explains(kernel, "gn.jacobian", fault, {"x": x, "weight": torch.ones(4), "bias": bias})
    assert not declared.explains(kernel, "gn.forward", fault, {"x": x, "weight": None, "bias": bias})
