# Level-1 shaped: LayerNorm over the last 393216 features of a 4096-row float32 input,
# with random (not unit) weight and bias so that copying them matters.
import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4096
features = 393216


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(features))
        self.bias = nn.Parameter(0.1 * torch.randn(features))

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, 1e-5)


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
