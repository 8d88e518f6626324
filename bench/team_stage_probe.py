"""Hand-written probe kernels for KernelBench's InstanceNorm, GroupNorm and L2 norm: persistent teams whose blocks
hold each row's parts in shared memory, loaded by bulk copies (TMA) one row ahead, statistics exchanged through
global memory (a team barrier) or a cluster's distributed shared memory; timed against the copy in the same run.
On the GPU machine: . bench/gpu_env.sh; python3 bench/team_stage_probe.py OUTDIR [instnorm|groupnorm|l2norm ...]
(PROBE_ONLY=<label> runs one variant once, for ncu). Results: bench/results/memory_bound_h100/team_h100.md."""
import json, math, sys, time
import torch
sys.path.insert(0, ".")
from stitch_lsp.runtime.loader import load_kernel
from bench.probe_common import CUDA_HELPERS, timeit

SRC = CUDA_HELPERS + r"""
__device__ __forceinline__ void mbar_init(unsigned long long* b, unsigned n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(su32(b)), "r"(n) : "memory"); }
__device__ __forceinline__ void bulk_load(float* dst, const void* src, unsigned bytes, unsigned long long* bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(su32(bar)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"(su32(dst)), "l"(src), "r"(bytes), "r"(su32(bar)) : "memory"); }

extern "C" __global__ void CLUSTER __launch_bounds__(THREADS, 1) probe(const float* __restrict__ x,
    const float* __restrict__ wgt, const float* __restrict__ bia, float* __restrict__ y,
    float* __restrict__ ws, unsigned* __restrict__ cnt) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  __shared__ __align__(8) unsigned long long bar[NBUF];
  __shared__ float red[3][THREADS / 32];
  __shared__ float fin[3];
  __shared__ float cx[3];
  const int team = blockIdx.x / T, part = blockIdx.x % T, nteams = gridDim.x / T;
  const int jbeg = part * CHUNK, jn = min(CHUNK, ROW_LEN - jbeg);
  if (threadIdx.x == 0) {
    for (int b = 0; b < NBUF; ++b) mbar_init(&bar[b], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
  auto issue = [&](long long row, int b) {
    const unsigned long long a = (unsigned long long)(x + row * ROW_LEN + jbeg);
    const unsigned long long a0 = a & ~15ull, a1 = (a + 4ull * jn + 15ull) & ~15ull;
#if ROT
    const unsigned total = (unsigned)(a1 - a0);
    const unsigned piece = ((total + PIECES - 1) / PIECES + 15u) & ~15u;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(su32(&bar[b])), "r"(total) : "memory");
    for (int q = 0; q < PIECES; ++q) {
      const unsigned p0 = ((q + blockIdx.x) % PIECES) * piece;
      if (p0 >= total) continue;
      const unsigned nb = min(piece, total - p0);
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   :: "r"(su32(smem + b * BUFW) + p0), "l"(a0 + p0), "r"(nb), "r"(su32(&bar[b])) : "memory");
    }
#else
    bulk_load(smem + b * BUFW, (const void*)a0, (unsigned)(a1 - a0), &bar[b]);
#endif
  };
  if (threadIdx.x == 0)
    for (int k = 0; k < NBUF - 1; ++k) { long long r = team + (long long)k * nteams; if (r < ROWS) issue(r, k); }
  int it = 0;
  for (long long row = team; row < ROWS; row += nteams, ++it) {
    const int b = it % NBUF;
    if (threadIdx.x == 0) {
      const long long nx = row + (long long)(NBUF - 1) * nteams;
      if (nx < ROWS) issue(nx, (it + NBUF - 1) % NBUF);
    }
    mbar_wait(&bar[b], (it / NBUF) & 1);
    const float* buf = smem + b * BUFW + (int)(((unsigned long long)(x + row * ROW_LEN + jbeg) & 15ull) >> 2);
    // this thread's moments (or sum of squares)
    float n = 0.f, mu = 0.f, m2 = 0.f;
#if STAT == 0
    {
      float s1 = 0.f, s2 = 0.f, c = 0.f; const float sh = buf[0];
      for (int j = threadIdx.x * VEC; j < jn; j += THREADS * VEC) {
#if VEC == 4
        const float4 v = *reinterpret_cast<const float4*>(buf + j);
        float d; d = v.x - sh; s1 += d; s2 = fmaf(d, d, s2); d = v.y - sh; s1 += d; s2 = fmaf(d, d, s2);
        d = v.z - sh; s1 += d; s2 = fmaf(d, d, s2); d = v.w - sh; s1 += d; s2 = fmaf(d, d, s2); c += 4.f;
#else
        const float d = buf[j] - sh; s1 += d; s2 = fmaf(d, d, s2); c += 1.f;
#endif
      }
      n = c; if (c > 0.f) { const float mm = s1 / c; mu = sh + mm; m2 = fmaxf(s2 - s1 * mm, 0.f); }
    }
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) merge(n, mu, m2, __shfl_xor_sync(~0u, n, o), __shfl_xor_sync(~0u, mu, o), __shfl_xor_sync(~0u, m2, o));
#else
    for (int j = threadIdx.x * VEC; j < jn; j += THREADS * VEC) {
#if VEC == 4
      const float4 v = *reinterpret_cast<const float4*>(buf + j);
      m2 = fmaf(v.x, v.x, m2); m2 = fmaf(v.y, v.y, m2); m2 = fmaf(v.z, v.z, m2); m2 = fmaf(v.w, v.w, m2);
#else
      m2 = fmaf(buf[j], buf[j], m2);
#endif
    }
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) m2 += __shfl_xor_sync(~0u, m2, o);
#endif
    if ((threadIdx.x & 31) == 0) { red[0][threadIdx.x >> 5] = n; red[1][threadIdx.x >> 5] = mu; red[2][threadIdx.x >> 5] = m2; }
    __syncthreads();
    if (threadIdx.x < 32) {
      float a = 0.f, bb = 0.f, c = 0.f;
      for (int k = threadIdx.x; k < THREADS / 32; k += 32) {
#if STAT == 0
        merge(a, bb, c, red[0][k], red[1][k], red[2][k]);
#else
        c += red[2][k];
#endif
      }
      #pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
#if STAT == 0
        merge(a, bb, c, __shfl_xor_sync(~0u, a, o), __shfl_xor_sync(~0u, bb, o), __shfl_xor_sync(~0u, c, o));
#else
        c += __shfl_xor_sync(~0u, c, o);
#endif
      }
#if EXCHANGE == 0
      if (threadIdx.x == 0) {
        float* p = ws + ((long long)row * T + part) * 3; p[0] = a; p[1] = bb; p[2] = c;
        __threadfence();
        atomicAdd(&cnt[team], 1u);
        const unsigned target = (unsigned)T * (unsigned)(it + 1);
        while (ld_acquire(&cnt[team]) < target) {}
      }
      __syncwarp();
      float A = 0.f, B = 0.f, C = 0.f;
      for (int q = threadIdx.x; q < T; q += 32) {
        const float* p = ws + ((long long)row * T + q) * 3;
#if STAT == 0
        merge(A, B, C, __ldcg(p), __ldcg(p + 1), __ldcg(p + 2));
#else
        C += __ldcg(p + 2);
#endif
      }
      #pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
#if STAT == 0
        merge(A, B, C, __shfl_xor_sync(~0u, A, o), __shfl_xor_sync(~0u, B, o), __shfl_xor_sync(~0u, C, o));
#else
        C += __shfl_xor_sync(~0u, C, o);
#endif
      }
      if (threadIdx.x == 0) { fin[0] = A; fin[1] = B; fin[2] = C; }
#else
      if (threadIdx.x == 0) { cx[0] = a; cx[1] = bb; cx[2] = c; }
#endif
    }
#if EXCHANGE == 1
    cluster_sync();
    if (threadIdx.x < 32) {
      float A = 0.f, B = 0.f, C = 0.f;
      for (int q = 0; q < T; ++q) {
#if STAT == 0
        merge(A, B, C, cluster_ld(cx, q), cluster_ld(cx + 1, q), cluster_ld(cx + 2, q));
#else
        C += cluster_ld(cx + 2, q);
#endif
      }
      if (threadIdx.x == 0) { fin[0] = A; fin[1] = B; fin[2] = C; }
    }
    cluster_sync();  // cx is rewritten next row
#endif
    __syncthreads();
#if STAT == 0
    const float mean = fin[1], rstd = rsqrtf(fin[2] / ROW_LEN + 1e-5f);
#else
    const float mean = 0.f, rstd = 1.f / sqrtf(fin[2]);
#endif
    float* yo = y + row * ROW_LEN + jbeg;
    const int niter = (jn + THREADS * VEC - 1) / (THREADS * VEC);
    const int rot = ROT ? (int)((blockIdx.x * 7u) % (unsigned)niter) : 0;
    for (int kk = 0; kk < niter; ++kk) {
      int itr = kk + rot; if (itr >= niter) itr -= niter;
      const int j = itr * THREADS * VEC + threadIdx.x * VEC;
      if (j >= jn) continue;
#if VEC == 4
      float4 v = *reinterpret_cast<const float4*>(buf + j);
#if AFFINE
      const int ch = (int)(row % GROUPS) * CPG + (jbeg + j) / HW;
      const float g = wgt[ch] * rstd, bo = bia[ch] - mean * g;
      v.x = fmaf(v.x, g, bo); v.y = fmaf(v.y, g, bo); v.z = fmaf(v.z, g, bo); v.w = fmaf(v.w, g, bo);
#else
      v.x = (v.x - mean) * rstd; v.y = (v.y - mean) * rstd; v.z = (v.z - mean) * rstd; v.w = (v.w - mean) * rstd;
#endif
      *reinterpret_cast<float4*>(yo + j) = v;
#else
      yo[j] = (buf[j] - mean) * rstd;
#endif
    }
    __syncthreads();  // buffer b is free for the bulk copy NBUF-1 rows on
  }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1) probe_lag(const float* __restrict__ x,
    const float* __restrict__ wgt, const float* __restrict__ bia, float* __restrict__ y,
    float* __restrict__ ws, unsigned* __restrict__ cnt) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  __shared__ __align__(8) unsigned long long bar[NBUF];
  __shared__ float red[3][THREADS / 32];
  __shared__ float fin[3];
  const int team = blockIdx.x / T, part = blockIdx.x % T, nteams = gridDim.x / T;
  const int jbeg = part * CHUNK, jn = min(CHUNK, ROW_LEN - jbeg);
  if (threadIdx.x == 0) {
    for (int b = 0; b < NBUF; ++b) mbar_init(&bar[b], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
  auto issue = [&](long long row, int b) {
    const unsigned long long a = (unsigned long long)(x + row * ROW_LEN + jbeg);
    const unsigned long long a0 = a & ~15ull, a1 = (a + 4ull * jn + 15ull) & ~15ull;
    bulk_load(smem + b * BUFW, (const void*)a0, (unsigned)(a1 - a0), &bar[b]);
  };
  auto bufof = [&](long long row, int b) {
    return smem + b * BUFW + (int)(((unsigned long long)(x + row * ROW_LEN + jbeg) & 15ull) >> 2);
  };
  const int iters = (int)((ROWS - team + nteams - 1) / nteams);
  if (threadIdx.x == 0)
    for (int k = 0; k < NBUF && k < iters; ++k) issue(team + (long long)k * nteams, k);
  for (int it = 0; it <= iters; ++it) {
    if (it < iters) {
      const long long row = team + (long long)it * nteams;
      const int b = it % NBUF;
      mbar_wait(&bar[b], (it / NBUF) & 1);
      const float* buf = bufof(row, b);
      float n = 0.f, mu = 0.f, m2 = 0.f;
#if STAT == 0
      {
        float s1 = 0.f, s2 = 0.f, c = 0.f; const float sh = buf[0];
        for (int j = threadIdx.x * VEC; j < jn; j += THREADS * VEC) {
          const float4 v = *reinterpret_cast<const float4*>(buf + j);
          float d; d = v.x - sh; s1 += d; s2 = fmaf(d, d, s2); d = v.y - sh; s1 += d; s2 = fmaf(d, d, s2);
          d = v.z - sh; s1 += d; s2 = fmaf(d, d, s2); d = v.w - sh; s1 += d; s2 = fmaf(d, d, s2); c += 4.f;
        }
        n = c; if (c > 0.f) { const float mm = s1 / c; mu = sh + mm; m2 = fmaxf(s2 - s1 * mm, 0.f); }
      }
      #pragma unroll
      for (int o = 16; o > 0; o >>= 1) merge(n, mu, m2, __shfl_xor_sync(~0u, n, o), __shfl_xor_sync(~0u, mu, o), __shfl_xor_sync(~0u, m2, o));
#else
      for (int j = threadIdx.x * VEC; j < jn; j += THREADS * VEC) {
#if VEC == 4
        const float4 v = *reinterpret_cast<const float4*>(buf + j);
        m2 = fmaf(v.x, v.x, m2); m2 = fmaf(v.y, v.y, m2); m2 = fmaf(v.z, v.z, m2); m2 = fmaf(v.w, v.w, m2);
#else
        m2 = fmaf(buf[j], buf[j], m2);
#endif
      }
      #pragma unroll
      for (int o = 16; o > 0; o >>= 1) m2 += __shfl_xor_sync(~0u, m2, o);
#endif
      if ((threadIdx.x & 31) == 0) { red[0][threadIdx.x >> 5] = n; red[1][threadIdx.x >> 5] = mu; red[2][threadIdx.x >> 5] = m2; }
      __syncthreads();
      if (threadIdx.x < 32) {
        float a = 0.f, bb = 0.f, c = 0.f;
        for (int k = threadIdx.x; k < THREADS / 32; k += 32) {
#if STAT == 0
          merge(a, bb, c, red[0][k], red[1][k], red[2][k]);
#else
          c += red[2][k];
#endif
        }
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
#if STAT == 0
          merge(a, bb, c, __shfl_xor_sync(~0u, a, o), __shfl_xor_sync(~0u, bb, o), __shfl_xor_sync(~0u, c, o));
#else
          c += __shfl_xor_sync(~0u, c, o);
#endif
        }
        if (threadIdx.x == 0) {
          float* p = ws + ((long long)row * T + part) * 3; p[0] = a; p[1] = bb; p[2] = c;
          __threadfence();
          atomicAdd(&cnt[team], 1u);
        }
      }
    }
    if (it > 0) {
      const int pi = it - 1;
      const long long row = team + (long long)pi * nteams;
      const int b = pi % NBUF;
      if (threadIdx.x < 32) {
#if NOEX == 0
        if (threadIdx.x == 0) {
          const unsigned target = (unsigned)T * (unsigned)(pi + 1);
          while (ld_acquire(&cnt[team]) < target) {}
        }
        __syncwarp();
#endif
        float A = 0.f, B = 0.f, C = 0.f;
        for (int q = threadIdx.x; q < T; q += 32) {
          const float* p = ws + ((long long)row * T + (NOEX ? part : q)) * 3;
#if STAT == 0
          merge(A, B, C, __ldcg(p), __ldcg(p + 1), __ldcg(p + 2));
#else
          C += __ldcg(p + 2);
#endif
        }
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
#if STAT == 0
          merge(A, B, C, __shfl_xor_sync(~0u, A, o), __shfl_xor_sync(~0u, B, o), __shfl_xor_sync(~0u, C, o));
#else
          C += __shfl_xor_sync(~0u, C, o);
#endif
        }
        if (threadIdx.x == 0) { fin[0] = A; fin[1] = B; fin[2] = C; }
      }
      __syncthreads();
#if STAT == 0
      const float mean = fin[1], rstd = rsqrtf(fin[2] / ROW_LEN + 1e-5f);
#else
      const float mean = 0.f, rstd = 1.f / sqrtf(fin[2]);
#endif
      const float* buf = bufof(row, b);
      float* yo = y + row * ROW_LEN + jbeg;
      for (int j = threadIdx.x * VEC; j < jn; j += THREADS * VEC) {
#if VEC == 4
        float4 v = *reinterpret_cast<const float4*>(buf + j);
#if AFFINE
        const int ch = (int)(row % GROUPS) * CPG + (jbeg + j) / HW;
        const float g = wgt[ch] * rstd, bo = bia[ch] - mean * g;
        v.x = fmaf(v.x, g, bo); v.y = fmaf(v.y, g, bo); v.z = fmaf(v.z, g, bo); v.w = fmaf(v.w, g, bo);
#else
        v.x = (v.x - mean) * rstd; v.y = (v.y - mean) * rstd; v.z = (v.z - mean) * rstd; v.w = (v.w - mean) * rstd;
#endif
        *reinterpret_cast<float4*>(yo + j) = v;
#else
        yo[j] = (buf[j] - mean) * rstd;
#endif
      }
      __syncthreads();  // buffer b is free
      if (threadIdx.x == 0 && pi + NBUF < iters) issue(team + (long long)(pi + NBUF) * nteams, b);
    }
  }
}
"""

