"""The CUDA preamble every template kernel starts with: types, vector loads and stores.

Loads and stores move the widest aligned word the element count allows (16 bytes,
else 8, 4 or 2), and loads go through the read-only path (``__ldg``). Row kernels
merge (count, mean, sum of squared deviations) triples to get a mean and a
variance from one pass over the data.
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

// The widest word (16, 8, 4 or 2 bytes) that N elements of T split into: N consecutive
// elements start at a multiple of N elements from a 16-byte aligned base, so they are
// aligned to that word. A row of 8 bools is one 8-byte load, not 8 byte loads.
template <int N, typename T>
struct stitch_word {
  static constexpr int bytes = N * (int)sizeof(T);
  static constexpr int width = bytes % 16 == 0 ? 16 : bytes % 8 == 0 ? 8 : bytes % 4 == 0 ? 4 : bytes % 2 == 0 ? 2 : 1;
  static constexpr bool wide = width > (int)sizeof(T) && sizeof(T) <= 4;
  static constexpr int per = width / (int)sizeof(T);
};
template <int W> struct stitch_raw;
template <> struct stitch_raw<16> { typedef uint4 type; };
template <> struct stitch_raw<8> { typedef uint2 type; };
template <> struct stitch_raw<4> { typedef unsigned int type; };
template <> struct stitch_raw<2> { typedef unsigned short type; };
template <> struct stitch_raw<1> { typedef unsigned char type; };

// N consecutive elements from p, in the widest aligned words.
template <int N, typename T>
__device__ __forceinline__ void stitch_ldv(const T* __restrict__ p, float* o) {
  typedef stitch_word<N, T> W;
  if constexpr (W::wide) {
    typedef typename stitch_raw<W::width>::type R;
#pragma unroll
    for (int k = 0; k < N / W::per; ++k) {
      R raw = __ldg(reinterpret_cast<const R*>(p) + k);
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int q = 0; q < W::per; ++q) o[k * W::per + q] = stitch_to_float(e[q]);
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) o[k] = stitch_to_float(__ldg(p + k));
  }
}

template <int N, typename T>
__device__ __forceinline__ void stitch_stv(T* __restrict__ p, const float* v) {
  typedef stitch_word<N, T> W;
  if constexpr (W::wide) {
    typedef typename stitch_raw<W::width>::type R;
#pragma unroll
    for (int k = 0; k < N / W::per; ++k) {
      R raw;
      T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
      for (int q = 0; q < W::per; ++q) e[q] = stitch_from_float<T>(v[k * W::per + q]);
      reinterpret_cast<R*>(p)[k] = raw;
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] = stitch_from_float<T>(v[k]);
  }
}

__device__ __forceinline__ float stitch_tanh_approx(float x) {
  float y;
#ifdef __CUDA_ARCH__
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
#else
  y = tanhf(x);  // host build of a kernel (tests run generated kernels on the CPU)
#endif
  return y;
}

__device__ __forceinline__ float stitch_max(float a, float b) { return (a != a || a > b) ? a : b; }
__device__ __forceinline__ float stitch_min(float a, float b) { return (a != a || a < b) ? a : b; }

// a / b to 2 ulp over the whole range (PTX div.full, as torch.compile's Triton kernels divide), without the
// IEEE division's slow-path call and its branches.
__device__ __forceinline__ float stitch_div(float a, float b) {
  float y;
#ifdef __CUDA_ARCH__
  asm("div.full.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
#else
  y = a / b;
#endif
  return y;
}

// a * b rounded, never contracted with the add that follows into an FMA: a reduction kernel recomputes its
// prologue in each pass, and a max taken over rounded products must see the same values as the exp(v - max)
// of the next pass (where fma(a, b, -max) would exceed it by up to half an ulp of v: exp of that is > 1 / sum).
__device__ __forceinline__ float stitch_mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// max / min that return NaN when an operand is NaN (torch's clamp, relu, maximum), one instruction each.
__device__ __forceinline__ float stitch_max_nan(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float y;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
#else
  return (a != a || a > b) ? a : b;
#endif
}
__device__ __forceinline__ float stitch_min_nan(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float y;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
#else
  return (a != a || a < b) ? a : b;
#endif
}

// 1 / t for a count t (an exact integer >= 1) to 1 ulp, in one instruction: the IEEE reciprocal's and
// division's slow-path calls make a tight kernel spill registers around them.
__device__ __forceinline__ float stitch_rcp_count(float t) {
  float y;
#ifdef __CUDA_ARCH__
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(t));
#else
  y = 1.f / t;
#endif
  return y;
}

// (count, mean, M2 = sum of squared deviations) of a set merged with another set's
// (Chan et al.). Written symmetrically, so both lanes of a butterfly shuffle get the
// same bits; an empty set contributes nothing.
__device__ __forceinline__ void stitch_moments_merge(float& n, float& mean, float& m2, float nb, float mb, float m2b) {
  if (nb == 0.f) return;
  if (n == 0.f) { n = nb; mean = mb; m2 = m2b; return; }
  const float t = n + nb;
  const float inv = stitch_rcp_count(t);
  const float d = mb - mean;
  mean = (n * mean + nb * mb) * inv;
  m2 = (m2 + m2b) + d * d * (n * nb * inv);
  n = t;
}

// A thread's (count, mean, M2) from sums of (x - k) and (x - k)^2 around one of its own
// values k: then sum((x-k)^2) <= (count + 1) * M2, so the subtraction loses no more than
// log2(count + 1) bits, however far the data sit from zero.
__device__ __forceinline__ void stitch_moments_local(float cnt, float s1, float s2, float k, float& n, float& mean, float& m2) {
  n = cnt;
  if (cnt == 0.f) { mean = 0.f; m2 = 0.f; return; }
  const float d = s1 * stitch_rcp_count(cnt);
  mean = k + d;
  m2 = s2 - s1 * d;
}

// (value, position) of the first maximum / minimum merged with another: NaN is both the maximum and the
// minimum (as torch.argmax / argmin have it), and among equal values (or NaNs) the smaller position wins.
// NaN wins, then the larger (smaller) value, then the first position: the result does not depend on the order
// of the merges. Bitwise, not short-circuit, so the compiler selects instead of branching and keeps the loads
// of a loop's next elements in flight across the merges.
__device__ __forceinline__ void stitch_argmax_merge(float& v, int& i, float vb, int ib) {
  const bool an = v != v, bn = vb != vb, first = ib < i;
  const bool take = (an & bn & first) | (!an & (bn | (vb > v) | ((vb == v) & first)));
  v = take ? vb : v;
  i = take ? ib : i;
}
__device__ __forceinline__ void stitch_argmin_merge(float& v, int& i, float vb, int ib) {
  const bool an = v != v, bn = vb != vb, first = ib < i;
  const bool take = (an & bn & first) | (!an & (bn | (vb < v) | ((vb == v) & first)));
  v = take ? vb : v;
  i = take ? ib : i;
}

// A cluster of blocks (Hopper) sharing one row: every thread of every block waits at the barrier, and a
// block reads another's shared memory (its rank in the cluster) through the distributed shared memory.
// Host builds of a kernel (the kernel tests, g++) define these three themselves; every CUDA compiler
// (NVRTC, and both of nvcc's passes: its host pass parses the kernels too) gets these.
#if defined(__CUDACC__) || defined(__CUDA_ARCH__)
__device__ __forceinline__ void stitch_cluster_bind(float*) {}
__device__ __forceinline__ void stitch_cluster_sync() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ float stitch_cluster_ld(const float* p, unsigned rank) {
#if __CUDA_ARCH__ >= 900
  unsigned local = (unsigned)__cvta_generic_to_shared(p), remote;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
#else
  return *p;
#endif
}
#endif

// A block's dynamic shared memory as ``floats`` floats (16-byte aligned), named ``name``. Host builds of a kernel
// define it themselves.
#if defined(__CUDACC__) || defined(__CUDA_ARCH__)
#define STITCH_HELD(name, floats) \
  extern __shared__ float4 name##_words[]; \
  float* name = reinterpret_cast<float*>(name##_words)
#endif

// A team kernel (blocks of a cooperative launch sharing a row, one part each) stages its part of the next row in
// shared memory with bulk copies (Hopper's TMA) while it works on this one, and its blocks meet at a barrier in
// global memory once a pass. A copy moves the 16-byte aligned span around the part (the span's first element
// lies stitch_stage_shift(src) elements before the part's) and completes on an mbarrier that every staged input
// arrives at once. Host builds of a kernel define stitch_stage_init / _row / _wait and the team's barrier
// themselves, as the cluster's functions above.
typedef unsigned long long stitch_bar_t;  // an mbarrier (a kernel's body may narrow its own long longs)
template <typename T>
__device__ __forceinline__ int stitch_stage_shift(const T* src) {
  return (int)(((unsigned long long)src & 15ull) / sizeof(T));
}
#if defined(__CUDACC__) || defined(__CUDA_ARCH__)
__device__ __forceinline__ void stitch_stage_init(unsigned long long* bars, int n, unsigned arrivals) {
#if __CUDA_ARCH__ >= 900
  for (int b = 0; b < n; ++b)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;"
                 :: "r"((unsigned)__cvta_generic_to_shared(bars + b)), "r"(arrivals) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
template <typename T>
__device__ __forceinline__ void stitch_stage_row(T* dst, const T* src, int n, unsigned long long* bar) {
#if __CUDA_ARCH__ >= 900
  const unsigned long long a = (unsigned long long)src, a0 = a & ~15ull;
  const unsigned bytes = (unsigned)(((a + sizeof(T) * (unsigned long long)n + 15ull) & ~15ull) - a0);
  const unsigned b = (unsigned)__cvta_generic_to_shared(bar);
  // The buffer's earlier reads (generic proxy) before the copy's writes (async proxy).
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(a0), "r"(bytes), "r"(b) : "memory");
#endif
}
__device__ __forceinline__ void stitch_stage_wait(unsigned long long* bar, unsigned parity) {
#if __CUDA_ARCH__ >= 900
  const unsigned b = (unsigned)__cvta_generic_to_shared(bar);
  unsigned done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(b), "r"(parity) : "memory");
#endif
}
// The team's barrier, in two halves: thread 0 publishes what its block wrote and counts the block in (arrive),
// then waits until all ``blocks`` have (wait); the block's other threads wait for it at __syncthreads.
__device__ __forceinline__ void stitch_team_arrive(int* count) {
  __threadfence();
  atomicAdd(count, 1);
}
__device__ __forceinline__ void stitch_team_wait(int* count, int blocks) {
#if __CUDA_ARCH__ >= 700
  int seen;
  for (;;) {
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(seen) : "l"(count) : "memory");
    if (seen >= blocks) break;
  }
#endif
}
#endif

// A lagged kernel (``lagged_kernels``): the warps of a block hand tiles, a row's sums and a row's values to one
// another through mbarriers in shared memory (a ring's slot is full, or free again), and the blocks count a row's
// sums in global memory. Host builds of a kernel define these themselves.
#if defined(__CUDACC__) || defined(__CUDA_ARCH__)
__device__ __forceinline__ void stitch_ring_init(unsigned long long* bars, int n, unsigned arrivals) {
  stitch_stage_init(bars, n, arrivals);
}
template <typename T>
__device__ __forceinline__ void stitch_ring_copy(T* dst, const T* src, int n, unsigned long long* bar) {
  stitch_stage_row(dst, src, n, bar);
}
__device__ __forceinline__ void stitch_ring_wait(unsigned long long* bar, unsigned parity) {
  stitch_stage_wait(bar, parity);
}
__device__ __forceinline__ void stitch_ring_arrive(unsigned long long* bar) {
#if __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"((unsigned)__cvta_generic_to_shared(bar)) : "memory");
#endif
}
// One more of a row's blocks has written its sums: released, so a reader that sees the count sees the sums.
__device__ __forceinline__ void stitch_count_release(int* count) {
#if __CUDA_ARCH__ >= 700
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;" :: "l"(count) : "memory");
#endif
}
__device__ __forceinline__ void stitch_count_wait(const int* count, int need) {
#if __CUDA_ARCH__ >= 700
  int seen;
  for (;;) {
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(seen) : "l"(count) : "memory");
    if (seen >= need) break;
  }
#endif
}
#endif

// The number of SM identifiers (at least the SMs' count): how many blocks of one per SM run at once.
__device__ __forceinline__ int stitch_nsm() {
  unsigned n = 132;
#ifdef __CUDA_ARCH__
  asm("mov.u32 %0, %%nsmid;" : "=r"(n));
#endif
  return (int)n;
}

// A hint that L2 should fetch the line holding p; no register waits for it.
template <typename T>
__device__ __forceinline__ void stitch_prefetch_l2(const T* p) {
#ifdef __CUDA_ARCH__
  asm volatile("prefetch.global.L2 [%0];" :: "l"(p));
#else
  (void)p;
#endif
}

// expm1 to about 2e-7 relative without expm1f's branches: a Taylor polynomial where exp(x) - 1 would cancel
// (|x| < 0.5, truncation below 2e-7), exp(x) - 1 elsewhere (|expm1(x)| > 0.39 there, so one ulp of exp stays small).
__device__ __forceinline__ float stitch_expm1(float x) {
  const float p = x * (1.f + x * (0.5f + x * (0.16666667f + x * (0.041666668f + x * (0.008333334f
                  + x * (0.0013888889f + x * 0.0001984127f))))));
  return fabsf(x) < 0.5f ? p : expf(x) - 1.f;
}

// Half-precision outputs only (their rounding is 2**-9 or 2**-12 relative): e^x through one ex2.approx, a / b
// through one rcp.approx. Results below 2**-126 flush to zero; NaN and ±Inf behave as in expf and '/'.
__device__ __forceinline__ float stitch_exp_fast(float x) {
  float y;
#ifdef __CUDA_ARCH__
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
#else
  y = expf(x);
#endif
  return y;
}
__device__ __forceinline__ float stitch_div_fast(float a, float b) {
  float y;
#ifdef __CUDA_ARCH__
  asm("div.approx.ftz.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
#else
  y = a / b;
#endif
  return y;
}

// GELU (erf form) for half-precision outputs: x * Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2 and erfc from
// Numerical Recipes' Chebyshev fit (relative error below 1.2e-7 over the whole line, tails included): about
// half the instructions of erff, error far below half a bf16 / fp16 ulp.
__device__ __forceinline__ float stitch_gelu_erf_fast(float x) {
  const float z = fabsf(x) * 0.70710678118654752f;
  const float t = stitch_div_fast(1.f, 1.f + 0.5f * z);
  const float poly = -1.26551223f + t * (1.00002368f + t * (0.37409196f + t * (0.09678418f + t * (-0.18628806f
                     + t * (0.27886807f + t * (-1.13520398f + t * (1.48851587f + t * (-0.82215223f
                     + t * 0.17087277f))))))));
  const float r = t * stitch_exp_fast(poly - z * z);  // erfc(|x| / sqrt 2)
  return x * (x >= 0.f ? 1.f - 0.5f * r : 0.5f * r);
}
"""


def _round_to(expr: str, dtype: str) -> str:
    """``expr`` rounded to a half dtype and back to fp32, as eager rounds every half-precision result."""
    if dtype == "bfloat16":
        return f"__bfloat162float(__float2bfloat16_rn({expr}))"
    if dtype == "float16":
        return f"__half2float(__float2half_rn({expr}))"
    return expr
