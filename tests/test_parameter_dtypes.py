"""Weight and bias in another dtype than x (issue 19): the output-dtype rule, the per-operand unit roundoffs and the
per-output rounding of the backward bound, and the forward check's verdict on a kernel that breaks the rule."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from core.kernel import Kernel
from core.registry import resolve
from proofs import error_model
from properties import norms, outcome
from properties.bounds import tolerance
from properties.checks import fused as fused_checks
from properties.checks import groupnorm as groupnorm_checks
from properties.checks.forward import check_forward_with_parameter_dtypes
from properties.run.counterexamples import check_reference

U = {dtype: error_model.unit_roundoff(str(dtype)) for dtype in (torch.float32, torch.float16, torch.bfloat16)}


def _rms(x, weight, eps):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def _rms_in_weight_dtype(x, weight, eps):
    """Computed in float32 and returned in the weight's dtype."""
    return _rms(x.float(), weight.float(), eps).to(weight.dtype)


@pytest.mark.parametrize(("rule", "x_dtype", "w_dtype", "expected"), [
    ("input", torch.float16, torch.float32, torch.float16),
    ("input", torch.float32, torch.bfloat16, torch.float32),
    ("promoted", torch.bfloat16, torch.float32, torch.float32),
    ("promoted", torch.float32, torch.float16, torch.float32),
    ("weight", torch.float32, torch.float16, torch.float16),
    ("weight", torch.float16, torch.float32, torch.float32),
])
def test_the_output_dtype_rule(rule, x_dtype, w_dtype, expected):
    kernel = Kernel("k", "rmsnorm", _rms, output_dtype=rule)
    assert norms.output_dtype(kernel, torch.ones(2, 4, dtype=x_dtype), torch.ones(4, dtype=w_dtype)) == expected
    assert norms.output_dtype(kernel, torch.ones(2, 4, dtype=x_dtype), None) == x_dtype


def test_unit_roundoffs_per_operand():
    """float32 parameters with float16 x: sums in float32, y and dx float16, dweight and dbias float32; float16
    parameters with float32 x: everything float32 except dweight and dbias."""
    kernel = Kernel("k", "layernorm", lambda x, w, b, eps: x)
    x16, w32 = torch.ones(2, 4, dtype=torch.float16), torch.ones(4)
    assert tolerance.operand_roundoffs(kernel, x16, w32, w32) == {
        "acc": U[torch.float32], "y": U[torch.float16], "x": U[torch.float16], "weight": U[torch.float32],
        "bias": U[torch.float32]}
    x32, w16 = torch.ones(2, 4), torch.ones(4, dtype=torch.float16)
    assert tolerance.operand_roundoffs(kernel, x32, w16, None) == {
        "acc": U[torch.float32], "y": U[torch.float32], "x": U[torch.float32], "weight": U[torch.float16],
        "bias": U[torch.float32]}


