"""Seed 001's tutorial LayerNorm ("层归一化", section 3, "核心代码"), transcribed as published.

Only the comments are translated. Note what it computes: ``x.std`` is the *sample* standard
deviation (Bessel's correction, divide by d - 1), and eps is added to the standard deviation
outside the square root: ``gamma * (x - mean) / (std_{d-1}(x) + eps) + beta``, not the
``gamma * (x - mean) / sqrt(var_d(x) + eps) + beta`` of the seed's own formula (its step 3).
"""

import torch
import torch.nn as nn


class LayerNorm(nn.Module):
    def __init__(self, features, eps=1e-6):
        """
        Args:
            features (int): feature dimension (i.e. d_model).
            eps (float): small constant that prevents division by zero.
        """
        super(LayerNorm, self).__init__()  # noqa: UP008 (as published)
        # the learnable scale gamma
        self.gamma = nn.Parameter(torch.ones(features))
        # the learnable shift beta
        self.beta = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        # x shape: [batch_size, seq_len, d_model]

        # mean and standard deviation along the last (feature) dimension
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)

        # normalize
        normalized = (x - mean) / (std + self.eps)

        # scale and shift; gamma and beta have shape [d_model] and broadcast
        out = self.gamma * normalized + self.beta
        return out
