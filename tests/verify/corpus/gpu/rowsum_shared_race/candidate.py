from pathlib import Path

import torch
import torch.nn as nn

from stitch_lsp.runtime.loader import load_kernel

CU = Path(__file__).with_name("rowsum.cu")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = load_kernel(CU.read_text(), "rowsum", filename=CU.name)

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty(rows, device=x.device, dtype=x.dtype)
        self.kernel(grid=(rows,), block=(256,), args=[x, y, rows, cols])
        return y
