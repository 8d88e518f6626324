import torch
import torch.nn as nn
import torch.nn.functional as F


BATCH = 1024
FEATURES = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.matmul = nn.Linear(FEATURES, FEATURES)

    def forward(self, x):
        x = self.matmul(x)
        x = x * 2.0
        x = x + x
        x = torch.clamp(x, -10.0, 10.0)
        x = torch.logsumexp(x, dim=1, keepdim=True)
        return x * F.mish(x)


def get_inputs():
    return [torch.rand(BATCH, FEATURES)]


def get_init_inputs():
    return []
