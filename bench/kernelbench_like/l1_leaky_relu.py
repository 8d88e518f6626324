import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.nn.functional.leaky_relu(x, negative_slope=0.01)


SHAPE = (4096, 393216)


def get_inputs():
    return [torch.rand(*SHAPE)]


def get_init_inputs():
    return []
