"""Seed 002's tutorial ManualLayerNorm (section 7.1.4) and ManualRMSNorm (section 7.2.2), transcribed as published.

Only the comments are added. Both follow the conventions of docs/ARCHITECTURE.md: population
variance (``unbiased=False``) and eps inside the square root; statistics are computed in the
input's dtype (no upcast to fp32).
"""

import torch
import torch.nn as nn


# manual LayerNorm
class ManualLayerNorm(nn.Module):
    def __init__(self, normalized_shape, eps=1e-5):
        super(ManualLayerNorm, self).__init__()  # noqa: UP008 (as published)
        if isinstance(normalized_shape, int):
            self.normalized_shape = (normalized_shape,)
        else:
            self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(self.normalized_shape))
        self.beta = nn.Parameter(torch.zeros(self.normalized_shape))
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dims_to_normalize = tuple(range(x.ndim - len(self.normalized_shape), x.ndim))
        mean = x.mean(dim=dims_to_normalize, keepdim=True)
        var = x.var(dim=dims_to_normalize, unbiased=False, keepdim=True)
        x_normalized = (x - mean) / torch.sqrt(var + self.eps)
        output = self.gamma * x_normalized + self.beta
        return output


class ManualRMSNorm(nn.Module):
    def __init__(self, normalized_shape, eps=1e-5):
        super().__init__()
        if isinstance(normalized_shape, int): self.normalized_shape = (normalized_shape,)  # noqa: E701
        else: self.normalized_shape = tuple(normalized_shape)  # noqa: E701
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(self.normalized_shape))
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dims_to_normalize = tuple(range(x.ndim - len(self.normalized_shape), x.ndim))
        mean_squared = x.pow(2).mean(dim=dims_to_normalize, keepdim=True)
        rms = torch.sqrt(mean_squared + self.eps)
        return self.gamma * (x / rms)
