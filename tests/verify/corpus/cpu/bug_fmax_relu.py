# Bug: fmax(x, 0) as ReLU swallows NaN.
import numpy as np
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        a = x.numpy()
        out.copy_(torch.from_numpy((np.fmax(a, 0) * 2.0).astype(a.dtype)))
        return out
