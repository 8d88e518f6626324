"""Linear + bias + GELU (tanh approximation), bf16: GPT-2 / BERT MLP up-projection.

8192 tokens x 4096 hidden -> 4096, bias, then GELU with the tanh approximation
that GPT-2 uses.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 2
TAGS = ("gemm", "epilogue", "gelu", "bf16", "compute-bound")
DTYPE = torch.bfloat16
M, K, N = 8192, 4096, 4096  # tokens, hidden, intermediate
SMALL = {"M": 64, "K": 96, "N": 80}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True, dtype=DTYPE)

    def forward(self, x):
        return F.gelu(self.linear(x), approximate="tanh")


def get_inputs():
    return [torch.randn(M, K, dtype=DTYPE)]


def get_init_inputs():
    return [K, N]
