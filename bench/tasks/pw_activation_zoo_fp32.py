"""A long activation chain, fp32: Mish -> ELU -> Softplus -> HardSwish with a scale
between steps; five or more eager kernels over one tensor (8192 x 4096), the case
where fusing into one pass pays most.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 1
TAGS = ("pointwise", "activation-zoo", "mish", "elu", "softplus", "hardswish", "fp32", "memory-bound")
DTYPE = torch.float32
M, N = 8192, 4096  # rows, features
SMALL = {"M": 64, "N": 80}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        y = F.mish(x)
        y = F.elu(y * self.scale, alpha=0.5)
        y = F.softplus(y, beta=2.0)
        return F.hardswish(y - 1.0)


def get_inputs():
    return [torch.randn(M, N, dtype=DTYPE)]


def get_init_inputs():
    return [2.0]
