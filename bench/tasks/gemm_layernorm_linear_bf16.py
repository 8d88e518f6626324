"""LayerNorm then Linear, bf16: the pre-norm attention input (LN -> QKV-style
projection) of a GPT / ViT block, 8192 tokens x 4096 hidden.
"""

import torch
import torch.nn as nn

LEVEL = 2
TAGS = ("gemm", "norm", "layernorm", "prologue", "bf16", "compute-bound")
DTYPE = torch.bfloat16
M, K, N = 8192, 4096, 4096  # tokens, hidden, out features
SMALL = {"M": 64, "K": 96, "N": 80}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, hidden, out_features):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=1e-5, dtype=DTYPE)
        self.linear = nn.Linear(hidden, out_features, bias=True, dtype=DTYPE)
        with torch.no_grad():  # trained-looking affine parameters, not the identity
            self.norm.weight.copy_(1.0 + 0.1 * torch.randn(hidden))
            self.norm.bias.copy_(0.1 * torch.randn(hidden))

    def forward(self, x):
        return self.linear(self.norm(x))


def get_inputs():
    return [torch.randn(M, K, dtype=DTYPE)]


def get_init_inputs():
    return [K, N]
