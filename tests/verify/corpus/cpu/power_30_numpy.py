# Honest: the same power, computed outside PyTorch.
import numpy as np
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        a = x.numpy()
        with np.errstate(over="ignore", invalid="ignore"):
            out = (a.astype(np.float32) ** np.float32(30)) * np.float32(1e-10)
        return torch.from_numpy(out.astype(np.float32))
