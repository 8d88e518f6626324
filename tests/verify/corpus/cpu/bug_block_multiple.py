# Bug: processes whole blocks of 256 columns only (wrong for other sizes).
import numpy as np
import torch
import torch.nn as nn


def relu_scale(a):
    return np.where(np.isnan(a), a, np.maximum(a, 0)) * 2.0


class ModelNew(nn.Module):
    def forward(self, x):
        a = x.numpy()
        out = np.full(a.shape, np.nan, dtype=np.float32)
        cols = (a.shape[1] // 256) * 256
        out[:, :cols] = relu_scale(a[:, :cols])
        return torch.from_numpy(out)
