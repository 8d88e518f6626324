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


CLUSTER16 = r'''
extern "C" __global__ void __cluster_dims__(16, 1, 1) rank_of(int* out) {
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  if (threadIdx.x == 0) out[blockIdx.x] = (int)rank;
}
'''
HELD = r'''
extern "C" __global__ void reverse_in_shared(const float* __restrict__ x, float* __restrict__ y) {
  extern __shared__ float held[];
  for (int i = threadIdx.x; i < 40000; i += blockDim.x) held[i] = x[blockIdx.x * 40000 + i];
  __syncthreads();
  for (int i = threadIdx.x; i < 40000; i += blockDim.x) y[blockIdx.x * 40000 + i] = held[39999 - i];
}
'''


def test_a_cluster_of_sixteen_blocks_launches():
    """Clusters of more than 8 blocks (Hopper's non-portable sizes) need the kernel's permission, which the loader
    gives where the source asks for one."""
    import torch

    from stitch_lsp.runtime.loader import load_kernel

    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("clusters need sm_90")
    kernel = load_kernel(CLUSTER16, "rank_of")
    out = torch.full((64,), -1, dtype=torch.int32, device="cuda")
    kernel((64, 1, 1), (32, 1, 1), [out])
    torch.cuda.synchronize()
    assert out.tolist() == [i % 16 for i in range(64)]


def test_dynamic_shared_memory_over_48_kb_in_both_launch_paths():
    import torch

    from stitch_lsp.runtime.loader import load_kernel

    kernel = load_kernel(HELD, "reverse_in_shared")
    x = torch.randn(3, 40000, device="cuda")
    checked, fast = torch.empty_like(x), torch.empty_like(x)
    kernel((3, 1, 1), (256, 1, 1), [x, checked], shared_mem=160000)
    kernel.launch_pointers((3, 1, 1), (256, 1, 1), [x.data_ptr(), fast.data_ptr()], 160000)
    torch.cuda.synchronize()
    assert torch.equal(checked, x.flip(1)) and torch.equal(fast, x.flip(1))
