# A 96 GiB input: larger than any single GPU the Verifier runs on today.
import torch
import torch.nn as nn

batch_size = 65536
dim = 393216


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
