# Honest: weights live in parameters of the same names as the reference's; numpy does the work.
import numpy as np
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)  # only for its parameters

    def forward(self, x):
        w = self.linear.weight.detach().numpy().astype(np.float64)
        b = self.linear.bias.detach().numpy().astype(np.float64)
        y = np.dot(x.numpy().astype(np.float64), w.T) + b
        return torch.from_numpy(np.maximum(y, 0).astype(np.float32))
