import torch
import torch.nn as nn

batch_size = 16
dim = 64

class Model(nn.Module):
    # In float32, x ** 30 overflows for |x| > 19: with large inputs nearly every value is inf.
    def forward(self, x):
        return x.pow(30) * 1e-10

def get_inputs():
    return [torch.randn(batch_size, dim)]

def get_init_inputs():
    return []
