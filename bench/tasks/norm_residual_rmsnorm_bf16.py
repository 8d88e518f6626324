"""Residual add + RMSNorm, bf16 with fp32 statistics: h = x + residual (bf16), then
LLaMA's RMSNorm of h, 8192 tokens x 4096.
"""

import torch
import torch.nn as nn

LEVEL = 2
TAGS = ("norm", "rmsnorm", "residual", "bf16", "memory-bound")
DTYPE = torch.bfloat16
M, N = 8192, 4096  # tokens, hidden
SMALL = {"M": 64, "N": 80}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden, dtype=DTYPE))
        self.eps = eps

    def forward(self, x, residual):
        h = (x + residual).to(torch.float32)
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + self.eps)
        return self.weight * h.to(x.dtype)


def get_inputs():
    return [torch.randn(M, N, dtype=DTYPE), torch.randn(M, N, dtype=DTYPE)]


def get_init_inputs():
    return [N, 1e-6]
