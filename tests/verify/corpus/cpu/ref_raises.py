import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        raise ValueError("this reference is broken")


def get_inputs():
    return [torch.randn(16, 1024)]


def get_init_inputs():
    return []
