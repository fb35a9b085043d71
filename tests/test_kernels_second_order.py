"""Second derivatives through our norms' backward (kernels.functional._NormBackward) vs float64 torch.

A gradient of <(dx, dweight, dbias), (u, a, c)> with respect to (dy, x, weight): this is what a
Jacobian-vector product as a VJP of a VJP (the spectral-norm property) and Hessian-vector products use.
The Jacobian-vector product is checked within the suite's bound (properties.bounds.tolerance: each Jacobian entry's
bound, summed against |v|); second derivatives have no derived bound in the error model, so their check is
a relative one (64 u d), far below the O(1) error of a dropped term.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kernels
from core.kernel import Kernel
from properties import outcome
from properties.bounds import tolerance


@pytest.fixture(autouse=True)
def _seeded() -> None:
    torch.manual_seed(0)  # every example is the same on every run


def second_order(norm, x, weight, bias, dy, upstream):
    x, dy = x.clone().requires_grad_(), dy.clone().requires_grad_()
    weight = None if weight is None else weight.clone().requires_grad_()
    bias = None if bias is None else bias.clone().requires_grad_()
    params = [t for t in (x, weight, bias) if t is not None]
    first = torch.autograd.grad(norm(x, weight, bias), params, dy, create_graph=True)
    total = sum((g * up.to(g.dtype)).sum() for g, up in zip(first, upstream, strict=False))
    return torch.autograd.grad(total, [t for t in (dy, x, weight) if t is not None])


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize(("d", "affine"), [(9, True), (300, False)])
def test_gradients_of_gradients_match_float64(kind, d, affine):
    g = torch.Generator().manual_seed(d)
    x = torch.randn(4, d, generator=g, dtype=torch.float64) + 0.7
    weight = torch.randn(d, generator=g, dtype=torch.float64) if affine else None
    bias = torch.randn(d, generator=g, dtype=torch.float64) if affine and kind == "layernorm" else None
    dy = torch.randn(4, d, generator=g, dtype=torch.float64)
    upstream = [torch.randn(4, d, generator=g, dtype=torch.float64), torch.randn(d, generator=g, dtype=torch.float64),
                torch.randn(d, generator=g, dtype=torch.float64)]
    if kind == "layernorm":
        ours, theirs = (lambda *a: kernels.layer_norm(*a, 1e-3)), (lambda x, w, b: F.layer_norm(x, (d,), w, b, 1e-3))
    else:
        ours, theirs = (lambda x, w, b: kernels.rms_norm(x, w, 1e-3)), (lambda x, w, b: F.rms_norm(x, (d,), w, 1e-3))

    def as32(t):
        return None if t is None else t.float()

    got = second_order(ours, as32(x), as32(weight), as32(bias), as32(dy), upstream)
    want = second_order(theirs, x, weight, bias, dy, upstream)
    for name, a, b in zip(("d/d dy", "d/d x", "d/d weight"), got, want, strict=False):
        relative = ((a.double() - b).abs().max() / b.abs().max()).item()
        assert relative < 64 * 2.0**-24 * d, f"{name}: relative error {relative:.3g}"


def test_jacobian_vector_product_as_vjp_of_vjp():
    """J v = d/d(dy) <dx(dy), v>: what the spectral-norm probe computes, matched against torch.func.jvp."""
    x = torch.randn(3, 16, dtype=torch.float64)
    v = torch.randn(3, 16, dtype=torch.float64)
    xs = x.float().requires_grad_()
    dy = torch.zeros(3, 16, requires_grad=True)
    (dx,) = torch.autograd.grad(kernels.layer_norm(xs, None, None, 1e-5), xs, dy, create_graph=True)
    (jv,) = torch.autograd.grad(dx, dy, v.float())
    v32 = v.float()
    _, expected = torch.func.jvp(lambda t: F.layer_norm(t, (16,), eps=1e-5), (xs.detach().double(),),
                                 (v32.double(),))
    kernel = Kernel("triton:layernorm", "layernorm", kernels.layer_norm)
    # row r of J is the VJP of e_r: the bound of (J v)_r is sum_i B[r, i] |v_i| over the bounds B of those VJPs
    bound = np.stack([tolerance.of_sum(tolerance.backward(kernel, xs.detach()[r].expand(16, 16).contiguous(), None,
                                                          1e-5, torch.eye(16))["x"], np.abs(v32[r].double().numpy()))
                      for r in range(3)])
    comparison = outcome.compare(jv, expected, bound, "J v")
    assert comparison.unchecked == 0 and comparison.ratio <= 1.0, comparison.message
