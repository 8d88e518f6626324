# One TF32 pass: both operands rounded to 10 mantissa bits before the product (float64 after that), as
# a tensor-core GEMM without the split does. Not float32 accuracy: it must fail at float32's tolerance.
import numpy as np
import torch
import torch.nn as nn


def tf32(a):
    bits = a.astype(np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)  # nearest, 13 low bits dropped
    return np.where(np.isfinite(a), rounded.view(np.float32), a).astype(np.float64)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        w = tf32(self.linear.weight.detach().numpy())
        b = self.linear.bias.detach().numpy().astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            y = np.dot(tf32(x.numpy()), w.T) + b
            return torch.from_numpy(np.sin(y * 10.0).astype(np.float32))
