"""Bias add + GELU, bf16: the epilogue of an MLP up-projection whose GEMM ran
without bias (Megatron's fused bias-GELU), 8192 tokens x 11008.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 1
TAGS = ("pointwise", "gelu", "bias", "bf16", "memory-bound")
DTYPE = torch.bfloat16
M, N = 8192, 11008  # tokens, intermediate
SMALL = {"M": 64, "N": 80}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(0.5 * torch.randn(features, dtype=DTYPE))

    def forward(self, x):
        return F.gelu(x + self.bias)


def get_inputs():
    return [torch.randn(M, N, dtype=DTYPE)]


def get_init_inputs():
    return [N]
