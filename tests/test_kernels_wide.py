"""Widths of 65 536 and beyond: rows looped over in blocks by every kernel (forward, dx, dgamma/dbeta)."""

from __future__ import annotations

import pytest
import torch
from test_kernels_norm import check, make  # tests/ is on sys.path (rootdir-relative, no __init__.py), as for corpus


@pytest.mark.parametrize(("kind", "d"), [("layernorm", 65536), ("rmsnorm", 70001)])
def test_wide_rows_forward_and_backward(kind, d):
    x, weight, bias, dy = make((2, d), torch.float32, seed=d)
    check(kind, x + 2.0, weight, bias, 1e-5, dy)


def test_wide_rows_float16_3d():
    x, weight, bias, dy = make((1, 2, 65536), torch.float16, seed=1)
    check("layernorm", x, weight, bias, 1e-5, dy)
