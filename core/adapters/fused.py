"""Built-ins of the fused residual add + norm kinds (add_layernorm, add_rmsnorm, dropout_add_layernorm) and GroupNorm.

    torch-fused          torch reference: h = x + residual (residual's dtype), (F.layer_norm / F.rms_norm (h), h);
                         dropout_add_layernorm with torch's F.dropout (core.adapters.torch_native.dropout)
    torch-fused-fp32     the same with h kept in float32 (residual_dtype="float32"), y rounded to x's dtype
    triton-fused         ours (kernels.fused_norm): add_layer_norm, add_rms_norm, dropout_add_layer_norm
    triton-fused-fp32    ours with residual_in_fp32=True
    liger-fused-add-rmsnorm-{llama,gemma,none}
                         Liger-Kernel's LigerFusedAddRMSNormFunction.apply(x, residual, w, eps, offset, casting_mode),
                         its defaults otherwise (in_place=False), CPU through kernels.interpret as Liger's RMSNorm;
                         it needs a weight: None becomes the constant 1 - offset (effective scale 1)

    torch-groupnorm      F.group_norm(x, num_groups, weight, bias, eps); backward_precision="storage" on every
                         device: ATen's native_group_norm returns mean and rstd in x's dtype (CPU and CUDA), and
                         its backward rebuilds x_hat from them; on CUDA affine_precision="storage": its forward
                         computes a = rstd gamma, b = beta - a mean from them (docs/findings.md [R7])
    liger-groupnorm      Liger-Kernel's LigerGroupNormFunction.apply(x, weight, bias, C, num_groups, eps)

Liger's casting modes are those of its RMSNorm (core.adapters.liger.RMS_MODES), and so are the conventions they
declare (core.adapters.liger.CONVENTIONS: llama's double rounding of x_hat, in y and in dW, as its
fused_add_rms_norm.py does); its residual_out is the sum in the input dtype, kept in storage.
"""

from __future__ import annotations

from core.adapters import aten_statistics, liger, torch_native, triton_ours
from core.adapters._thirdparty import COMPILED_TRITON
from core.kernel import Builtin, Kernel


def _torch(residual_in_fp32: bool):
    from torch.nn import functional as F

    def wide(t):  # with h in float32, the norm's parameters too (torch's CPU norms refuse mixed dtypes)
        return t.float() if residual_in_fp32 and t is not None else t

    def add_layernorm(x, residual, weight, bias, eps):
        h = wide(x) + wide(residual) if residual_in_fp32 else x + residual
        return F.layer_norm(h, (h.shape[-1],), wide(weight), wide(bias), eps).to(x.dtype), h

    def add_rmsnorm(x, residual, weight, eps):
        h = wide(x) + wide(residual) if residual_in_fp32 else x + residual
        return F.rms_norm(h, (h.shape[-1],), wide(weight), eps).to(x.dtype), h

    def dropout_add_layernorm(x, residual, weight, bias, eps, p, seed):
        return add_layernorm(torch_native.dropout(x, p, seed), residual, weight, bias, eps)

    return add_layernorm, add_rmsnorm, dropout_add_layernorm


def _load_torch(residual_in_fp32: bool) -> list[Kernel]:
    add_layernorm, add_rmsnorm, dropout_add_layernorm = _torch(residual_in_fp32)
    name = "torch-fused-fp32" if residual_in_fp32 else "torch-fused"
    residual_dtype = "float32" if residual_in_fp32 else "storage"
    where = "float32" if residual_in_fp32 else "the residual's dtype"
    layer_norm = {} if residual_in_fp32 else aten_statistics.LAYER_NORM  # float32 h: nothing kept in 16-bit
    return [
        Kernel(f"{name}:add_layernorm", "add_layernorm", add_layernorm, spec=name, residual_dtype=residual_dtype,
               **layer_norm, description=f"h = x + residual in {where}; (F.layer_norm(h), h)"),
        Kernel(f"{name}:add_rmsnorm", "add_rmsnorm", add_rmsnorm, spec=name, residual_dtype=residual_dtype,
               description=f"h = x + residual in {where}; (F.rms_norm(h), h)"),
        Kernel(f"{name}:dropout_add_layernorm", "dropout_add_layernorm", dropout_add_layernorm, spec=name,
               residual_dtype=residual_dtype, **layer_norm,
               description=f"h = residual + F.dropout(x) in {where}; (F.layer_norm(h), h)"),
    ]


def groupnorm(x, num_groups, weight, bias, eps):
    from torch.nn import functional as F

    return F.group_norm(x, num_groups, weight, bias, eps)


