# Honest CPU stand-in: computes with numpy (outside PyTorch), as a kernel would.
import numpy as np
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        a = x.numpy()
        res = np.where(np.isnan(a), a, np.maximum(a, 0)) * 2.0
        out.copy_(torch.from_numpy(res.astype(a.dtype)))
        return out
