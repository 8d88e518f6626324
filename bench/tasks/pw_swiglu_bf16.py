"""SwiGLU activation, bf16: silu(gate) * up on the outputs of LLaMA's gate and up
projections (8192 tokens x 11008).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 1
TAGS = ("pointwise", "swiglu", "silu", "bf16", "memory-bound")
DTYPE = torch.bfloat16
M, N = 8192, 11008  # tokens, intermediate
SMALL = {"M": 64, "N": 80}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, gate, up):
        return F.silu(gate) * up


def get_inputs():
    return [torch.randn(M, N, dtype=DTYPE), torch.randn(M, N, dtype=DTYPE)]


def get_init_inputs():
    return []
