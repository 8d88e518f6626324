import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.nn.functional.hardtanh(x, min_val=-1.0, max_val=1.0)


SHAPE = (4096, 393216)


def get_inputs():
    return [torch.rand(*SHAPE)]


def get_init_inputs():
    return []
