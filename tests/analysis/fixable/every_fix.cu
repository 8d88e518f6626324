// One instance of every static rule that offers a quick fix, in a file nvcc compiles
// as it is. Each fix, applied on its own, must leave a file nvcc still compiles
// (tests/analysis/test_quick_fixes_compile.py).
#include <cuda_runtime.h>
#include <cstdint>

#define TILE 32

// STC001: the store gets the kernel's own check, 1-D and 2-D.
__global__ void fill(float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  y[i] = 1.0f;
}

__global__ void clear_image(float* __restrict__ img, int width, int height) {
  int x = blockIdx.x * blockDim.x + threadIdx.x;
  int y = blockIdx.y * blockDim.y + threadIdx.y;
  img[y * width + x] = 0.0f;
}

// STC007: 32-bit indices over 64-bit sizes.
__global__ void copy_big(const float* __restrict__ x, float* __restrict__ y, size_t n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i];
}

__global__ void copy_big_loop(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i];
}

__global__ void copy_wide(const float* __restrict__ x, float* __restrict__ y, size_t n) {
  size_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i];
}

// STC008: a read-only pointer without const / __restrict__.
__global__ void scale(float* x, float* __restrict__ y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i];
}

// STC015: a double literal in float code.
__global__ void halve(const float* __restrict__ x, float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * 0.5;
}

// STC018: a warp walks down a column of an unpadded tile.
__global__ void transpose(const float* __restrict__ in, float* __restrict__ out, int n) {
  __shared__ float tile[TILE][TILE];
  int x = blockIdx.x * TILE + threadIdx.x;
  int y = blockIdx.y * TILE + threadIdx.y;
  if (x < n && y < n) tile[threadIdx.y][threadIdx.x] = in[y * n + x];
  __syncthreads();
  x = blockIdx.y * TILE + threadIdx.x;
  y = blockIdx.x * TILE + threadIdx.y;
  if (x < n && y < n) out[y * n + x] = tile[threadIdx.x][threadIdx.y];
}

// STC019: a check that lets the index reach the size.
__global__ void shift(const float* __restrict__ x, float* __restrict__ y, int len) {
  int id = blockIdx.x * blockDim.x + threadIdx.x;
  if (id > len) return;
  y[id] = x[id];
}

// STC020: a read outside the kernel's own check.
__global__ void total(const float* __restrict__ x, float* __restrict__ out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(out, x[i]);
  if (i < n) out[1] = 0.0f;
}

// STC009, STC014 and STC016: the host side.
__global__ void big_block(float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f;
}

int main() {
  int n = 1 << 20;
  float* y = nullptr;
  cudaMalloc(&y, n * sizeof(float));
  fill<<<n / 256, 256>>>(y, n);
  big_block<<<n / 1024, 1024>>>(y, n);
  cudaFree(y);
  return 0;
}
