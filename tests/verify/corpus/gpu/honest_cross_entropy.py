# Honest: cross-entropy per row through log_softmax and gather (declared as left in PyTorch).
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def forward(self, logits, targets):
        return -torch.log_softmax(logits, dim=1).gather(1, targets[:, None])[:, 0]
