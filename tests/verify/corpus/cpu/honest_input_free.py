# Honest: reads the weights on every call; numpy does the work.
import numpy as np
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.token = nn.Parameter(torch.randn(1, in_features))
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        w = self.linear.weight.detach().numpy().astype(np.float64)
        b = self.linear.bias.detach().numpy().astype(np.float64)
        t = self.token.detach().numpy().astype(np.float64)
        y = np.maximum(np.dot(t, w.T) + b, 0)
        return torch.from_numpy(np.repeat(y, x.shape[0], axis=0).astype(np.float32))
