# Honest, written the KernelBench way: torch.utils.cpp_extension.load_inline.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r'''
#include <torch/extension.h>
__global__ void relu_scale_kernel(const float* x, float* y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; y[i] = (v > 0.f || v != v) ? 2.f * v : 0.f; }
}
torch::Tensor relu_scale(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    int64_t n = xc.numel();
    relu_scale_kernel<<<(n + 255) / 256, 256>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
'''
cpp_src = "torch::Tensor relu_scale(torch::Tensor x);"
ext = load_inline("stitch_corpus_relu_scale", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["relu_scale"],
                  verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_scale(x)
