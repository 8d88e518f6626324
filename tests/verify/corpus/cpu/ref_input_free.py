import torch
import torch.nn as nn

batch_size = 16
in_features = 64
out_features = 32


class Model(nn.Module):
    """The output never reads x (as a class token that never attends to the image): only the weights."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.token = nn.Parameter(torch.randn(1, in_features))
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(self.token.expand(x.shape[0], -1)))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
