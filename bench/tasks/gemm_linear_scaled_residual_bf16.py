"""Output projection + scaled residual add, bf16: residual + alpha * (x @ W^T + b),
the attention output projection of a block with a residual scale (DeepNet-style).
"""

import torch
import torch.nn as nn

LEVEL = 2
TAGS = ("gemm", "epilogue", "residual", "bf16", "compute-bound")
DTYPE = torch.bfloat16
M, K, N = 8192, 4096, 4096  # tokens, hidden in, hidden out
SMALL = {"M": 64, "K": 96, "N": 80}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, in_features, out_features, alpha):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True, dtype=DTYPE)
        self.alpha = alpha

    def forward(self, x, residual):
        return residual + self.alpha * self.linear(x)


def get_inputs():
    return [torch.randn(M, K, dtype=DTYPE), torch.randn(M, N, dtype=DTYPE)]


def get_init_inputs():
    return [K, N, 0.5]
