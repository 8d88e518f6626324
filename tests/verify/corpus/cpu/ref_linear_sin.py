import torch
import torch.nn as nn

batch_size = 32
in_features = 256
out_features = 128


class Model(nn.Module):
    """A GEMM and an epilogue that makes its last bits visible when the inputs are large: sin of a value in
    the tens of thousands turns the float32 GEMM's rounding (a few 1e-3 there) into the output's error."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.sin(self.linear(x) * 10.0)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
