"""Our Triton kernels for LayerNorm, RMSNorm and dropout (forward and backward)."""
