import torch
import torch.nn as nn
import torch.nn.functional as F


BATCH = 1024
FEATURES = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear1 = nn.Linear(FEATURES, FEATURES)

    def forward(self, x):
        x = self.linear1(x)
        x = torch.sigmoid(x)
        return torch.logsumexp(x, dim=1)


def get_inputs():
    return [torch.rand(BATCH, FEATURES)]


def get_init_inputs():
    return []
