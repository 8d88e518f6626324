# Crash stand-in: the process aborts, as a faulting kernel would.
import numpy as np
import torch
import torch.nn as nn


def relu_scale(a):
    return np.where(np.isnan(a), a, np.maximum(a, 0)) * 2.0


import os


class ModelNew(nn.Module):
    def forward(self, x):
        os.abort()
