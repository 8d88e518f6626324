"""Sum of squares over the last dimension, bf16 in, fp32 out: the statistic an RMSNorm
or a gradient-norm clip computes, over (8192, 8192), upcast and accumulated in fp32.
(The output sits near 8192 with a spread of about 128: fp32 tolerances tell a kernel
that ignores its input from one that does not.)
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
        return (h * h).sum(dim=-1)


def get_inputs():
    return [torch.randn(M, N, dtype=DTYPE)]


def get_init_inputs():
    return []
