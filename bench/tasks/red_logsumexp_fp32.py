"""Temperature-scaled logsumexp over the vocabulary, fp32: logsumexp(logits / T, -1),
the normaliser of a sampler or a contrastive loss, 4096 rows x 32000.
"""

import torch
import torch.nn as nn

LEVEL = 1
TAGS = ("reduction", "logsumexp", "row-reduction", "fp32", "memory-bound")
DTYPE = torch.float32
M, V = 4096, 32000  # rows, vocabulary
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
