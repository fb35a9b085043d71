"""Built-in kernels: the modules listed in :data:`MODULES`, each exporting ``BUILTINS: list[core.kernel.Builtin]``.

The list is explicit (a new adapter module is added here, not found by scanning), and the modules are
imported by :func:`core.registry.builtins` only when a built-in is asked for. ``modules`` is not in the
list: it is the generic ``nn.Module`` path the others (and user SPECs) go through.
"""

MODULES = ("torch_native", "triton_ours", "liger", "hf", "torch_modules", "fused", "batchnorm", "flaggems", "flashattn",
           "quantized")
