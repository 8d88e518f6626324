"""Sum over a middle dimension, fp32: sum-pooling over the sequence axis of
(batch, seq, hidden) = (32, 2048, 1024) activations, giving (32, 1024).
"""

import torch
import torch.nn as nn

LEVEL = 1
TAGS = ("reduction", "middle-dim", "sum", "fp32", "memory-bound")
DTYPE = torch.float32
B, S, N = 32, 2048, 1024  # batch, sequence, hidden
SMALL = {"B": 2, "S": 16, "N": 24}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.sum(x, dim=self.dim)


def get_inputs():
    return [torch.randn(B, S, N, dtype=DTYPE)]


def get_init_inputs():
    return [1]
