"""The CUDA preamble every template kernel starts with: types, vector loads and stores.

Loads and stores move 16 bytes per instruction where the element count allows
(float4 / uint4), and go through the read-only path (``__ldg``).
"""

PREAMBLE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>

__device__ __forceinline__ float stitch_to_float(float v) { return v; }
__device__ __forceinline__ float stitch_to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float stitch_to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float stitch_to_float(unsigned char v) { return v ? 1.f : 0.f; }
__device__ __forceinline__ float stitch_to_float(long long v) { return (float)v; }
__device__ __forceinline__ float stitch_to_float(int v) { return (float)v; }

template <typename T> __device__ __forceinline__ T stitch_from_float(float v);
template <> __device__ __forceinline__ float stitch_from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half stitch_from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 stitch_from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ unsigned char stitch_from_float<unsigned char>(float v) { return v != 0.f; }
template <> __device__ __forceinline__ long long stitch_from_float<long long>(float v) { return (long long)v; }
template <> __device__ __forceinline__ int stitch_from_float<int>(float v) { return (int)v; }

template <typename T>
__device__ __forceinline__ float stitch_ld(const T* __restrict__ p, long long i) { return stitch_to_float(__ldg(p + i)); }

// N consecutive elements from p (16-byte aligned when N * sizeof(T) is a multiple of 16).
template <int N, typename T>
__device__ __forceinline__ void stitch_ldv(const T* __restrict__ p, float* o) {
  constexpr int per = 16 / sizeof(T);
  if constexpr (N % per == 0 && sizeof(T) <= 4) {
#pragma unroll
    for (int k = 0; k < N / per; ++k) {
      uint4 raw = __ldg(reinterpret_cast<const uint4*>(p) + k);
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int q = 0; q < per; ++q) o[k * per + q] = stitch_to_float(e[q]);
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) o[k] = stitch_to_float(__ldg(p + k));
  }
}

template <int N, typename T>
__device__ __forceinline__ void stitch_stv(T* __restrict__ p, const float* v) {
  constexpr int per = 16 / sizeof(T);
  if constexpr (N % per == 0 && sizeof(T) <= 4) {
#pragma unroll
    for (int k = 0; k < N / per; ++k) {
      uint4 raw;
      T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
      for (int q = 0; q < per; ++q) e[q] = stitch_from_float<T>(v[k * per + q]);
      reinterpret_cast<uint4*>(p)[k] = raw;
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] = stitch_from_float<T>(v[k]);
  }
}

__device__ __forceinline__ float stitch_tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float stitch_max(float a, float b) { return (a != a || a > b) ? a : b; }
__device__ __forceinline__ float stitch_min(float a, float b) { return (a != a || a < b) ? a : b; }
"""