def build(name, *, rows, row_len, T, threads, nbuf, stat, exchange, vec, affine=0, groups=1, cpg=1, hw=1, teams=None, clusters=0, lag=0, noex=0, rot=0, pieces=8):
    chunk = math.ceil(math.ceil(row_len / T) / vec) * vec
    bufw = chunk + 8  # room for the alignment shift, 32-byte steps
    bufw = (bufw + 7) // 8 * 8
    sm = 132
    nteams = teams or (sm // T if exchange == 0 else None)
    src = SRC
    defs = dict(ROWS=f"{rows}LL", ROW_LEN=row_len, T=T, THREADS=threads, NBUF=nbuf, STAT=stat, EXCHANGE=exchange,
                VEC=vec, CHUNK=chunk, BUFW=bufw, AFFINE=affine, GROUPS=groups, CPG=cpg, HW=hw, NOEX=noex, ROT=rot, PIECES=pieces)
    head = "".join(f"#define {k} {v}\n" for k, v in defs.items())
    head += "#define CLUSTER " + (f"__cluster_dims__({T}, 1, 1)" if exchange == 1 else "") + "\n"
    k = load_kernel(head + src, "probe_lag" if lag else "probe", filename=f"{name}.cu")
    shared = 4 * bufw * nbuf
    return k, chunk, shared, nteams


def main():
    out = sys.argv[1]
    only = set(sys.argv[2:])
    torch.manual_seed(0)
    res = []
    tasks = {
        "instnorm": dict(shape=(112 * 64, 512 * 512), stat=0, vec=4),
        "groupnorm": dict(shape=(112 * 8, 8 * 512 * 512), stat=0, vec=4, affine=1, groups=8, cpg=8, hw=512 * 512),
        "l2norm": dict(shape=(32768, 65535), stat=1, vec=1),
        "inst_sq": dict(shape=(112 * 64, 512 * 512), stat=1, vec=4),
        "inst_v1": dict(shape=(112 * 64, 512 * 512), stat=0, vec=1),
        "l2_65536": dict(shape=(32768, 65536), stat=1, vec=4),
        "l2_65536v1": dict(shape=(32768, 65536), stat=1, vec=1),
    }
    variants = {  # the configurations of bench/results/memory_bound_h100/team_h100.md
        "instnorm": [dict(T=11, threads=256, nbuf=2, exchange=0), dict(T=11, threads=512, nbuf=2, exchange=0),
                     dict(T=12, threads=256, nbuf=2, exchange=0), dict(T=12, threads=512, nbuf=2, exchange=0),
                     dict(T=16, threads=512, nbuf=3, exchange=0, lag=1)],
        "groupnorm": [dict(T=132, threads=128, nbuf=2, exchange=0), dict(T=132, threads=256, nbuf=2, exchange=0),
                      dict(T=132, threads=512, nbuf=2, exchange=0), dict(T=132, threads=512, nbuf=3, exchange=0, lag=1)],
        "l2norm": [dict(T=3, threads=256, nbuf=2, exchange=0), dict(T=3, threads=512, nbuf=2, exchange=0),
                   dict(T=3, threads=512, nbuf=2, exchange=0, rot=1), dict(T=4, threads=512, nbuf=2, exchange=1, clusters=32)],
    }
    import os
    one = os.environ.get("PROBE_ONLY")
    for tname, t in tasks.items():
        if (only and tname not in only) or not variants.get(tname):
            continue
        rows, row_len = t["shape"]
        x = torch.rand(rows, row_len, device="cuda")
        y = torch.empty_like(x)
        copy_ms = timeit(lambda: y.copy_(x)) if not os.environ.get("PROBE_ONLY") else 1.0
        gb = 2 * x.numel() * 4 / 1e9
        if tname == "groupnorm":
            w = torch.randn(64, device="cuda"); bb = torch.randn(64, device="cuda")
            xr = x.view(112, 64, 512, 512)
            ref = torch.nn.functional.group_norm(xr, 8, w, bb).view(rows, row_len)
            eager = timeit(lambda: torch.nn.functional.group_norm(xr, 8, w, bb), 5)
        elif tname == "instnorm":
            w = bb = torch.zeros(1, device="cuda")
            xr = x.view(112, 64, 512, 512)
            ref = torch.nn.functional.instance_norm(xr).view(rows, row_len)
            eager = timeit(lambda: torch.nn.functional.instance_norm(xr), 5) if not one else 1.0
        elif tname in ("inst_sq", "inst_v1"):
            w = bb = torch.zeros(1, device="cuda")
            ref = torch.nn.functional.instance_norm(x.view(112, 64, 512, 512)).view(rows, row_len) if tname == "inst_v1" else x / torch.norm(x, p=2, dim=1, keepdim=True)
            eager = 1.0
        else:
            w = bb = torch.zeros(1, device="cuda")
            ref = x / torch.norm(x, p=2, dim=1, keepdim=True)
            eager = timeit(lambda: x / torch.norm(x, p=2, dim=1, keepdim=True), 5) if not one else 1.0
        print(f"{tname}: copy {copy_ms:.3f} ms ({gb / copy_ms:.0f} GB/s), eager {eager:.3f} ms", flush=True)
        for v in variants[tname]:
            label = f"{tname}{'_lag' if v.get('lag') else ''}{'_noex' if v.get('noex') else ''}{'_rot%d' % v.get('pieces', 8) if v.get('rot') else ''}{'_v%d' % v['vec'] if 'vec' in v else ''}_T{v['T']}_t{v['threads']}_b{v['nbuf']}_{'cl%d' % v['clusters'] if v['exchange'] else 'gl'}"
            if one and label != one:
                continue
            rec = dict(task=tname, label=label, **v, copy_ms=copy_ms, eager_ms=eager)
            try:
                k, chunk, shared, nteams = build(label, rows=rows, row_len=row_len, stat=t["stat"], vec=v.get("vec", t["vec"]),
                                                 affine=t.get("affine", 0), groups=t.get("groups", 1),
                                                 cpg=t.get("cpg", 1), hw=t.get("hw", 1), **{kk: vv for kk, vv in v.items() if kk != 'vec'})
                if v["exchange"] == 1:
                    nteams = v["clusters"]
                    grid = nteams * v["T"]
                else:
                    grid = nteams * v["T"]
                ws = torch.empty(rows * v["T"] * 3, device="cuda")
                cnt = torch.zeros(max(nteams, 1), dtype=torch.int32, device="cuda")
                def run():
                    cnt.zero_()
                    k((grid, 1, 1), (v["threads"], 1, 1), [x, w, bb, y, ws, cnt], shared_mem=shared)
                y.zero_()
                run(); torch.cuda.synchronize()
                err = (y - ref).abs().max().item()
                ms = timeit(run) if not one else 1.0
                rec.update(ok=True, ms=ms, pct_copy=100 * copy_ms / ms, vs_eager=eager / ms, max_err=err,
                           regs=k.registers, grid=grid, shared=shared, chunk=chunk)
                print(f"  {label}: {ms:.3f} ms = {100 * copy_ms / ms:.1f}% of copy, {eager / ms:.2f}x eager, err {err:.2e}, regs {k.registers}, grid {grid}", flush=True)
            except Exception as e:  # noqa
                rec.update(ok=False, error=repr(e)[:500])
                print(f"  {label}: FAILED {e!r}"[:600], flush=True)
            res.append(rec)
            json.dump(res, open(f"{out}/tma_probe.json", "w"), indent=1)
        del x, y, ref
        torch.cuda.empty_cache()

main()
