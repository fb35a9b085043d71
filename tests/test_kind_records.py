"""The kind records (core.kinds) are the one place kinds are named, and every kind goes through the one call and
bound path: each drift point the records removed has a test here that would catch its return (issue 'One record
per kind')."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from core import kinds
from core.guard import KernelFault
from core.kernel import Kernel
from proofs.claims import CLAIMS
from proofs.reduction import Reduction
from properties import norms
from properties.bounds import tolerance
from properties.checks import fused as fused_checks
from properties.plugin import KERNEL_FIXTURES

ROOT = Path(__file__).resolve().parent.parent
NAMED = set(kinds.NAMES)


def _compares_a_kind_name(node: ast.AST) -> bool:
    """Whether ``node`` compares against a kind's name (``kind == "layernorm"``, ``kind in ("rmsnorm", ...)``)."""
    if not isinstance(node, ast.Compare):
        return False
    sides = [node.left, *node.comparators]
    for side in sides:
        values = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
        if any(isinstance(v, ast.Constant) and v.value in NAMED for v in values):
            return True
    return False


def test_only_the_kind_records_compare_kind_names():
    """No module of core/, properties/ or verify/ branches on a kind's name: what differs between kinds is a field
    of its record (a new kind is a new record, not a new branch)."""
    found = []
    for package in ("core", "properties", "verify"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ROOT / "core" / "kinds.py":
                continue
            tree = ast.parse(path.read_text(), str(path))
            found += [f"{path.relative_to(ROOT)}:{n.lineno}" for n in ast.walk(tree) if _compares_a_kind_name(n)]
    assert not found, "kind names compared outside core/kinds.py:\n" + "\n".join(found)


def test_every_kind_has_claims_a_fixture_and_a_signature_for_its_arguments():
    for record in kinds.RECORDS:
        assert any(claim.startswith(record.prefix + ".") for claim in CLAIMS), record.name
        assert any(record.name in taken for taken in KERNEL_FIXTURES.values()), record.name
        values = {role: role for role in kinds.ROLES}
        assert record.arguments(values) == record.signature


@pytest.mark.parametrize("record", kinds.RECORDS, ids=lambda record: record.name)
def test_the_kind_is_inferred_from_its_own_signature(record):
    """Each kind from its own parameter names; a kind whose names are an earlier kind's (channel_layernorm has
    LayerNorm's) is that kind unless named with --kind (docs/validate-your-kernel.md)."""
    names = ", ".join(record.parameter_names)
    fn = eval(f"lambda {names}: None")  # a function with exactly the record's parameter names
    first = next(r for r in kinds.RECORDS if r.parameter_names == record.parameter_names)
    assert kinds.infer(fn) == first.name
    assert first is record or record.scope == "sample"


def test_torch_batch_norm_and_instance_norm_are_inferred_from_their_own_parameter_names():
    from torch.nn import functional as F

    assert kinds.infer(F.batch_norm) == "batchnorm" and kinds.infer(F.instance_norm) == "instancenorm"


def _fused(fn, **declarations) -> Kernel:
    return Kernel("composed", "add_layernorm", fn, **declarations)


def _add_layernorm(x, residual, weight, bias, eps):
    h = x + residual
    return torch.nn.functional.layer_norm(h, h.shape[-1:], weight, bias, eps), h


def _example(d: int = 16, rows: int = 3) -> dict:
    generator = torch.Generator().manual_seed(0)
    return {"x": torch.randn(rows, d, generator=generator), "residual": torch.randn(rows, d, generator=generator),
            "weight": torch.randn(d, generator=generator), "bias": torch.randn(d, generator=generator), "eps": 1e-5}


def test_a_fused_kernel_that_does_not_return_its_pair_is_a_kernel_fault():
    kernel = _fused(lambda x, residual, weight, bias, eps: _add_layernorm(x, residual, weight, bias, eps)[0])
    with pytest.raises(KernelFault, match=r"not the 2 tensors \(y, residual_out\) of its contract") as fault:
        norms.call(kernel, _example())
    assert fault.value.reason == "type"


def test_no_gradient_is_honoured_by_the_fused_kinds():
    """A frozen weight (the kernel detaches it) is a missing gradient undeclared, and declared it is not asked for,
    the others still checked."""

    def frozen(x, residual, weight, bias, eps):
        return _add_layernorm(x, residual, weight.detach(), bias, eps)

    example, upstream = _example(), {"y": torch.ones(3, 16), "residual_out": torch.ones(3, 16)}
    with pytest.raises(KernelFault, match="no gradient"):
        norms.gradients(_fused(frozen), example, upstream)
    _, grads = norms.gradients(_fused(frozen, no_gradient=("weight",)), example, upstream)
    assert sorted(grads) == ["bias", "residual", "x"]
    fused_checks.check_vjp(_fused(frozen, no_gradient=("weight",)), example["x"], example["residual"],
                           example["weight"], 1e-5, upstream["y"], upstream["residual_out"], bias=example["bias"])


def test_a_fused_kernel_s_declared_reduction_bounds_its_norm_as_the_plain_kind_s():
    """The forward bound of y at residual_out is the plain norm's at the same rows, with the declared reduction (it
    was dropped on the fused path): tighter than undeclared, equal to the plain kind's."""
    example = _example(d=4096, rows=2)
    h = example["x"] + example["residual"]
    declared = Reduction(run=1, lanes=16, source="a test's declaration")
    fused = _fused(_add_layernorm, reduction=declared)
    plain = dataclasses.replace(fused, kind=fused.record.plain_norm)
    args = (example["x"], example["weight"], example["bias"], 1e-5)
    with_tree = tolerance.forward(fused, *args, h=h)
    assert np.array_equal(with_tree, tolerance.forward(plain, h, *args[1:]))
    assert np.all(with_tree <= tolerance.forward(_fused(_add_layernorm), *args, h=h))
    assert np.any(with_tree < tolerance.forward(_fused(_add_layernorm), *args, h=h))


def test_whether_a_fused_kernel_takes_no_residual_is_probed():
    """A first layer's call (residual=None) is drawn for the kernels that take it, and the others say why not."""
    from core.capabilities import discover
    from core.registry import resolve

    (first_layer,) = resolve("tests/corpus/residual.py:LN_FIRST_LAYER")
    assert discover(first_layer).residual_none
    torch_fused = next(k for k in resolve("torch-fused") if k.kind == "add_layernorm")
    caps = discover(torch_fused)
    assert not caps.residual_none and caps.as_json()["reasons"]["residual_none"].startswith("refused: ")


def test_the_fused_gradient_bound_covers_a_rounding_onto_the_subnormal_grid():
    """A float16 gradient below the smallest normal (6.1e-5) is stored on the subnormal grid, off by up to half its
    spacing, 2^-25, whatever its size: every element's bound allows that (a relative bound alone did not, found by a
    3-D draw of a correct kernel whose dx was 8.8e-6)."""
    example = {name: t.half() for name, t in _example().items() if name != "eps"}
    example["x"] = (12000 * example["x"].float()).half()  # rows with s ~ 1e4: J^T dy ~ 1e-6 for dy ~ 1e-2
    upstream = {"y": (0.01 * torch.randn(3, 16, generator=torch.Generator().manual_seed(1))).half(),
                "residual_out": torch.zeros(3, 16, dtype=torch.float16)}
    h = example["x"] + example["residual"]
    bounds = tolerance.backward(_fused(_add_layernorm), example["x"], example["weight"], 1e-5, upstream["y"],
                                bias=example["bias"], h=h, dh=upstream["residual_out"], residual=example["residual"])
    assert all(bool(np.all(bounds[name] >= 2.0**-25)) for name in ("x", "residual"))


def test_conventions_are_refused_where_their_models_do_not_apply():
    """A convention's model is of a norm over rows with one weight vector: a GroupNorm kernel declaring one gets a
    clear error, not a check that silently ignores it."""
    from core.errors import UsageError

    with pytest.raises(UsageError, match="cannot declare conventions"):
        Kernel("gn", "groupnorm", lambda x, num_groups, weight, bias, eps: x, conventions=("double_rounding",))
    Kernel("gn", "groupnorm", lambda x, num_groups, weight, bias, eps: x, backward_precision="storage")


class _WritesDxIntoDy(torch.autograd.Function):
    """h = x + residual, y = LayerNorm(h) (no weight), and a backward that stores its dx into dy, as Liger's
    in_place=True does."""

    @staticmethod
    def forward(ctx, x, residual):
        h = x + residual
        with torch.enable_grad():
            leaf = h.detach().requires_grad_(True)
            y = torch.nn.functional.layer_norm(leaf, leaf.shape[-1:])
        ctx.save_for_backward(leaf, y)
        return y.detach(), h

    @staticmethod
    def backward(ctx, dy, dh):
        leaf, y = ctx.saved_tensors
        with torch.enable_grad():
            (dx,) = torch.autograd.grad(y, leaf, dy)
        dy.copy_(dx + dh)
        return dy, dy


def test_in_place_dy_is_honoured_by_the_fused_kinds():
    def writes_dy(x, residual, weight, bias, eps):
        return _WritesDxIntoDy.apply(x, residual)

    example = _example()
    args = (example["x"], example["residual"], None, 1e-5, torch.randn(3, 16), torch.randn(3, 16))
    fused_checks.check_inputs_unmodified(_fused(writes_dy, in_place=("dy",)), *args)
    with pytest.raises(AssertionError, match="wrote into upstream gradient"):
        fused_checks.check_inputs_unmodified(_fused(writes_dy), *args)


def test_normalizes_is_a_declaration_of_the_residual_add_kinds_only():
    from core.errors import UsageError

    Kernel("fa", "add_rmsnorm", lambda x, residual, weight, eps: x, normalizes="float32_sum")
    for kind in ("layernorm", "dropout_add_layernorm", "groupnorm"):
        with pytest.raises(UsageError, match="normalizes"):
            Kernel("fa", kind, lambda *args: None, normalizes="float32_sum")
