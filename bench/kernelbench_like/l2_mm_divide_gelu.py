import torch
import torch.nn as nn


BATCH = 1024
FEATURES = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(FEATURES, FEATURES)

    def forward(self, x):
        x = self.linear(x)
        x = x / 10.0
        return torch.nn.functional.gelu(x)


def get_inputs():
    return [torch.rand(BATCH, FEATURES)]


def get_init_inputs():
    return []
