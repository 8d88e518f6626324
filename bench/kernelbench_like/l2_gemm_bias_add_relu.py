import torch
import torch.nn as nn


BATCH = 1024
FEATURES = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gemm = nn.Linear(FEATURES, FEATURES, bias=False)
        self.bias = nn.Parameter(torch.randn(FEATURES))

    def forward(self, x):
        x = self.gemm(x)
        x = x + self.bias
        return torch.relu(x)


def get_inputs():
    return [torch.rand(BATCH, FEATURES)]


def get_init_inputs():
    return []
