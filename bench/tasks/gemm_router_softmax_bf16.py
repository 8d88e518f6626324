"""Mixture-of-experts router, bf16: token logits over 128 experts, log-softmax in fp32.

16384 tokens x 4096 hidden -> 128 experts (no bias), then the routing log-probabilities
as an fp32 log-softmax over the experts (what a router's auxiliary and z-losses read).
A GEMM with a row softmax over its whole output width.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 2
TAGS = ("gemm", "epilogue", "softmax", "bf16", "memory-bound")
DTYPE = torch.bfloat16
M, K, N = 16384, 4096, 128  # tokens, hidden, experts
SMALL = {"M": 64, "K": 96, "N": 40}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, hidden, experts):
        super().__init__()
        self.gate = nn.Linear(hidden, experts, bias=False, dtype=DTYPE)

    def forward(self, x):
        return F.log_softmax(self.gate(x), dim=-1, dtype=torch.float32)


def get_inputs():
    return [torch.randn(M, K, dtype=DTYPE)]


def get_init_inputs():
    return [K, N]
