import torch
import torch.nn as nn
import torch.nn.functional as F

ROWS = 512
WIDTH = 256


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(WIDTH, 4 * WIDTH)

    def forward(self, x):
        return F.gelu(self.fc(x))


def get_inputs():
    return [torch.randn(ROWS, WIDTH)]


def get_init_inputs():
    return []
