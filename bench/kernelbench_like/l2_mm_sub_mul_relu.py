import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8192, 8192)

    def forward(self, x):
        x = self.linear(x)
        x = x - 2.0
        x = x * 1.5
        return torch.relu(x)


def get_inputs():
    return [torch.rand(1024, 8192)]


def get_init_inputs():
    return []
