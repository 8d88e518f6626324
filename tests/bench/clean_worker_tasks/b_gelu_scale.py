# An ordinary task after the one that ran out of memory.
import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 1
TAGS = ("test",)
DTYPE = "float32"

batch_size = 256
dim = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x) * 2.0


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
