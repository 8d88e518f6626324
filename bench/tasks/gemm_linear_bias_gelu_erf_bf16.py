"""Linear + bias + exact (erf) GELU, bf16: BERT-large's intermediate layer.

8192 tokens x 1024 hidden -> 4096, bias, then GELU in its erf form (BERT's, and
PyTorch's default): an epilogue cuBLASLt cannot apply (its GELU is the tanh form).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 2
TAGS = ("gemm", "epilogue", "gelu", "bf16", "compute-bound")
DTYPE = torch.bfloat16
M, K, N = 8192, 1024, 4096  # tokens, hidden, intermediate
SMALL = {"M": 64, "K": 96, "N": 80}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True, dtype=DTYPE)

    def forward(self, x):
        return F.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(M, K, dtype=DTYPE)]


def get_init_inputs():
    return [K, N]
