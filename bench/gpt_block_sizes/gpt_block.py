import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 2
TOKENS = 256
WIDTH = 256
HEADS = 4


class Model(nn.Module):
    """A pre-LayerNorm transformer block: causal self-attention, then a GELU MLP, each around a residual."""

    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.out = nn.Linear(WIDTH, WIDTH)
        self.norm2 = nn.LayerNorm(WIDTH)
        self.up = nn.Linear(WIDTH, 4 * WIDTH)
        self.down = nn.Linear(4 * WIDTH, WIDTH)

    def attend(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).contiguous().view(b, t, c))

    def forward(self, x):
        x = x + self.attend(self.norm1(x))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


def get_inputs():
    return [torch.randn(BATCH, TOKENS, WIDTH)]


def get_init_inputs():
    return []
