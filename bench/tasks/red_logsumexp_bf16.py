"""Temperature-scaled logsumexp, bf16 in, bf16 out: logsumexp(logits / T, -1) over a
16384-wide row for 8192 rows (MoE router / retrieval scores).
"""

import torch
import torch.nn as nn

LEVEL = 1
TAGS = ("reduction", "logsumexp", "row-reduction", "bf16", "memory-bound")
DTYPE = torch.bfloat16
M, V = 8192, 16384  # rows, row width
SMALL = {"M": 64, "V": 200}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, logits):
        return torch.logsumexp(logits / self.temperature, dim=-1)


def get_inputs():
    return [torch.randn(M, V, dtype=DTYPE)]


def get_init_inputs():
    return [0.25]
