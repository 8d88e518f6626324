"""Bias + residual + LayerNorm, bf16: LayerNorm(x + bias + residual) with nn.LayerNorm,
as a GPT-style post-attention exit, 8192 tokens x 4096 hidden.
"""

import torch
import torch.nn as nn

LEVEL = 2
TAGS = ("norm", "layernorm", "residual", "bias", "bf16", "memory-bound")
DTYPE = torch.bfloat16
M, N = 8192, 4096  # tokens, hidden
SMALL = {"M": 64, "N": 80}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.bias = nn.Parameter(0.1 * torch.randn(hidden, dtype=DTYPE))
        self.norm = nn.LayerNorm(hidden, eps=1e-5, dtype=DTYPE)
        with torch.no_grad():  # trained-looking affine parameters, not the identity
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(hidden))
            self.norm.bias.copy_(0.1 * torch.randn(hidden))

    def forward(self, x, residual):
        return self.norm(x + self.bias + residual)


def get_inputs():
    return [torch.randn(M, N, dtype=DTYPE), torch.randn(M, N, dtype=DTYPE)]


def get_init_inputs():
    return [N]
