"""GEGLU activation, fp32: split a 2 x inner projection into value and gate,
value * GELU(gate) (Stable Diffusion feed-forward), 8192 tokens x 2 x 4096.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 1
TAGS = ("pointwise", "geglu", "gelu", "fp32", "memory-bound")
DTYPE = torch.float32
M, N = 8192, 4096  # tokens, inner (the input holds 2 x N per row)
SMALL = {"M": 64, "N": 40}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, h):
        value, gate = h.chunk(2, dim=-1)
        return value * F.gelu(gate)


def get_inputs():
    return [torch.randn(M, 2 * N, dtype=DTYPE)]


def get_init_inputs():
    return []
