"""Sum over the last dimension, fp32: a row reduction of an 8192 x 8192 matrix
(the reduction inside every norm and loss, on its own).
"""

import torch
import torch.nn as nn

LEVEL = 1
TAGS = ("reduction", "last-dim", "row-reduction", "sum", "fp32", "memory-bound")
DTYPE = torch.float32
M, N = 8192, 8192  # rows, row length
SMALL = {"M": 64, "N": 80}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sum(x, dim=-1)


def get_inputs():
    return [torch.randn(M, N, dtype=DTYPE)]


def get_init_inputs():
    return []
