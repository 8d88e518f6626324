"""Linear + bias + GELU, fp32: the MLP up-projection of a GPT-style block.

x (tokens x hidden) @ W^T + b, then exact (erf) GELU. fp32 throughout: a GEMM
that keeps fp32 accuracy (no silent TF32), with the activation as its epilogue.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 2
TAGS = ("gemm", "epilogue", "gelu", "fp32", "compute-bound")
DTYPE = torch.float32
M, K, N = 2048, 4096, 4096  # tokens, hidden, intermediate
SMALL = {"M": 64, "K": 96, "N": 80}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True, dtype=DTYPE)

    def forward(self, x):
        return F.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(M, K, dtype=DTYPE)]


def get_init_inputs():
    return [K, N]
