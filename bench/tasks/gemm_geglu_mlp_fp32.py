"""GEGLU projection, fp32: one linear to 2 x inner, split, value * GELU(gate)
(the feed-forward of Stable Diffusion's transformer blocks).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 2
TAGS = ("gemm", "epilogue", "geglu", "gelu", "fp32", "compute-bound")
DTYPE = torch.float32
M, K, N = 1024, 2048, 4096  # tokens, hidden, inner (the projection outputs 2 x N)
SMALL = {"M": 64, "K": 96, "N": 40}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, hidden, inner):
        super().__init__()
        self.proj = nn.Linear(hidden, 2 * inner, bias=True, dtype=DTYPE)

    def forward(self, x):
        value, gate = self.proj(x).chunk(2, dim=-1)
        return value * F.gelu(gate)


def get_inputs():
    return [torch.randn(M, K, dtype=DTYPE)]


def get_init_inputs():
    return [K, N]
