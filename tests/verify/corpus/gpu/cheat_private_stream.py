# Cheat: a private stream made once, in __init__; forward launches on it and returns without
# joining it back, so the caller's stream (and a timer on it) never waits for the kernel.
import torch
import torch.nn as nn

from stitch_lsp.runtime.loader import load_kernel

SOURCE = r'''
extern "C" __global__ void relu_scale(const float* __restrict__ x, float* __restrict__ y, long long n) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = x[i];
        y[i] = (v > 0.f || v != v) ? 2.f * v : 0.f;
    }
}
'''


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = load_kernel(SOURCE, "relu_scale", filename="candidate.py", first_line=8)
        self.side = torch.cuda.Stream()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        self.side.wait_stream(torch.cuda.current_stream())  # waits for the inputs: a wait, but before the launch
        blocks = max(1, min((n + 255) // 256, 132 * 16))
        self.kernel(grid=(blocks,), block=(256,), args=[x, y, n], stream=self.side)
        return y
