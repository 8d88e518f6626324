// A kernel file with planted problems, for trying `stitch check` and the editor.
// Expected findings: STC001 (twice), STC002, STC003, STC004, STC005, STC006,
// STC008, STC009, STC010, STC015, STC016.
#include <cuda_runtime.h>

// STC001: no bounds check on the write; STC015: 0.5 is a double.
__global__ void scale(const float* __restrict__ x, float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  y[i] = x[i] * 0.5;
}

// STC001: the write to y[i] comes before any check of i.
// STC002: only threads with i < n reach the first barrier; the others meet the second.
// STC003: reads a neighbour's shared slot before anyone waited.
__global__ void shift(const float* __restrict__ x, float* __restrict__ y, int n) {
  __shared__ float tile[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = x[i];
  y[i] = tile[(threadIdx.x + 1) % 256];
  if (i < n) {
    __syncthreads();
  }
  __syncthreads();
}

// STC005: one thread per row, so a warp reads 32 rows at once (uncoalesced).
// STC006: every iteration of every thread adds into the same address.
// STC008: `x` is only read but is not const.
__global__ void row_sums(float* x, float* total, int rows, int cols) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  for (int c = 0; c < cols; ++c) {
    atomicAdd(total, x[r * cols + c]);
  }
}

// STC010: shared-memory tree reduction down to one value with a barrier per step.
__global__ void block_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
  __shared__ float s[256];
  int tid = threadIdx.x;
  int i = blockIdx.x * blockDim.x + tid;
  s[tid] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (tid < stride) s[tid] += s[tid + stride];
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = s[0];
}

void run(const float* x, float* y, float* total, float* x_mut, int n) {
  shift<<<n / 256, 256>>>(x, y, n);          // STC016: grid rounds down
  cudaGetLastError();
  row_sums<<<(n + 99) / 100, 100>>>(x_mut, total, n, n);  // STC004: 100 threads
  cudaGetLastError();
  block_sum<<<(n + 255) / 256, 256>>>(x, y, n);
  cudaGetLastError();
  scale<<<(n + 255) / 256, 256>>>(x, y, n);  // STC009: never checked, here or in main
}

int main() {
  float *x = nullptr, *y = nullptr, *total = nullptr;
  run(x, y, total, y, 1 << 20);
  return 0;
}
