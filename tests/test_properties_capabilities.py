"""core.capabilities: device, dtypes and backward found by probing, declarations winning, cached."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from core import capabilities
from core.guard import KernelFault
from core.registry import Kernel, resolve


def _no_half(x, weight, bias, eps):
    if x.dtype != torch.float32:
        raise TypeError(f"only float32, not {x.dtype}")
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def _numpy_layernorm(x, weight, bias, eps):
    row = x.detach().numpy()
    centred = row - row.mean(-1, keepdims=True)
    return torch.from_numpy(centred / np.sqrt((centred**2).mean(-1, keepdims=True) + eps)).to(x.dtype)


class _FirstOrderOnly(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, dy):
        return (dy.detach() * 2).clone()


def _first_order_only(x, weight, eps):
    return _FirstOrderOnly.apply(x)


class _UpstreamOverwritten(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, dy):
        return dy.mul_(2)


def _upstream_overwritten(x, weight, eps):
    return _UpstreamOverwritten.apply(x)


def test_torch_kernels_compute_in_every_float_dtype_with_a_differentiable_backward():
    for kernel in resolve("torch"):
        caps = capabilities.discover(kernel)
        assert caps.device == ("cuda" if torch.cuda.is_available() else "cpu")
        assert caps.dtypes == (torch.float32, torch.float16, torch.bfloat16)
        assert caps.backward and caps.double_backward, caps


def test_a_dtype_the_kernel_refuses_is_left_out_with_its_reason():
    caps = capabilities.discover(Kernel("no-half", "layernorm", _no_half))
    assert caps.dtypes == (torch.float32,)
    assert "only float32, not torch.float16" in caps.dtype_reasons["float16"]
    assert caps.as_json()["dtypes"] == ["float32"]


def test_a_kernel_outside_autograd_has_no_backward_and_says_why():
    caps = capabilities.discover(Kernel("numpy", "layernorm", _numpy_layernorm))
    assert not caps.backward and not caps.double_backward
    assert caps.backward_reason.startswith("no backward:")
    assert caps.as_json()["reasons"]["backward"] == caps.backward_reason


def _gradient_blocked_when_contiguous(x, weight, bias, eps):
    """LayerNorm whose contiguous fast path runs outside autograd (huggingface/candle#2168): no grad_fn there."""
    y = F.layer_norm(x, (x.shape[-1],), weight, bias, eps)
    return y.detach() if x.is_contiguous() else y


def test_a_gradient_blocked_on_the_contiguous_path_is_a_fault_not_a_forward_only_kernel():
    caps = capabilities.discover(Kernel("blocked", "layernorm", _gradient_blocked_when_contiguous))
    assert caps.backward and "blocks the gradient" in caps.backward_fault, caps
    assert not capabilities.discover(Kernel("numpy", "layernorm", _numpy_layernorm)).backward


def test_a_backward_that_autograd_cannot_differentiate_has_no_double_backward():
    caps = capabilities.discover(Kernel("first-order", "rmsnorm", _first_order_only))
    assert caps.backward and not caps.double_backward
    assert caps.double_backward_reason.startswith("backward not differentiable")


def test_declared_dtypes_and_device_win_and_discovery_is_cached():
    kernel = Kernel("declared", "layernorm", _no_half, device="cpu", dtypes=(torch.float16,))
    caps = capabilities.discover(kernel)
    assert caps.dtypes == (torch.float16,) and caps.device == "cpu"
    assert capabilities.discover(kernel) is caps


def test_a_backward_that_writes_into_the_upstream_gradient_still_has_a_backward_to_check():
    caps = capabilities.discover(Kernel("writes-dy", "rmsnorm", _upstream_overwritten))
    assert caps.backward, caps.backward_reason


def _float32_out(x, weight, eps):
    return F.rms_norm(x.float(), (x.shape[-1],), None if weight is None else weight.float(), eps)


def _nan_in_half(x, weight, bias, eps):
    y = F.layer_norm(x, (x.shape[-1],), weight, bias, eps)
    return torch.full_like(y, float("nan")) if x.dtype == torch.float16 else y


class _RaisingBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, dy):
        raise RuntimeError("illegal memory access in the backward")


def _raising_backward(x, weight, eps):
    return _RaisingBackward.apply(x)


def _raises_always(x, weight, bias, eps):
    raise RuntimeError("cannot launch")


def test_a_wrong_output_dtype_is_a_fault_never_a_dropped_dtype():
    caps = capabilities.discover(Kernel("fp32-out", "rmsnorm", _float32_out))
    assert caps.dtypes == capabilities.PROBED_DTYPES and not caps.not_tested
    assert caps.faults["float16"].reason == "dtype" and caps.faults["bfloat16"].reason == "dtype"
    with pytest.raises(KernelFault) as raised:
        caps.raise_fault([torch.float32, torch.float16])
    assert raised.value.status == "error" and "float32" in str(raised.value)
    caps.raise_fault([torch.float32])  # float32 itself is fine


def test_nan_on_finite_input_in_a_probe_fails_the_claims_of_that_dtype():
    caps = capabilities.discover(Kernel("nan-half", "layernorm", _nan_in_half))
    assert torch.float16 in caps.dtypes
    with pytest.raises(KernelFault) as raised:
        caps.raise_fault([torch.float16])
    assert raised.value.status == "failed"
    assert "float16" in caps.as_json()["faults"]


def test_a_backward_that_exists_but_raises_is_a_fault_not_a_missing_backward():
    caps = capabilities.discover(Kernel("raising-backward", "rmsnorm", _raising_backward))
    assert caps.backward and not caps.backward_reason
    assert "illegal memory access" in caps.backward_fault


