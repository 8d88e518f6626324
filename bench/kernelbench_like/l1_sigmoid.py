import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sigmoid(x)


SHAPE = (4096, 393216)


def get_inputs():
    return [torch.rand(*SHAPE)]


def get_init_inputs():
    return []
