// Probe: 1-D pools at KernelBench sizes, three kernel shapes, against a copy (the basis of kernels.STAGE_TILE).
// On a GPU machine: nvcc -O3 -arch=sm_90 -std=c++17 -o pool bench/pool_stage_probe.cu && ./pool
#include <cstdio>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e) { printf("err %s line %d\n", cudaGetErrorString(e), __LINE__); return 1; } } while (0)

__device__ __forceinline__ float mx(float a, float b) { float y; asm("max.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b)); return y; }

// The window of output ``pos`` of the row at ``b``: unchecked where it lies inside the row.
template <int K, int S, int P, int D, bool MAX>
__device__ __forceinline__ float window(const float* __restrict__ b, int pos, int Lin) {
  const int s0 = pos * S - P;
  float acc = MAX ? -INFINITY : 0.f;
  if (s0 >= 0 && s0 + (K - 1) * D < Lin) {
#pragma unroll
    for (int k = 0; k < K; ++k) { float v = __ldg(b + s0 + k * D); acc = MAX ? mx(acc, v) : acc + v; }
  } else {
#pragma unroll
    for (int k = 0; k < K; ++k) { int h = s0 + k * D; if (h >= 0 && h < Lin) { float v = __ldg(b + h); acc = MAX ? mx(acc, v) : acc + v; } }
  }
  return acc;
}

template <int K, int S, int P, int D, bool MAX>
__global__ void __launch_bounds__(256) current(const float* __restrict__ in, float* __restrict__ out, int rows, int Lin, int Lout) {
  long long total = (long long)rows * Lout;
  long long q = (long long)blockIdx.x * 512 + threadIdx.x;
  for (int u = 0; u < 2; ++u, q += 256) {
    if (q >= total) return;
    int row = (int)(q / Lout), pos = (int)(q % Lout);
    const float* b = in + (long long)row * Lin;
    const float acc = window<K, S, P, D, MAX>(b, pos, Lin);
    out[q] = MAX ? acc : acc / K;
  }
}

// A block takes TILE outputs of one row: the row from the block's index (no division a thread).
template <int K, int S, int P, int D, bool MAX, int TILE>
__global__ void __launch_bounds__(256) segment(const float* __restrict__ in, float* __restrict__ out, int rows, int Lin, int Lout, int nseg) {
  int row = blockIdx.x / nseg, seg = blockIdx.x - row * nseg;
  const float* b = in + (long long)row * Lin;
  float* o = out + (long long)row * Lout;
#pragma unroll
  for (int m = 0; m < TILE / 256; ++m) {
    int pos = seg * TILE + m * 256 + threadIdx.x;
    if (pos >= Lout) break;
    const float acc = window<K, S, P, D, MAX>(b, pos, Lin);
    o[pos] = MAX ? acc : acc / K;
  }
}

// The same, the block's span of the input staged in shared memory first.
template <int K, int S, int P, int D, bool MAX, int TILE>
__global__ void __launch_bounds__(256) staged(const float* __restrict__ in, float* __restrict__ out, int rows, int Lin, int Lout, int nseg) {
  constexpr int SPAN = (TILE - 1) * S + (K - 1) * D + 1;
  __shared__ float t[SPAN];
  int row = blockIdx.x / nseg, seg = blockIdx.x - row * nseg;
  const float* b = in + (long long)row * Lin;
  float* o = out + (long long)row * Lout;
  int start = seg * TILE * S - P;
  for (int i = threadIdx.x; i < SPAN; i += 256) { int h = start + i; t[i] = (h >= 0 && h < Lin) ? __ldg(b + h) : (MAX ? -INFINITY : 0.f); }
  __syncthreads();
#pragma unroll
  for (int m = 0; m < TILE / 256; ++m) {
    int j = m * 256 + threadIdx.x, pos = seg * TILE + j;
    if (pos >= Lout) break;
    float acc = MAX ? -INFINITY : 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) { float v = t[j * S + k * D]; acc = MAX ? mx(acc, v) : acc + v; }
    o[pos] = MAX ? acc : acc / K;
  }
}

__global__ void copyk(const float4* __restrict__ a, float4* __restrict__ b, long long n) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) b[i] = a[i];
}

