"""Cross-entropy forward, bf16 logits, per token: the LM loss of 8192 tokens over a
32000-token vocabulary (reduction="none"; the loss comes back in bf16).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

LEVEL = 2
TAGS = ("reduction", "cross-entropy", "logsumexp", "row-reduction", "bf16", "memory-bound")
DTYPE = torch.bfloat16
M, V = 8192, 32000  # tokens, vocabulary
SMALL = {"M": 64, "V": 200}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        return F.cross_entropy(logits, targets, reduction="none")


def get_inputs():
    return [torch.randn(M, V, dtype=DTYPE), torch.randint(0, V, (M,), dtype=torch.int64)]


def get_init_inputs():
    return []
