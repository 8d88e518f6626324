"""Max over a middle dimension, bf16: max-pooling over the sequence axis of
(batch, seq, hidden) = (32, 2048, 2048) activations, giving (32, 2048).
"""

import torch
import torch.nn as nn

LEVEL = 1
TAGS = ("reduction", "middle-dim", "max", "bf16", "memory-bound")
DTYPE = torch.bfloat16
B, S, N = 32, 2048, 2048  # batch, sequence, hidden
SMALL = {"B": 2, "S": 16, "N": 24}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.amax(x, dim=self.dim)


def get_inputs():
    return [torch.randn(B, S, N, dtype=DTYPE)]


def get_init_inputs():
    return [1]
