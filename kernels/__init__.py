"""Our Triton kernels for LayerNorm, RMSNorm and dropout (forward and backward).

Importing this package enables :mod:`kernels.interpret`, so kernels launched on CPU tensors run in
Triton's interpreter while CUDA tensors keep the compiled path. See docs/kernels.md.
"""

from kernels import interpret

interpret.enable()

from kernels.functional import dropout, layer_norm, rms_norm  # noqa: E402
from kernels.fused_norm import add_layer_norm, add_rms_norm, dropout_add_layer_norm  # noqa: E402
from kernels.modules import LayerNorm, RMSNorm  # noqa: E402

__all__ = ["LayerNorm", "RMSNorm", "add_layer_norm", "add_rms_norm", "dropout", "dropout_add_layer_norm", "interpret",
           "layer_norm", "rms_norm"]
