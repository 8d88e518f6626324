"""Linear + bias + SiLU, bf16: a projection with a Swish epilogue (e.g. a diffusion
model's time-embedding MLP or a gated-MLP branch), at LLaMA-7B widths.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 2
TAGS = ("gemm", "epilogue", "silu", "bf16", "compute-bound")
DTYPE = torch.bfloat16
M, K, N = 4096, 4096, 11008  # tokens, hidden, intermediate
SMALL = {"M": 64, "K": 96, "N": 80}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True, dtype=DTYPE)

    def forward(self, x):
        return F.silu(self.linear(x))


def get_inputs():
    return [torch.randn(M, K, dtype=DTYPE)]


def get_init_inputs():
    return [K, N]