def test_a_kernel_that_runs_in_no_dtype_is_unusable_and_a_working_one_is_not():
    assert "runs in no dtype" in capabilities.unusable(Kernel("raises", "layernorm", _raises_always))
    assert capabilities.unusable(Kernel("no-half", "layernorm", _no_half)) == ""


def test_dtypes_left_out_say_why_in_the_json():
    caps = capabilities.discover(Kernel("no-half-2", "layernorm", _no_half))
    # float32 x with 16-bit weights: torch's CPU layer_norm refuses the mix ("mixed dtype (CPU)"), said as such
    refused = {capabilities.mix_name(torch.float32, p) for p in (torch.float16, torch.bfloat16)}
    assert set(caps.as_json()["not_tested"]) == {"float16", "bfloat16"} | refused
    assert all("refused" in caps.not_tested[name] and "mixed dtype" in caps.not_tested[name] for name in refused)
    declared = capabilities.discover(Kernel("declared-2", "layernorm", _no_half, dtypes=(torch.float32,)))
    assert declared.not_tested["float16"] == "not among its declared dtypes"


def test_parameter_dtype_mixes_are_probed_or_declared_same_dtype_only():
    """A kernel that takes float32 weights with 16-bit x (and the reverse) has every mix; one that declares
    parameter_dtypes='same' has none, each listed as not tested with the declaration (never dropped silently)."""
    rms = capabilities.discover(Kernel("rms-any", "rmsnorm", lambda x, w, eps: F.rms_norm(x, (x.shape[-1],), w, eps)))
    assert rms.mixes == capabilities.PARAMETER_MIXES and not rms.mix_reasons
    same = capabilities.discover(Kernel("rms-same", "rmsnorm", lambda x, w, eps: F.rms_norm(x, (x.shape[-1],), w, eps),
                                        parameter_dtypes="same"))
    assert not same.mixes
    assert all("parameter_dtypes='same'" in same.not_tested[capabilities.mix_name(*m)]
               for m in capabilities.PARAMETER_MIXES)


def _add_rms(name: str, refuse_a_wider_residual: bool = False) -> Kernel:
    def fn(x, residual, weight, eps):
        if refuse_a_wider_residual and residual.dtype != x.dtype:
            raise TypeError("residual must have x's dtype")
        h = x + residual
        return F.rms_norm(h.float(), (x.shape[-1],), weight.float(), eps).to(x.dtype), h

    return Kernel(name, "add_rmsnorm", fn)


def test_residual_dtype_mixes_are_probed_for_the_add_norm_kinds():
    """A float32 residual beside 16-bit x (core.capabilities.RESIDUAL_MIXES): taken where the kernel computes with
    it, refused with the kernel's error where it raises (the dropout + add kind's too: torch's CPU layer_norm refuses
    a float32 residual_out beside float16 parameters), listed as not drawn for the quantized kinds; each mix not
    checked is in not_tested (never dropped silently)."""
    taken = capabilities.discover(_add_rms("add-rms-wide"))
    assert taken.residual_mixes == capabilities.RESIDUAL_MIXES
    refused = capabilities.discover(_add_rms("add-rms-same", refuse_a_wider_residual=True))
    assert not refused.residual_mixes
    assert all("residual must have x's dtype" in refused.not_tested[capabilities.residual_mix_name(*mix)]
               for mix in capabilities.RESIDUAL_MIXES)
    (dropout_add,) = [k for k in resolve("torch-fused") if k.kind == "dropout_add_layernorm"]
    caps = capabilities.discover(dropout_add)
    assert not caps.residual_mixes
    assert "refused" in caps.not_tested[capabilities.residual_mix_name(torch.float16, torch.float32)]
    (add_rms_quant,) = [k for k in resolve("torch-quant") if k.kind == "add_rmsnorm_quant"]
    assert "not drawn" in capabilities.discover(add_rms_quant).not_tested[
        capabilities.residual_mix_name(torch.float16, torch.float32)]


def test_parameter_dtype_mixes_are_probed_for_the_fused_kinds_and_groupnorm():
    """Every kind with weight and bias is probed (measured: torch's CPU group_norm takes float32 parameters beside
    16-bit x and refuses 16-bit ones beside float32 x; torch-fused's add + RMSNorm takes all four mixes)."""
    group = capabilities.discover(Kernel("gn-torch", "groupnorm", F.group_norm))
    assert group.mixes == ((torch.float16, torch.float32), (torch.bfloat16, torch.float32))
    assert all("mixed dtype" in group.not_tested[capabilities.mix_name(torch.float32, p)]
               for p in (torch.float16, torch.bfloat16))
    (add_rms,) = [k for k in resolve("torch-fused") if k.kind == "add_rmsnorm"]
    assert capabilities.discover(add_rms).mixes == capabilities.PARAMETER_MIXES


def _raised(error: BaseException) -> KernelFault:
    fault = KernelFault("k", "raised", f"raised {error!r}")
    fault.__cause__ = error
    return fault


@pytest.mark.parametrize("error, refused", [
    (RuntimeError("Cannot launch Triton kernel since n = 98304 exceeds the recommended Triton blocksize = 65536."),
     True),  # Liger-Kernel's
    (RuntimeError("This layer norm doesn't support feature dim >= 64KB."), True),  # Triton tutorial 05's
    (NotImplementedError("rows wider than 65536"), True),
    (IndexError("index 65536 is out of bounds for dimension 0 with size 65536"), False),  # the kernel's own bug
    (ValueError("shapes mismatch"), False),
])
def test_a_clear_refusal_of_a_rows_width_is_told_from_a_fault(error, refused):
    """properties.norms.require_width skips a test, with the kernel's error, only for a refusal naming a limit."""
    assert capabilities.refused_width(_raised(error)) is refused
    assert capabilities.refused_width(KernelFault("k", "nonfinite", "returned NaN")) is False
