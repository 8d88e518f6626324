"""RMSNorm, fp32: x * rsqrt(mean(x^2) + eps) * weight (T5 / LLaMA), 8192 tokens x 4096.
"""

import torch
import torch.nn as nn

LEVEL = 1
TAGS = ("norm", "rmsnorm", "fp32", "memory-bound")
DTYPE = torch.float32
M, N = 8192, 4096  # tokens, hidden
SMALL = {"M": 64, "N": 80}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden, dtype=DTYPE))
        self.eps = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(variance + self.eps) * self.weight


def get_inputs():
    return [torch.randn(M, N, dtype=DTYPE)]


def get_init_inputs():
    return [N, 1e-6]
