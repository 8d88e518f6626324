import torch
import torch.nn as nn


BATCH = 1024
FEATURES = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.matmul = nn.Linear(FEATURES, FEATURES)
        self.add_value = nn.Parameter(torch.randn(FEATURES) * 0.02)

    def forward(self, x):
        x = self.matmul(x)
        x = x + self.add_value
        x = torch.sigmoid(x) * x
        x = torch.tanh(x)
        x = torch.nn.functional.gelu(x)
        return torch.nn.functional.hardtanh(x, min_val=-1, max_val=1)


def get_inputs():
    return [torch.rand(BATCH, FEATURES)]


def get_init_inputs():
    return []
