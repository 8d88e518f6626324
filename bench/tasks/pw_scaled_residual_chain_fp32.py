"""Scaled residual chain, fp32: x + gamma1 * attn_out + gamma2 * mlp_out with
per-channel LayerScale vectors (CaiT / DINOv2 blocks), 8192 tokens x 4096.
"""

import torch
import torch.nn as nn

LEVEL = 1
TAGS = ("pointwise", "residual", "layerscale", "fp32", "memory-bound")
DTYPE = torch.float32
M, N = 8192, 4096  # tokens, hidden
SMALL = {"M": 64, "N": 80}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.gamma1 = nn.Parameter(0.1 + 0.05 * torch.randn(hidden, dtype=DTYPE))
        self.gamma2 = nn.Parameter(0.1 + 0.05 * torch.randn(hidden, dtype=DTYPE))

    def forward(self, x, attn_out, mlp_out):
        h = x + self.gamma1 * attn_out
        return h + self.gamma2 * mlp_out


def get_inputs():
    return [torch.randn(M, N, dtype=DTYPE) for _ in range(3)]


def get_init_inputs():
    return [N]
