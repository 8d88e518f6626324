import torch
import torch.nn as nn

ROWS = 512
WIDTH = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)

    def forward(self, x):
        return self.qkv(x)


def get_inputs():
    return [torch.randn(ROWS, WIDTH)]


def get_init_inputs():
    return []
