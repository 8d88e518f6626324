# Honest: half the work on the caller's stream, half on a side stream, joined back with an
# event before forward returns (the caller's stream waits for both halves).
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
        half = n // 2
        caller = torch.cuda.current_stream()
        self.side.wait_stream(caller)
        blocks = max(1, min((half + 255) // 256, 132 * 8))
        self.kernel(grid=(blocks,), block=(256,), args=[x, y, half])
        self.kernel(grid=(blocks,), block=(256,), args=[x.view(-1)[half:], y.view(-1)[half:], n - half],
                    stream=self.side)
        x.record_stream(self.side)
        y.record_stream(self.side)
        done = torch.cuda.Event()
        done.record(self.side)
        caller.wait_event(done)
        return y
