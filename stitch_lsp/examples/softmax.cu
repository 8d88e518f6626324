// Row softmax: y[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)).
// One block per row; each warp reduces with shuffles, warps combine through shared memory.
#include <cuda_runtime.h>
#include <cfloat>
#include <cstdio>

#define CUDA_CHECK(call)                                                              \
  do {                                                                                \
    cudaError_t err_ = (call);                                                        \
    if (err_ != cudaSuccess) {                                                        \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(err_));   \
      return err_;                                                                    \
    }                                                                                 \
  } while (0)

constexpr int kThreads = 256;
constexpr int kWarpSize = 32;
constexpr int kWarps = kThreads / kWarpSize;

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// Every thread gets the block-wide result. `scratch` holds one value per warp.
template <bool kIsMax>
__device__ float block_reduce(float v, float* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  v = kIsMax ? warp_max(v) : warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = lane < kWarps ? scratch[lane] : (kIsMax ? -FLT_MAX : 0.0f);
  total = kIsMax ? warp_max(total) : warp_sum(total);
  __syncthreads();  // scratch is reused by the next reduction
  return total;
}

__global__ void __launch_bounds__(kThreads)
softmax_rows(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  __shared__ float scratch[kWarps];
  const int row = blockIdx.x;
  if (row >= rows) return;  // the same for the whole block
  const float* xr = x + static_cast<size_t>(row) * cols;
  float* yr = y + static_cast<size_t>(row) * cols;

  float m = -FLT_MAX;
  for (int c = threadIdx.x; c < cols; c += kThreads) m = fmaxf(m, xr[c]);
  m = block_reduce<true>(m, scratch);

  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += kThreads) s += __expf(xr[c] - m);
  s = block_reduce<false>(s, scratch);

  const float inv = 1.0f / s;
  for (int c = threadIdx.x; c < cols; c += kThreads) yr[c] = __expf(xr[c] - m) * inv;
}

cudaError_t softmax(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
  softmax_rows<<<rows, kThreads, 0, stream>>>(x, y, rows, cols);
  CUDA_CHECK(cudaGetLastError());
  return cudaSuccess;
}
