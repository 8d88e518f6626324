import math
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x / torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + 1e-5)


SHAPE = (112, 64, 512, 512)


def get_inputs():
    return [torch.rand(*SHAPE)]


def get_init_inputs():
    return []
