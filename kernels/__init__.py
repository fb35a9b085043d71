"""Our Triton kernels for LayerNorm, RMSNorm, BatchNorm and dropout (forward and backward).

Kernels launched on CPU tensors run in Triton's interpreter, CUDA tensors take the compiled path. Without CUDA,
importing this package enables :mod:`kernels.interpret` (process-wide: any Triton kernel on CPU tensors runs
interpreted); with CUDA, our first launch on CPU tensors enables it (:func:`kernels.rows.launch`), so that a GPU
process that never uses the interpreter never has its hooks around ``JITFunction.run``. See docs/kernels.md.
"""

import torch

from kernels import interpret

if not torch.cuda.is_available():
    interpret.enable()

from kernels.batchnorm import batch_norm
from kernels.functional import dropout, layer_norm, rms_norm
from kernels.fused_norm import add_layer_norm, add_rms_norm, dropout_add_layer_norm
from kernels.modules import LayerNorm, RMSNorm

__all__ = ["LayerNorm", "RMSNorm", "add_layer_norm", "add_rms_norm", "batch_norm", "dropout", "dropout_add_layer_norm",
           "interpret", "layer_norm", "rms_norm"]
