# Hang stand-in: never returns.
import numpy as np
import torch
import torch.nn as nn


def relu_scale(a):
    return np.where(np.isnan(a), a, np.maximum(a, 0)) * 2.0


import time


class ModelNew(nn.Module):
    def forward(self, x):
        while True:
            time.sleep(1)
