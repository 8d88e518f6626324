# Hang: the kernel never ends.
import torch
import torch.nn as nn

from stitch_lsp.runtime.loader import load_kernel

SOURCE = r'''
extern "C" __global__ void relu_scale(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    // clock64() is volatile: the compiler cannot drop the loop (a volatile local it could, and did).
    if (n > 0) { long long t0 = clock64(); while (clock64() - t0 >= 0) { } }
    if (i < n) {
        float v = x[i];
        y[i] = (v > 0.f || v != v) ? 2.f * v : 0.f;
    }
}
'''


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = load_kernel(SOURCE, "relu_scale", filename="candidate.py", first_line=7)

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        self.kernel(grid=((n + 255) // 256,), block=(256,), args=[x, y, n])
        return y
