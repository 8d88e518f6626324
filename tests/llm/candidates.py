"""Model replies used by the tests: candidates in the reply format, good and bad."""

from __future__ import annotations

GOOD_CUDA = r'''// relu(x) * scale, one grid-stride pass.


extern "C" __global__ void relu_scale_kernel(const float* __restrict__ x, float* __restrict__ out,
                                             float scale, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float v = x[i];
        out[i] = (v != v ? v : fmaxf(v, 0.0f)) * scale;  // NaN stays NaN, as in torch.relu
    }
}
'''

# Round-1 mistake: a missing semicolon at line 8 (1-based) of the kernel.
BROKEN_CUDA = GOOD_CUDA.replace("float v = x[i];", "float v = x[i]")

# Round-1 mistake that compiles: the scale is applied twice.
WRONG_CUDA = GOOD_CUDA.replace("* scale;", "* scale * scale;")

MODULE = '''from pathlib import Path

import torch
import torch.nn as nn

from stitch_lsp.runtime.loader import load_kernel

_SOURCE = Path(__file__).with_name("kernel.cu").read_text()
_relu_scale = load_kernel(_SOURCE, "relu_scale_kernel", filename="kernel.cu")


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        blocks = max(1, min((n + 255) // 256, 132 * 16))
        _relu_scale(grid=(blocks,), block=(256,), args=[x, out, float(self.scale), n])
        return out
'''

# Computes with PyTorch and only pretends to use the kernel.
HACKING_MODULE = MODULE.replace(
    "        _relu_scale(grid=(blocks,), block=(256,), args=[x, out, float(self.scale), n])\n        return out\n",
    "        return torch.relu(x) * self.scale\n",
)
assert HACKING_MODULE != MODULE


def reply(cuda: str = GOOD_CUDA, module: str = MODULE, plan: str = "One grid-stride pointwise kernel.") -> str:
    return f"{plan}\n\n```cuda\n{cuda}```\n\n```python\n{module}```\n"

# Computes with PyTorch through a name the static checks cannot see: only the dynamic checks catch it.
SNEAKY_MODULE = MODULE.replace(
    "        _relu_scale(grid=(blocks,), block=(256,), args=[x, out, float(self.scale), n])\n        return out\n",
    "        fn = getattr(torch, \"re\" + \"lu\")\n        return fn(x) * self.scale\n",
)
assert SNEAKY_MODULE != MODULE
