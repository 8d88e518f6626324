"""Bias + residual + LayerNorm, fp32: the post-norm sublayer exit of BERT / the
original Transformer, LayerNorm(x + bias + residual), 8192 tokens x 4096 hidden.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 2
TAGS = ("norm", "layernorm", "residual", "bias", "fp32", "memory-bound")
DTYPE = torch.float32
M, N = 8192, 4096  # tokens, hidden
SMALL = {"M": 64, "N": 80}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.bias = nn.Parameter(0.1 * torch.randn(hidden, dtype=DTYPE))
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden, dtype=DTYPE))
        self.norm_bias = nn.Parameter(0.1 * torch.randn(hidden, dtype=DTYPE))
        self.eps = eps

    def forward(self, x, residual):
        h = x + self.bias + residual
        return F.layer_norm(h, (h.shape[-1],), self.weight, self.norm_bias, self.eps)


def get_inputs():
    return [torch.randn(M, N, dtype=DTYPE), torch.randn(M, N, dtype=DTYPE)]


def get_init_inputs():
    return [N, 1e-5]
