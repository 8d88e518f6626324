"""The loader's pointer-only launch, the hot path of every fused module, on a GPU."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

ADD = r'''
extern "C" __global__ void add_one(const float* __restrict__ x, float* __restrict__ y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < 1000) y[i] = x[i] + 1.f;
}
'''
SCALE = r'''
extern "C" __global__ void scale(const float* x, float* y, float a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < 1000) y[i] = a * x[i];
}
'''


def test_launch_pointers_gives_what_the_checked_call_gives():
    import torch

    from stitch_lsp.runtime.loader import load_kernel

    kernel = load_kernel(ADD, "add_one")
    x = torch.randn(1000, device="cuda")
    checked, fast = torch.empty_like(x), torch.empty_like(x)
    kernel((4, 1, 1), (256, 1, 1), [x, checked])
    kernel.launch_pointers((4, 1, 1), (256, 1, 1), [x.data_ptr(), fast.data_ptr()])
    torch.cuda.synchronize()
    assert torch.equal(checked, x + 1) and torch.equal(fast, x + 1)
    with pytest.raises(TypeError, match="takes 2 arguments"):
        kernel.launch_pointers((4, 1, 1), (256, 1, 1), [x.data_ptr()])


def test_launch_pointers_refuses_a_kernel_with_scalar_parameters():
    import torch

    from stitch_lsp.runtime.loader import load_kernel

    kernel = load_kernel(SCALE, "scale")
    x = torch.randn(1000, device="cuda")
    with pytest.raises(TypeError, match="all pointers"):
        kernel.launch_pointers((4, 1, 1), (256, 1, 1), [x.data_ptr(), x.data_ptr(), 0])
