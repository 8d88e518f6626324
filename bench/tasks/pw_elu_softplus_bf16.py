"""ELU, per-channel bias, then Softplus, bf16: a two-activation chain with a
broadcast bias (8192 rows x 8192 features).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 1
TAGS = ("pointwise", "activation-zoo", "elu", "softplus", "bias", "bf16", "memory-bound")
DTYPE = torch.bfloat16
M, N = 8192, 8192  # rows, features
SMALL = {"M": 64, "N": 80}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(0.5 * torch.randn(features, dtype=DTYPE))

    def forward(self, x):
        return F.softplus(F.elu(x, alpha=1.0) + self.bias)


def get_inputs():
    return [torch.randn(M, N, dtype=DTYPE)]


def get_init_inputs():
    return [N]
