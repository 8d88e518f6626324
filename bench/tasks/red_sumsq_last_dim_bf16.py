"""Scaled sum of squares over the last dimension, bf16 in, fp32 out: the statistic an
RMSNorm or a gradient-norm clip computes, over (8192, 8192), accumulated in fp32.
Centred by the row length (the expectation for unit-variance input) so that the
output is not a near-constant 8192 that a loose relative tolerance would accept.
"""

import torch
import torch.nn as nn

LEVEL = 1
TAGS = ("reduction", "last-dim", "row-reduction", "sum", "bf16", "memory-bound")
DTYPE = torch.bfloat16
M, N = 8192, 8192  # rows, row length
SMALL = {"M": 64, "N": 80}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        h = x.to(torch.float32)
        return (h * h).sum(dim=-1) - h.shape[-1]


def get_inputs():
    return [torch.randn(M, N, dtype=DTYPE)]


def get_init_inputs():
    return []
