"""Rotary position embedding, fp32: x * cos + rotate_half(x) * sin, LLaMA's
apply_rotary_pos_emb on queries laid out (batch, heads, seq, head_dim) = (4, 32, 2048, 128).
cos / sin are buffers computed once from the positions (theta = 10000).
"""

import torch
import torch.nn as nn

LEVEL = 1
TAGS = ("pointwise", "rope", "fp32", "memory-bound")
DTYPE = torch.float32
B, H, S, D = 4, 32, 2048, 128  # batch, heads, sequence, head dim
SMALL = {"B": 2, "H": 3, "S": 16, "D": 8}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, seq_len, head_dim, theta):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
        emb = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", emb.cos().to(DTYPE))
        self.register_buffer("sin", emb.sin().to(DTYPE))

    def forward(self, x):
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * self.cos + rotated * self.sin


def get_inputs():
    return [torch.randn(B, H, S, D, dtype=DTYPE)]


def get_init_inputs():
    return [S, D, 10000.0]
