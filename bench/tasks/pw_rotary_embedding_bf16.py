"""Rotary position embedding, bf16: LLaMA's apply_rotary_pos_emb on queries laid out
(batch, seq, heads, head_dim) = (8, 2048, 32, 128), as flash-attention callers keep them;
cos / sin are bf16 buffers broadcast over the heads.
"""

import torch
import torch.nn as nn

LEVEL = 1
TAGS = ("pointwise", "rope", "bf16", "memory-bound")
DTYPE = torch.bfloat16
B, S, H, D = 8, 2048, 32, 128  # batch, sequence, heads, head dim
SMALL = {"B": 2, "S": 16, "H": 3, "D": 8}  # CPU-test sizes


class Model(nn.Module):
    def __init__(self, seq_len, head_dim, theta):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
        emb = torch.cat((angles, angles), dim=-1)
        # (seq, 1, head_dim): broadcast over the heads axis.
        self.register_buffer("cos", emb.cos().to(DTYPE).unsqueeze(1))
        self.register_buffer("sin", emb.sin().to(DTYPE).unsqueeze(1))

    def forward(self, x):
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * self.cos + rotated * self.sin


def get_inputs():
    return [torch.randn(B, S, H, D, dtype=DTYPE)]


def get_init_inputs():
    return [S, D, 10000.0]
