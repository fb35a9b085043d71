"""Built-ins of the kinds over x [N, C, *] beyond GroupNorm: channel-wise LayerNorm (torch's layer_norm, with its CPU
declaration, core.adapters.aten_statistics), and the kinds with running statistics, batchnorm and instancenorm,
fn(x, running_mean, running_var, weight, bias, training, momentum, eps) -> y, the running buffers updated in place in
training mode (F.batch_norm's and F.instance_norm's contracts).

The torch built-ins declare what ATen's batch_norm does with float16/bfloat16 x, for the device it runs on
(core.kernel.Kernel.for_device):

- backward_precision="storage" on both devices. On the CPU its backward rebuilds x_hat from statistics rounded to x's
  dtype, like its layer_norm (core.adapters.aten_statistics; docs/findings.md [R9]). On CUDA the training backward's
  reduction rounds each term dy (x - mean) to x's dtype before its float32 sum: GradOp returns
  ``Float2<scalar_t, accscalar_t>(g, g * c)``, whose constructor takes scalar_t (aten/src/ATen/native/cuda/
  Normalization.cuh, torch 2.11), measured on an H100 (docs/findings.md [R11]). The storage-precision model (every
  sum with u = u_storage) bounds both.
- affine_precision="storage" on the CPU only: its forward applies y = x a + b with a = gamma rstd, b = beta - mean a
  rounded to x's dtype ([R9]); CUDA's forward passes with float32 statistics.

    torch-batchnorm          torch.nn.functional.batch_norm itself
    torch-instancenorm       torch.nn.functional.instance_norm itself (use_input_stats = training): ATen runs it as
                             batch_norm over x viewed as [1, N C, *], so it declares what torch-batchnorm does
    triton-batchnorm         ours (kernels/batchnorm.py): two-pass float32 statistics, compiled on CUDA (where its
                             tl.sqrt and float32 division flush subnormals: flush_to_zero), Triton's interpreter on
                             the CPU (float32, float16)
    torch-channel-layernorm  F.layer_norm(x, x.shape[1:], weight, bias, eps): LayerNorm over each sample's (C, *)
                             elements, the channel_layernorm kind (seed 002's LayerNorm in a CNN)
    torch-batchnorm-module   nn.BatchNorm1d / 2d / 3d (by x's rank: [N, C] and [N, C, L], [N, C, H, W], 5-D) through
                             torch.func.functional_call with the given tensors as its parameters and buffers (so
                             gradients reach them and the buffers it updates are the caller's); affine=False when
                             neither weight nor bias is given (one of them alone: the other as ones or zeros, which
                             is exact), track_running_stats=False without running statistics (in training;
                             in eval it refuses the call, as F.batch_norm does, where the module would take the
                             batch's statistics)
"""

from __future__ import annotations

from core.adapters import triton_ours
from core.adapters.aten_statistics import LAYER_NORM as CPU_LAYER_NORM
from core.kernel import Builtin, Kernel

ATEN_BATCH_NORM = {"backward_precision": "storage", "affine_precision": "storage",
                   "on_cuda": (("affine_precision", "float32"),)}


def batchnorm(x, running_mean, running_var, weight, bias, training, momentum, eps):
    from torch.nn import functional as F

    return F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)


def instancenorm(x, running_mean, running_var, weight, bias, training, momentum, eps):
    from torch.nn import functional as F

    return F.instance_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)


def channel_layernorm(x, weight, bias, eps):
    from torch.nn import functional as F

    return F.layer_norm(x, x.shape[1:], weight, bias, eps)


_MODULES = {2: "BatchNorm1d", 3: "BatchNorm1d", 4: "BatchNorm2d", 5: "BatchNorm3d"}


def batchnorm_module(x, running_mean, running_var, weight, bias, training, momentum, eps):
    """nn.BatchNorm{1,2,3}d of x's rank, called with the given tensors in place of its parameters and buffers."""
    import torch
    from torch import nn

    if x.dim() not in _MODULES:
        raise ValueError(f"nn.BatchNorm takes x of 2 to 5 dimensions, got {x.dim()}")
    channels, affine = x.shape[1], weight is not None or bias is not None
    tracked = running_mean is not None and running_var is not None
    if not training and not tracked:  # the module would normalize by the batch's statistics (its documented eval
        # with track_running_stats=False), which F.batch_norm's contract, the kind's, refuses
        raise RuntimeError("running_mean and running_var must be given in evaluation mode (nn.BatchNorm with "
                           "track_running_stats=False normalizes eval by the batch's statistics instead)")
    module = getattr(nn, _MODULES[x.dim()])(channels, eps=eps, momentum=momentum, affine=affine,
                                            track_running_stats=tracked, device="meta")
    module.train(training)
    state = {}
    if affine:
        dtype = (weight if weight is not None else bias).dtype
        state["weight"] = weight if weight is not None else torch.ones(channels, dtype=dtype, device=x.device)
        state["bias"] = bias if bias is not None else torch.zeros(channels, dtype=dtype, device=x.device)
    if tracked:
        state.update(running_mean=running_mean, running_var=running_var,
                     num_batches_tracked=torch.zeros((), dtype=torch.long, device=x.device))
    return torch.func.functional_call(module, state, (x,))


def _load_ours() -> list[Kernel]:
    from kernels.batchnorm import batch_norm

    device, dtypes = triton_ours.device_and_dtypes()
    where = "compiled" if device == "cuda" else "Triton interpreter"
    return [Kernel("triton-batchnorm", "batchnorm", batch_norm, spec="triton-batchnorm", device=device,
                   dtypes=dtypes, flush_to_zero=device == "cuda",
                   description=f"our Triton BatchNorm, training and eval, fwd+bwd ({where})")]


BUILTINS = [
    Builtin("torch-batchnorm", "torch.nn.functional.batch_norm", lambda: [
        Kernel("torch-batchnorm", "batchnorm", batchnorm, spec="torch-batchnorm", description="F.batch_norm",
               **ATEN_BATCH_NORM)]),
    Builtin("torch-instancenorm", "torch.nn.functional.instance_norm", lambda: [
        Kernel("torch-instancenorm", "instancenorm", instancenorm, spec="torch-instancenorm",
               description="F.instance_norm", **ATEN_BATCH_NORM)]),
    Builtin("torch-channel-layernorm", "torch.nn.functional.layer_norm over (C, *)", lambda: [
        Kernel("torch-channel-layernorm", "channel_layernorm", channel_layernorm, spec="torch-channel-layernorm",
               description="F.layer_norm(x, x.shape[1:])", **CPU_LAYER_NORM)]),
    Builtin("triton-batchnorm", "normverify's own Triton BatchNorm (kernels/batchnorm.py)", _load_ours,
            triton_ours.unavailable),
    Builtin("torch-batchnorm-module", "torch.nn.BatchNorm1d/2d/3d through torch.func.functional_call", lambda: [
        Kernel("torch-batchnorm-module", "batchnorm", batchnorm_module, spec="torch-batchnorm-module",
               description="nn.BatchNorm1d/2d/3d by x's rank", **ATEN_BATCH_NORM)]),
]
