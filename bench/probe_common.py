"""What the hand-written probes share: their timer (the median of ``n`` CUDA-event timings of ``fn`` after one
warm-up call) and the CUDA helpers at the top of their kernels' source (shared-memory addresses, an mbarrier's wait,
an acquiring load, a cluster's barrier and distributed shared memory, Chan's merge of (count, mean, M2))."""
import torch

CUDA_HELPERS = r"""
__device__ __forceinline__ unsigned su32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
  unsigned ok = 0;
  while (!ok) asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                           : "=r"(ok) : "r"(su32(bar)), "r"(parity) : "memory"); }
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v; asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory"); return v; }
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory"); }
__device__ __forceinline__ float cluster_ld(const float* p, unsigned rank) {
  unsigned local = su32(p), remote; float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory"); return v; }
__device__ __forceinline__ void merge(float& n, float& m, float& q, float nb, float mb, float qb) {
  const float t = n + nb; if (t == 0.f) return;
  const float d = mb - m, f = nb / t; m = m + d * f; q = q + qb + d * d * n * f; n = t; }
"""


def timeit(fn, n=10):
    fn()
    torch.cuda.synchronize()
    es = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for a, b in es:
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    ts = sorted(a.elapsed_time(b) for a, b in es)
    return ts[len(ts) // 2]
