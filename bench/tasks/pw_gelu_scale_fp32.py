"""GELU then scale, fp32: an activation followed by a constant multiplier
(e.g. a scaled activation before a residual), 8192 tokens x 4096 hidden.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 1
TAGS = ("pointwise", "gelu", "fp32", "memory-bound")
DTYPE = torch.float32
M, N = 8192, 4096  # tokens, hidden
SMALL = {"M": 64, "N": 80}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return F.gelu(x) * self.scale


def get_inputs():
    return [torch.randn(M, N, dtype=DTYPE)]


def get_init_inputs():
    return [2.0]
