"""What ATen's LayerNorm keeps its statistics in, by device: the declarations of the built-ins that call it
(torch-fused's LayerNorms, torch-module's and torch-compile's nn.LayerNorm).

``aten.native_layer_norm`` returns mean and rstd in the input's dtype on the CPU, and the backward rebuilds x_hat from
them: a storage-precision backward for float16/bfloat16 data (tests/test_corpus_units.py checks the CPU fact). On
CUDA they are float32 (acc_type). Declared for the device the kernel runs on (core.kernel.Kernel.on_cuda, applied by
core.registry.resolve), never for whether the host has a GPU: a CPU run on a GPU host keeps the CPU declaration.
"""

from __future__ import annotations

LAYER_NORM = {"backward_precision": "storage", "on_cuda": (("backward_precision", "float32"),)}
