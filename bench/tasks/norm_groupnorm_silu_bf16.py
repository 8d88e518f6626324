"""GroupNorm + SiLU, bf16: a diffusion UNet ResNet block's GroupNorm(32, 640) + SiLU,
16 x 640 channels x 64 x 64.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 2
TAGS = ("norm", "groupnorm", "silu", "bf16", "memory-bound")
DTYPE = torch.bfloat16
B, C, H, W = 16, 640, 64, 64  # batch, channels, height, width
GROUPS = 32
SMALL = {"B": 2, "C": 8, "H": 6, "W": 10, "GROUPS": 4}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, groups, channels):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels, eps=1e-5, dtype=DTYPE)
        with torch.no_grad():  # trained-looking affine parameters, not the identity
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(channels))
            self.norm.bias.copy_(0.1 * torch.randn(channels))

    def forward(self, x):
        return F.silu(self.norm(x))


def get_inputs():
    return [torch.randn(B, C, H, W, dtype=DTYPE)]


def get_init_inputs():
    return [GROUPS, C]
