"""Mish then HardSwish, then an affine, fp32: a chain of two activations as found in
mobile / YOLO-style conv stacks, on a conv-shaped activation (16 x 256 x 64 x 128).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 1
TAGS = ("pointwise", "activation-zoo", "mish", "hardswish", "fp32", "memory-bound")
DTYPE = torch.float32
B, C, H, W = 16, 256, 64, 128  # batch, channels, height, width
SMALL = {"B": 2, "C": 4, "H": 6, "W": 10}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, scale, shift):
        super().__init__()
        self.scale = scale
        self.shift = shift

    def forward(self, x):
        y = F.hardswish(F.mish(x))
        return y * self.scale + self.shift


def get_inputs():
    return [torch.randn(B, C, H, W, dtype=DTYPE)]


def get_init_inputs():
    return [1.5, -0.25]
