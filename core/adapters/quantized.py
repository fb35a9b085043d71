"""Built-ins of the quantized-output kinds (issue 29): LayerNorm, RMSNorm, and residual add + RMSNorm, whose output
is quantized to FP8 (float8_e4m3fn, float8_e5m2) or INT8 with a static scale or a dynamic per-row scale, in plain
torch (the reference implementations vLLM's fused quant kernels are tested against, written from their contract):

    layernorm_quant    fn(x, weight, bias, eps, scale, quant_dtype) -> (q, scale)
    rmsnorm_quant      fn(x, weight, eps, scale, quant_dtype) -> (q, scale)
    add_rmsnorm_quant  fn(x, residual, weight, eps, scale, quant_dtype) -> (q, scale, residual_out)

y = LN(h) or RMS(h) in float32 (h = x, or residual_out = x + residual rounded to the residual's dtype); with
``quantizes`` "storage", y rounded once to x's dtype; scale None: per row s = max(amax(|y|) / fmax, MINIMUM_SCALE),
returned [..., 1] float32; a given scale (static) returned as given; q = Q(y / s): clamped to the format's range, then
converted (FP8: torch's round-to-nearest-even conversion; INT8: torch.round, half to even).

    torch-quant        the three kinds, quantizing y rounded to x's dtype (an unfused norm, then quantize)
    torch-quant-fp32   the three kinds, quantizing the float32 y (amax of it as well: TransformerEngine's fused norms)

Our own Triton version is not here: under Triton 3.x's interpreter, the float32 to float8 conversion is not
round-to-nearest-even (1.0625, a tie, becomes 1.125 in e4m3fn, and 3e-3 becomes 1.95e-3), so a kernel written
with it cannot be checked on the CPU (docs/validate-your-kernel.md).
"""

from __future__ import annotations

from core.kernel import Builtin, Kernel, Quantization

MINIMUM_SCALE = 2.0**-40  # the declared floor of the dynamic scale (an all-zero row's scale)


def ln_float32(h, weight, bias, eps: float):
    """LayerNorm of h in float32 (F.layer_norm on the float32 values and parameters)."""
    from torch.nn import functional as F

    return F.layer_norm(h.float(), h.shape[-1:], None if weight is None else weight.float(),
                        None if bias is None else bias.float(), eps)


def rms_float32(h, weight, eps: float):
    """RMS(h) in float32: h / sqrt(mean(h^2) + eps) * weight."""
    import torch

    h32 = h.float()
    y = h32 * torch.rsqrt(h32.pow(2).mean(-1, keepdim=True) + eps)
    return y if weight is None else y * weight.float()


def quantize(y, scale, quant_dtype, minimum_scale: float = MINIMUM_SCALE):
    """(q, scale): y (float32) / scale, clamped to the format's range and converted; scale None: per row
    max(amax / fmax, minimum_scale)."""
    import torch

    integer = not quant_dtype.is_floating_point
    fmax = float(torch.iinfo(quant_dtype).max if integer else torch.finfo(quant_dtype).max)
    if scale is None:
        scale = torch.clamp(y.abs().amax(-1, keepdim=True) / fmax, min=minimum_scale)
    v = y / scale.float()
    v = torch.round(v).clamp(torch.iinfo(quant_dtype).min, fmax) if integer else v.clamp(-fmax, fmax)
    return v.to(quant_dtype), scale


def declared_y(y, x, storage: bool):
    """The y quantized: the float32 y, rounded once to x's dtype when ``storage``."""
    return y.to(x.dtype).float() if storage else y


def _layernorm_quant(storage: bool):
    def layernorm_quant(x, weight, bias, eps, scale, quant_dtype):
        return quantize(declared_y(ln_float32(x, weight, bias, eps), x, storage), scale, quant_dtype)

    return layernorm_quant


def _rmsnorm_quant(storage: bool):
    def rmsnorm_quant(x, weight, eps, scale, quant_dtype):
        return quantize(declared_y(rms_float32(x, weight, eps), x, storage), scale, quant_dtype)

    return rmsnorm_quant


def _add_rmsnorm_quant(storage: bool):
    def add_rmsnorm_quant(x, residual, weight, eps, scale, quant_dtype):
        h = x if residual is None else (x.float() + residual.float()).to(residual.dtype)
        q, s = quantize(declared_y(rms_float32(h, weight, eps), x, storage), scale, quant_dtype)
        return q, s, h

    return add_rmsnorm_quant


def _load(quantizes: str) -> list[Kernel]:
    storage = quantizes == "storage"
    declared = Quantization(quantizes=quantizes, minimum_scale=MINIMUM_SCALE)
    suffix = "" if storage else "-fp32"
    what = "y rounded to x's dtype" if storage else "the float32 y"
    return [Kernel(f"torch-layernorm-quant{suffix}", "layernorm_quant", _layernorm_quant(storage),
                   spec=f"torch-quant{suffix}", quantization=declared,
                   description=f"torch LayerNorm, then {what} quantized (FP8/INT8)"),
            Kernel(f"torch-rmsnorm-quant{suffix}", "rmsnorm_quant", _rmsnorm_quant(storage),
                   spec=f"torch-quant{suffix}", quantization=declared,
                   description=f"torch RMSNorm, then {what} quantized (FP8/INT8)"),
            Kernel(f"torch-add-rmsnorm-quant{suffix}", "add_rmsnorm_quant", _add_rmsnorm_quant(storage),
                   spec=f"torch-quant{suffix}", quantization=declared,
                   description=f"torch add + RMSNorm, then {what} quantized (FP8/INT8)")]


BUILTINS = [
    Builtin("torch-quant", "torch LayerNorm, RMSNorm and add + RMSNorm quantized to FP8/INT8 (y rounded to x's dtype)",
            lambda: _load("storage")),
    Builtin("torch-quant-fp32", "torch LayerNorm, RMSNorm and add + RMSNorm quantized to FP8/INT8 (the float32 y)",
            lambda: _load("float32")),
]
