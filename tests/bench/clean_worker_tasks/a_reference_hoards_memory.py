# Its first real forward takes every free byte of the GPU, in a module global, until an
# allocation fails: an out-of-memory that no plan made from the shapes could foresee.
import torch
import torch.nn as nn

LEVEL = 1
TAGS = ("test",)
DTYPE = "float32"

batch_size = 256
dim = 4096
_HOARD = []


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        if x.is_cuda:
            while True:
                _HOARD.append(torch.empty(1 << 28, dtype=torch.float32, device=x.device))
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