def test_each_gradient_is_rounded_to_its_own_dtype_in_the_bound():
    """dweight and dbias stored in float32 have smaller bounds than in float16; dx's is unchanged; the default is
    u_out (parameters in x's dtype)."""
    rng = np.random.default_rng(0)
    x, dy, w = rng.normal(size=(4, 16)), rng.normal(size=(4, 16)), 1 + 0.5 * rng.normal(size=16)
    u16, u32 = U[torch.float16], U[torch.float32]
    same = error_model.backward_bound(x, w, 1e-5, dy, u32, u16, "layernorm")
    default = error_model.backward_bound(x, w, 1e-5, dy, u32, u16, "layernorm", u_weight=u16, u_bias=u16)
    mixed = error_model.backward_bound(x, w, 1e-5, dy, u32, u16, "layernorm", u_weight=u32, u_bias=u32)
    for a, b in zip(same, default, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(mixed[0], same[0])
    assert np.all(mixed[1] < same[1]) and np.all(mixed[2] < same[2])


def test_a_kernel_returning_the_weights_dtype_fails_the_forward_with_the_rule():
    x = torch.randn(3, 8, dtype=torch.float16)
    weight = torch.linspace(0.5, 1.5, 8)
    with pytest.raises(outcome.CheckFailure, match=r"the output must be float16 \(torch's rule\)"):
        check_forward_with_parameter_dtypes(Kernel("wrong", "rmsnorm", _rms_in_weight_dtype), x, weight, 1e-5)
    # declared, the same kernel is checked against its rule and passes
    check_forward_with_parameter_dtypes(Kernel("declared", "rmsnorm", _rms_in_weight_dtype, output_dtype="weight"),
                                        x, weight, 1e-5)


def test_torch_rms_norm_with_a_float32_weight_beside_float16_x_is_within_the_mixed_bound():
    (kernel,) = [k for k in resolve("torch") if k.kind == "rmsnorm"]
    x = torch.randn(4, 64, dtype=torch.float16)
    check_forward_with_parameter_dtypes(kernel, x, torch.linspace(0.5, 1.5, 64), 1e-5)


def _add_rms_in_weight_dtype(x, residual, weight, eps):
    h = x + residual
    return _rms_in_weight_dtype(h, weight, eps), h


def _group_norm_in_weight_dtype(x, num_groups, weight, bias, eps):
    return F.group_norm(x.float(), num_groups, weight.float(), bias.float(), eps).to(weight.dtype)


def test_fused_and_groupnorm_forwards_fail_an_output_in_the_weights_dtype_with_the_rule():
    """The same verdict for the fused kinds and GroupNorm (checks.fused / checks.groupnorm, through
    checks.forward.output_dtype_rule), and its replay reference is the check's own module."""
    x, weight = torch.randn(3, 8, dtype=torch.float16), torch.linspace(0.5, 1.5, 8)
    with pytest.raises(outcome.CheckFailure, match=r"the output must be float16 \(torch's rule\)"):
        fused_checks.check_forward_with_parameter_dtypes(Kernel("wrong-add", "add_rmsnorm", _add_rms_in_weight_dtype),
                                                         x, x.flip(0), weight, 1e-5)
    with pytest.raises(outcome.CheckFailure, match=r"the output must be float16 \(torch's rule\)"):
        groupnorm_checks.check_forward_with_parameter_dtypes(
            Kernel("wrong-gn", "groupnorm", _group_norm_in_weight_dtype), x, 2, weight, 1e-5, bias=torch.zeros(8))
    assert (check_reference(groupnorm_checks.check_forward_with_parameter_dtypes)
            == "properties.checks.groupnorm:check_forward_with_parameter_dtypes")


def test_the_fused_and_groupnorm_contract_checks_do_not_judge_the_outputs_dtype():
    """inputs_unmodified, row independence and layout_invariance of the fused kinds and GroupNorm compare the kernel
    with itself: a y in the weight's dtype (float32 beside float16 x) is the forward claim's failure (above), not
    theirs; each still checks what it checks (the corpus)."""
    x, weight = torch.randn(3, 8, dtype=torch.float16), torch.linspace(0.5, 1.5, 8)
    residual, changed = x.flip(0), torch.cat([7 * torch.randn(1, 8, dtype=torch.float16), x[1:]])
    add = Kernel("wrong-add", "add_rmsnorm", _add_rms_in_weight_dtype)
    fused_checks.check_inputs_unmodified(add, x, residual, weight, 1e-5, torch.randn(3, 8, dtype=torch.float16),
                                         torch.randn(3, 8, dtype=torch.float16))
    fused_checks.check_changing_one_row(add, x, changed, residual, weight, 1e-5)
    fused_checks.check_noncontiguous(add, x.t().contiguous().t(), residual.t().contiguous().t(), weight, 1e-5)
    gn = Kernel("wrong-gn", "groupnorm", _group_norm_in_weight_dtype)
    x4 = torch.randn(2, 4, 3, 5, dtype=torch.float16)
    weight4, bias4 = torch.linspace(0.5, 1.5, 4), torch.zeros(4)
    groupnorm_checks.check_inputs_unmodified(gn, x4, 2, weight4, 1e-5, torch.randn(2, 4, 3, 5, dtype=torch.float16),
                                             bias=bias4)
    groupnorm_checks.check_independence(gn, x4, 7 * torch.randn_like(x4), 2, weight4, 1e-5, bias=bias4)
    groupnorm_checks.check_input_layout(gn, x4.to(memory_format=torch.channels_last), 2, weight4, 1e-5, bias=bias4)


def test_fused_and_groupnorm_forwards_bound_a_declared_weight_dtype_output_in_that_dtype():
    """A kernel declaring output_dtype="weight" returns y rounded to a float16 weight's dtype beside float32 x: the
    fused and GroupNorm forwards bound it with float16's unit roundoff (x's float32 would fail a correct kernel)."""
    x, weight = torch.randn(3, 8), torch.linspace(0.5, 1.5, 8, dtype=torch.float16)
    fused_checks.check_forward_with_parameter_dtypes(
        Kernel("add-in-weight-dtype", "add_rmsnorm", _add_rms_in_weight_dtype, output_dtype="weight"),
        x, x.flip(0), weight, 1e-5)
    groupnorm_checks.check_forward_with_parameter_dtypes(
        Kernel("gn-in-weight-dtype", "groupnorm", _group_norm_in_weight_dtype, output_dtype="weight"),
        x.reshape(3, 8, 1), 2, weight, 1e-5, bias=torch.zeros(8, dtype=torch.float16))