template <class F> float timeit(F f) {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  f(); cudaDeviceSynchronize();
  float best = 1e30f;
  for (int r = 0; r < 7; ++r) { cudaEventRecord(a); f(); cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); if (ms < best) best = ms; }
  return best;
}

template <int K, int S, int P, int D, bool MAX>
int run(const char* name, int rows, int Lin, float* in, float* out, double copy_gbs, float* ref) {
  int Lout = (Lin + 2 * P - D * (K - 1) - 1) / S + 1;
  long long total = (long long)rows * Lout;
  double bytes = 4.0 * ((double)rows * Lin + (double)total);
  float t0 = timeit([&] { current<K, S, P, D, MAX><<<(unsigned)((total + 511) / 512), 256>>>(in, out, rows, Lin, Lout); });
  CK(cudaMemcpy(ref, out, 4 * total, cudaMemcpyDeviceToDevice));
  int n1 = (Lout + 1023) / 1024, n2 = (Lout + 2047) / 2048, n4 = (Lout + 4095) / 4096;
  float t1 = timeit([&] { segment<K, S, P, D, MAX, 1024><<<rows * n1, 256>>>(in, out, rows, Lin, Lout, n1); });
  float t2 = timeit([&] { staged<K, S, P, D, MAX, 1024><<<rows * n1, 256>>>(in, out, rows, Lin, Lout, n1); });
  float t3 = timeit([&] { staged<K, S, P, D, MAX, 2048><<<rows * n2, 256>>>(in, out, rows, Lin, Lout, n2); });
  float t4 = timeit([&] { staged<K, S, P, D, MAX, 4096><<<rows * n4, 256>>>(in, out, rows, Lin, Lout, n4); });
  CK(cudaGetLastError());
  // last result (staged 4096) against the current kernel's
  float* h1 = new float[1 << 20]; float* h2 = new float[1 << 20];
  long long off = total - (1 << 20);
  CK(cudaMemcpy(h1, ref + off, 4 << 20, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(h2, out + off, 4 << 20, cudaMemcpyDeviceToHost));
  int bad = 0; for (int i = 0; i < (1 << 20); ++i) if (h1[i] != h2[i]) ++bad;
  auto pc = [&](float ms) { return 100.0 * bytes / (ms * 1e-3) / 1e9 / copy_gbs; };
  printf("%-10s current %.3f ms %.1f%% | segment1024 %.3f %.1f%% | staged1024 %.3f %.1f%% | staged2048 %.3f %.1f%% | staged4096 %.3f %.1f%% | mismatches %d\n",
         name, t0, pc(t0), t1, pc(t1), t2, pc(t2), t3, pc(t3), t4, pc(t4), bad);
  return 0;
}

int main() {
  size_t n = (size_t)64 * 192 * 65536;
  float *a, *b, *r; CK(cudaMalloc(&a, 4 * n)); CK(cudaMalloc(&b, 4 * n + 4096 * 64)); CK(cudaMalloc(&r, 4 * n + 4096 * 64));
  // deterministic fill
  float* h = new float[1 << 24]; for (int i = 0; i < (1 << 24); ++i) h[i] = (float)((i * 2654435761u) % 1000) / 1000.f;
  for (size_t o = 0; o < n; o += (1 << 24)) CK(cudaMemcpy(a + o, h, 4 * ((n - o) < (1u << 24) ? (n - o) : (1u << 24)), cudaMemcpyHostToDevice));
  float tc = timeit([&] { copyk<<<132 * 8, 512>>>((const float4*)a, (float4*)b, (long long)(n / 4)); });
  double copy_gbs = 8.0 * n / (tc * 1e-3) / 1e9;
  printf("copy %.3f ms, %.0f GB/s\n", tc, copy_gbs);
  run<8, 1, 4, 3, true>("max1d", 64 * 192, 65536, a, b, copy_gbs, r);
  run<8, 1, 4, 1, false>("avg1d", 64 * 128, 65536, a, b, copy_gbs, r);
  run<4, 2, 1, 1, true>("max1d-s2", 64 * 192, 65536, a, b, copy_gbs, r);
  return 0;
}
