"""Linear + bias + ReLU, fp32: a classic MLP layer (recommendation / vision heads).

4096 rows x 1024 features -> 4096, bias, ReLU; fp32 accuracy required.
"""

import torch
import torch.nn as nn

LEVEL = 2
TAGS = ("gemm", "epilogue", "relu", "fp32", "compute-bound")
DTYPE = torch.float32
M, K, N = 4096, 1024, 4096  # rows, in features, out features
SMALL = {"M": 64, "K": 96, "N": 80}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True, dtype=DTYPE)

    def forward(self, x):
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(M, K, dtype=DTYPE)]


def get_init_inputs():
    return [K, N]