def _load_liger_groupnorm() -> list[Kernel]:
    liger.prepare()
    import torch
    from liger_kernel.ops.group_norm import LigerGroupNormFunction

    def liger_groupnorm(x, num_groups, weight, bias, eps):
        channels = x.shape[1]
        weight = torch.ones(channels, dtype=x.dtype, device=x.device) if weight is None else weight
        bias = torch.zeros(channels, dtype=x.dtype, device=x.device) if bias is None else bias
        return LigerGroupNormFunction.apply(x, weight, bias, channels, num_groups, eps)

    return [Kernel("liger-groupnorm", "groupnorm", liger_groupnorm, spec="liger-groupnorm", on_cuda=COMPILED_TRITON,
                   description="Liger-Kernel LigerGroupNormFunction (Triton; weight/bias None become ones/zeros)")]


def _load_ours(residual_in_fp32: bool) -> list[Kernel]:
    import kernels

    device, dtypes = triton_ours.device_and_dtypes()
    name = "triton-fused-fp32" if residual_in_fp32 else "triton-fused"
    declared = {"spec": name, "device": device, "dtypes": dtypes, "flush_to_zero": device == "cuda",
                "residual_dtype": "float32" if residual_in_fp32 else "storage"}

    def add_layernorm(x, residual, weight, bias, eps):
        return kernels.add_layer_norm(x, residual, weight, bias, eps, residual_in_fp32=residual_in_fp32)

    def add_rmsnorm(x, residual, weight, eps):
        return kernels.add_rms_norm(x, residual, weight, eps, residual_in_fp32=residual_in_fp32)

    def dropout_add_layernorm(x, residual, weight, bias, eps, p, seed):
        return kernels.dropout_add_layer_norm(x, residual, weight, bias, eps, p, seed,
                                              residual_in_fp32=residual_in_fp32)

    kept = "float32" if residual_in_fp32 else "the residual's dtype"
    return [
        Kernel(f"{name}:add_layernorm", "add_layernorm", add_layernorm, **declared,
               description=f"our fused add + LayerNorm (Triton), residual_out in {kept}"),
        Kernel(f"{name}:add_rmsnorm", "add_rmsnorm", add_rmsnorm, **declared,
               description=f"our fused add + RMSNorm (Triton), residual_out in {kept}"),
        Kernel(f"{name}:dropout_add_layernorm", "dropout_add_layernorm", dropout_add_layernorm, **declared,
               description=f"our fused dropout + add + LayerNorm (Triton, Philox), residual_out in {kept}"),
    ]


def _liger_loader(mode_name: str):
    offset, casting_mode, description = liger.RMS_MODES[f"liger-rmsnorm-{mode_name}"]
    name = f"liger-fused-add-rmsnorm-{mode_name}"

    def load() -> list[Kernel]:
        liger.prepare()
        import torch
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

        def add_rmsnorm(x, residual, weight, eps):
            if weight is None:  # Liger needs W: the effective scale offset + W = 1
                weight = torch.full(x.shape[-1:], 1.0 - offset, dtype=x.dtype, device=x.device)
            return LigerFusedAddRMSNormFunction.apply(x, residual, weight, eps, offset, casting_mode)

        return [Kernel(name, "add_rmsnorm", add_rmsnorm, spec=name, weight_offset=offset,
                       description=f"Liger-Kernel LigerFusedAddRMSNormFunction, casting mode {casting_mode!r}: "
                                   f"{description}", conventions=liger.CONVENTIONS.get(casting_mode, ()),
                       on_cuda=COMPILED_TRITON)]

    return name, load


BUILTINS = [
    Builtin("torch-fused", "torch reference add + LayerNorm/RMSNorm, residual_out in the residual's dtype",
            lambda: _load_torch(False)),
    Builtin("torch-fused-fp32", "torch reference add + LayerNorm/RMSNorm, residual_out in float32",
            lambda: _load_torch(True)),
    Builtin("triton-fused", "normverify's fused add + LayerNorm/RMSNorm and dropout + add + LayerNorm (kernels/)",
            lambda: _load_ours(False), triton_ours.unavailable),
    Builtin("triton-fused-fp32", "the same with residual_in_fp32 (residual_out in float32)",
            lambda: _load_ours(True), triton_ours.unavailable),
    Builtin("torch-groupnorm", "torch.nn.functional.group_norm", lambda: [
        Kernel("torch-groupnorm", "groupnorm", groupnorm, spec="torch-groupnorm", description="F.group_norm",
               backward_precision="storage", on_cuda=(("affine_precision", "storage"),))]),
    Builtin("liger-groupnorm", "Liger-Kernel GroupNorm (Triton; CPU through the interpreter)", _load_liger_groupnorm,
            liger.unavailable),
    *(Builtin(name, f"Liger-Kernel fused add + RMSNorm, casting mode {mode!r}", load, liger.unavailable)
      for mode in ("llama", "gemma", "none") for name, load in [_liger_loader(mode)]),
]
