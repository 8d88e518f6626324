# Honest: ReLU with a grid-stride loop and 64-bit indices (inputs of any size).
import torch
import torch.nn as nn

from stitch_lsp.runtime.loader import load_kernel

SOURCE = r'''
extern "C" __global__ void relu(const float* __restrict__ x, float* __restrict__ y, long long n) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = x[i];
        y[i] = (v > 0.f || v != v) ? v : 0.f;
    }
}
'''


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = load_kernel(SOURCE, "relu", filename="candidate.py", first_line=7)

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        blocks = max(1, min((n + 255) // 256, 132 * 16))
        self.kernel(grid=(blocks,), block=(256,), args=[x, y, n])
        return y
