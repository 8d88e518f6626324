"""Scaled, causally masked softmax, fp32: the attention-probability step of a GPT-2
style block (scores * scale, masked_fill above the diagonal with -inf, softmax),
batch 4 x 16 heads x 1024 x 1024. Scores have unit variance; scale 2.0 sharpens them
to the peakedness of trained attention.
"""

import torch
import torch.nn as nn

LEVEL = 2
TAGS = ("reduction", "softmax", "causal-mask", "row-reduction", "fp32", "memory-bound")
DTYPE = torch.float32
B, H, S = 4, 16, 1024  # batch, heads, sequence
SMALL = {"B": 2, "H": 3, "S": 16}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, seq_len, scale):
        super().__init__()
        self.register_buffer("causal", torch.ones(seq_len, seq_len, dtype=torch.bool).tril())
        self.scale = scale

    def forward(self, scores):
        scores = (scores * self.scale).masked_fill(~self.causal, float("-inf"))
        return torch.softmax(scores, dim=-1)


def get_inputs():
    return [torch.randn(B, H, S, S, dtype=DTYPE)]


def get_init_inputs():
    return [S, 2.0]
