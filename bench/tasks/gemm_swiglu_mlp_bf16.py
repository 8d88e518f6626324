"""SwiGLU MLP front half, bf16: LLaMA's silu(x @ W_gate^T) * (x @ W_up^T).

Two bias-free projections of the same input (hidden 4096 -> 11008) and the
gated product; the down-projection is left out.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 2
TAGS = ("gemm", "epilogue", "swiglu", "silu", "bf16", "compute-bound")
DTYPE = torch.bfloat16
M, K, N = 2048, 4096, 11008  # tokens, hidden, intermediate
SMALL = {"M": 64, "K": 96, "N": 80}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False, dtype=DTYPE)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False, dtype=DTYPE)

    def forward(self, x):
        return F.silu(self.gate_proj(x)) * self.up_proj(x)


def get_inputs():
    return [torch.randn(M, K, dtype=DTYPE)]


def get_init_inputs():
    return [K, N]
