"""Scaled residual chain, bf16: DeepNet-style residual, alpha * x + branch, applied
twice with a dropout-free scale between ((alpha * x + b1) * beta + b2),
8192 tokens x 4096.
"""

import torch
import torch.nn as nn

LEVEL = 1
TAGS = ("pointwise", "residual", "bf16", "memory-bound")
DTYPE = torch.bfloat16
M, N = 8192, 4096  # tokens, hidden
SMALL = {"M": 64, "N": 80}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, alpha, beta):
        super().__init__()
        self.alpha = alpha
        self.beta = beta

    def forward(self, x, branch1, branch2):
        h = self.alpha * x + branch1
        return self.beta * h + branch2


def get_inputs():
    return [torch.randn(M, N, dtype=DTYPE) for _ in range(3)]


def get_init_inputs():
    return [1.8, 0.7]
