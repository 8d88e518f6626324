"""A long activation chain, bf16: HardSwish -> Mish -> Softplus -> ELU with a
residual of the input, on a conv-shaped activation (32 x 128 x 64 x 64).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 1
TAGS = ("pointwise", "activation-zoo", "mish", "elu", "softplus", "hardswish", "bf16", "memory-bound")
DTYPE = torch.bfloat16
B, C, H, W = 32, 128, 64, 64  # batch, channels, height, width
SMALL = {"B": 2, "C": 4, "H": 6, "W": 10}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = F.hardswish(x * 2.0)
        y = F.mish(y)
        y = F.softplus(y) - 1.0
        return F.elu(y) + x


def get_inputs():
    return [torch.randn(B, C, H, W, dtype=DTYPE)]


def get_init_inputs():
    return []
