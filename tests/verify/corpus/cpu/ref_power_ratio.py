import torch
import torch.nn as nn

batch_size = 16
dim = 16

class Model(nn.Module):
    # In float32, x ** 9 overflows for |x| > 1.9e4, so with large inputs the reference is NaN (inf / inf)
    # where an exact run is finite.
    def forward(self, x):
        y = x.pow(9)
        return y / (1.0 + y.abs())

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return []
