# Wrong only for large inputs: the GEMM's result is clamped to +-100 before the epilogue (a kernel that
# saturates). Exact on random inputs, far from the float64 answer on the adversarial-large trial.
import numpy as np
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        w = self.linear.weight.detach().numpy().astype(np.float64)
        b = self.linear.bias.detach().numpy().astype(np.float64)
        y = np.clip(np.dot(x.numpy().astype(np.float64), w.T) + b, -100.0, 100.0)
        with np.errstate(invalid="ignore"):
            return torch.from_numpy(np.sin(y * 10.0).astype(np.float32))
