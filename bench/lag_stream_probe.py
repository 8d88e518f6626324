"""Hand-written probe for rows too large for the chip (KernelBench's GroupNorm: 896 groups of 8 MB): a persistent
grid streams tiles, taking each tile's statistics `lag` steps before its outputs and waiting only on a count that
was reached steps earlier (no barrier a row). `lagnorm` re-reads the lagged tile from L2; `lagws4` (the design the
lagged kernels generate) holds it in a ring in shared memory, with producer, publisher and gatherer warps. Timed
against the copy and eager in the same run.
On the GPU machine: . bench/gpu_env.sh; python3 bench/lag_stream_probe.py OUTDIR
Results: bench/results/memory_bound_h100/lag_stream_h100.md."""
import json, os, sys
import torch
sys.path.insert(0, ".")
from stitch_lsp.runtime.loader import load_kernel
from bench.probe_common import CUDA_HELPERS, timeit

SRC = CUDA_HELPERS + r"""
__device__ __forceinline__ float4 ld_first_pass(const float* p, unsigned long long pol) {
#if HINTS == 1
  float4 v;
  asm volatile("ld.global.L2::cache_hint.v4.f32 {%0,%1,%2,%3}, [%4], %5;"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p), "l"(pol));
  return v;
#else
  return __ldg(reinterpret_cast<const float4*>(p));
#endif
}
__device__ __forceinline__ float4 ld_second_pass(const float* p) {
#if HINTS >= 1
  return __ldcs(reinterpret_cast<const float4*>(p));
#else
  return __ldg(reinterpret_cast<const float4*>(p));
#endif
}
__device__ __forceinline__ void st_out(float* p, float4 v) {
#if HINTS >= 1
  __stcs(reinterpret_cast<float4*>(p), v);
#else
  *reinterpret_cast<float4*>(p) = v;
#endif
}

#define TILE (THREADS * 4 * UNROLL)
#define TP ((ROW_LEN + TILE - 1) / TILE)

extern "C" __global__ void __launch_bounds__(THREADS, BPS) lagnorm(const float* __restrict__ x,
    const float* __restrict__ wgt, const float* __restrict__ bia, float* __restrict__ y,
    float* __restrict__ ws, unsigned* __restrict__ cnt, int lag) {
  __shared__ float red[2][THREADS / 32];
  __shared__ float fin[2];
  const long long NT = (long long)ROWS * TP;
  const int NB = gridDim.x, b = blockIdx.x, tid = threadIdx.x;
  const long long steps = (NT - b + NB - 1) / NB;
  unsigned long long pol = 0;
#if HINTS == 1
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
#endif
  float s1 = 0.f, s2 = 0.f, sh = 0.f;
  long long srow = -1, orow = -1;
  float oshift = 0.f, mean = 0.f, rstd = 0.f;
  for (long long k = 0; k < steps + lag; ++k) {
    const long long ko = k - lag;
    const bool do_out = ko >= 0 && ko < steps, do_stat = k < steps;
    long long to = 0, ro = 0; int oo = 0;
    if (do_out) {
      to = b + ko * NB; ro = to / TP; oo = (int)(to - ro * TP) * TILE;
      if (ro != orow && !NOWAIT) {  // this row's statistics: counted steps ago, unless a block fell behind
        orow = ro;
        if (tid < 32) {
          if (tid == 0) {
            const unsigned need = TP < NB ? TP : NB;
            while (ld_acquire(&cnt[ro]) < need) {}
          }
          __syncwarp();
          float A = 0.f, B = 0.f;
          for (int q = tid; q < NB; q += 32) {
            const long long rel = ((q - ro * TP) % NB + NB) % NB;
            if (rel < TP) { A += __ldcg(ws + (ro * NB + q) * 2); B += __ldcg(ws + (ro * NB + q) * 2 + 1); }
          }
          #pragma unroll
          for (int o = 16; o > 0; o >>= 1) { A += __shfl_xor_sync(~0u, A, o); B += __shfl_xor_sync(~0u, B, o); }
          if (tid == 0) { fin[0] = A; fin[1] = B; }
        }
        __syncthreads();
        oshift = __ldg(x + ro * ROW_LEN);
        const float m = fin[0] / ROW_LEN;
        mean = oshift + m;
        rstd = rsqrtf(fmaxf(fin[1] / ROW_LEN - m * m, 0.f) + 1e-5f);
        __syncthreads();
      }
    }
    long long ts = 0, rs = 0; int os = 0;
    float4 v[UNROLL], o[UNROLL];
    if (do_stat && !NOSTAT) {
      ts = b + k * NB; rs = ts / TP; os = (int)(ts - rs * TP) * TILE;
      if (rs != srow) { srow = rs; sh = __ldg(x + rs * ROW_LEN); s1 = 0.f; s2 = 0.f; }
      #pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int j = os + (u * THREADS + tid) * 4;
        v[u] = j < ROW_LEN ? ld_first_pass(x + rs * ROW_LEN + j, pol) : make_float4(sh, sh, sh, sh);
      }
    }
    if (do_out) {
      #pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int j = oo + (u * THREADS + tid) * 4;
        if (j < ROW_LEN) o[u] = ld_second_pass(x + ro * ROW_LEN + j);
      }
    }
    if (do_stat && !NOSTAT) {
      #pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        float d;
        d = v[u].x - sh; s1 += d; s2 = fmaf(d, d, s2); d = v[u].y - sh; s1 += d; s2 = fmaf(d, d, s2);
        d = v[u].z - sh; s1 += d; s2 = fmaf(d, d, s2); d = v[u].w - sh; s1 += d; s2 = fmaf(d, d, s2);
      }
    }
    if (do_out) {
      #pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int j = oo + (u * THREADS + tid) * 4;
        if (j < ROW_LEN) {
          const int ch = (int)(ro % GROUPS) * CPG + j / HW;
          const float g = __ldg(wgt + ch) * rstd, bo = __ldg(bia + ch) - mean * g;
          float4 r = o[u];
          r.x = fmaf(r.x, g, bo); r.y = fmaf(r.y, g, bo); r.z = fmaf(r.z, g, bo); r.w = fmaf(r.w, g, bo);
          st_out(y + ro * ROW_LEN + j, r);
        }
      }
    }
    if (do_stat && !NOSTAT) {
      const long long tn = ts + NB;
      if (tn >= NT || tn / TP != rs) {  // this block's last tile of the row: hand its partial sums on
        float a = s1, c = s2;
        #pragma unroll
        for (int q = 16; q > 0; q >>= 1) { a += __shfl_xor_sync(~0u, a, q); c += __shfl_xor_sync(~0u, c, q); }
        if ((tid & 31) == 0) { red[0][tid >> 5] = a; red[1][tid >> 5] = c; }
        __syncthreads();
        if (tid < 32) {
          a = tid < THREADS / 32 ? red[0][tid] : 0.f; c = tid < THREADS / 32 ? red[1][tid] : 0.f;
          #pragma unroll
          for (int q = 16; q > 0; q >>= 1) { a += __shfl_xor_sync(~0u, a, q); c += __shfl_xor_sync(~0u, c, q); }
          if (tid == 0) {
            ws[(rs * NB + b) * 2] = a; ws[(rs * NB + b) * 2 + 1] = c;
            __threadfence();
            atomicAdd(&cnt[rs], 1u);
          }
        }
        __syncthreads();
      }
    }
  }
}


__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(su32(bar)) : "memory"); }

#define W (THREADS / 32)
// Three helper warps: the producer fills the ring; the publisher hands on the block's sums of each row; the
// gatherer waits for each of the block's rows to be counted complete, adds the blocks' sums (in the blocks'
// order, or reads the sums the blocks added atomically when ATOMIC) and hands mean and rstd to the consumer
// warps through shared memory, ahead of their outputs.
#define REDS2 32
extern "C" __global__ void __launch_bounds__(THREADS + 96, BPS) lagws4(const float* __restrict__ x,
    const float* __restrict__ wgt, const float* __restrict__ bia, float* __restrict__ y,
    float* __restrict__ ws, unsigned* __restrict__ cnt, int lag) {
  extern __shared__ float4 smem4[];
  float* ring = reinterpret_cast<float*>(smem4);
  __shared__ __align__(8) unsigned long long full[RING], empty[RING], fullred[REDS2], readyb[REDS2];
  __shared__ float red[REDS2][2][W];
  __shared__ float rowstat[REDS2][2];
  const long long NT = (long long)ROWS * TP;
  const int NB = gridDim.x, b = blockIdx.x, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const long long steps = (NT - b + NB - 1) / NB;
  float* acc = ws + (long long)ROWS * NB * 2;
  const unsigned need = TP < NB ? TP : NB;
  if (tid == 0) {
    for (int q = 0; q < RING; ++q) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(su32(&full[q])) : "memory");
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(su32(&empty[q])), "r"(W) : "memory");
    }
    for (int q = 0; q < REDS2; ++q) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(su32(&fullred[q])), "r"(W) : "memory");
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(su32(&readyb[q])) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp == W) {  // the producer
    if (lane == 0) {
      for (long long q = 0; q < steps; ++q) {
        const int slot = (int)(q % RING);
        if (q >= RING) mbar_wait(&empty[slot], (unsigned)(((q / RING) - 1) & 1));
        const long long t = b + q * NB, r = t / TP; const int off = (int)(t - r * TP) * TILE;
        const unsigned bytes = 4u * (unsigned)min(TILE, ROW_LEN - off);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(su32(&full[slot])), "r"(bytes) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(su32(ring + slot * TILE)), "l"(x + r * ROW_LEN + off), "r"(bytes), "r"(su32(&full[slot])) : "memory");
      }
    }
    return;
  }
  if (warp == W + 1) {  // the publisher
    if (lane == 0) {
      int seq = 0;
      for (long long k = 0; k < steps; ++k) {
        const long long ts = b + k * NB, rs = ts / TP, tn = ts + NB;
        if (!(tn >= NT || tn / TP != rs)) continue;
        const int rb = seq % REDS2;
        mbar_wait(&fullred[rb], (unsigned)((seq / REDS2) & 1));
        ++seq;
        float A = 0.f, B = 0.f;
        for (int q = 0; q < W; ++q) { A += red[rb][0][q]; B += red[rb][1][q]; }
#if ATOMIC
        atomicAdd(acc + rs * 2, A); atomicAdd(acc + rs * 2 + 1, B);
#else
        ws[(rs * NB + b) * 2] = A; ws[(rs * NB + b) * 2 + 1] = B;
#endif
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" :: "l"(cnt + rs) : "memory");
      }
    }
    return;
  }
  if (warp == W + 2) {  // the gatherer
    int seq = 0;
    for (long long k = 0; k < steps; ++k) {
      const long long ts = b + k * NB, rs = ts / TP, tn = ts + NB;
      if (!(tn >= NT || tn / TP != rs)) continue;
      const int rb = seq % REDS2;
      ++seq;
      if (lane == 0) while (ld_acquire(cnt + rs) < need) {}
      __syncwarp();
#if ATOMIC
      const float A = __ldcg(acc + rs * 2), B = __ldcg(acc + rs * 2 + 1);
#else
      float A = 0.f, B = 0.f;
      const int base = (int)((rs * TP) % NB);
      const float2* part = reinterpret_cast<const float2*>(ws) + rs * NB;
      #pragma unroll 8
      for (int q = lane; q < NB; q += 32) {
        const float2 p = __ldcg(part + q);
        if ((q - base + NB) % NB < TP) { A += p.x; B += p.y; }
      }
      #pragma unroll
      for (int o = 16; o > 0; o >>= 1) { A += __shfl_xor_sync(~0u, A, o); B += __shfl_xor_sync(~0u, B, o); }
#endif
      if (lane == 0) {
        const float sh = __ldg(x + rs * ROW_LEN), m = A / ROW_LEN;
        rowstat[rb][0] = sh + m;
        rowstat[rb][1] = rsqrtf(fmaxf(B / ROW_LEN - m * m, 0.f) + 1e-5f);
        mbar_arrive(&readyb[rb]);
      }
    }
    return;
  }
  float s1 = 0.f, s2 = 0.f, sh = 0.f;
  long long srow = -1, orow = -1;
  int rowseq = 0, oseq = 0;
  float mean = 0.f, rstd = 0.f;
  for (long long k = 0; k < steps + lag; ++k) {
    const long long ko = k - lag;
    if (k < steps) {
      const long long ts = b + k * NB, rs = ts / TP; const int os = (int)(ts - rs * TP) * TILE;
      if (rs != srow) { srow = rs; sh = __ldg(x + rs * ROW_LEN); s1 = 0.f; s2 = 0.f; }
      mbar_wait(&full[k % RING], (unsigned)((k / RING) & 1));
      const float* tile = ring + (k % RING) * TILE;
      #pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int j = (u * THREADS + tid) * 4;
        if (os + j < ROW_LEN) {
          const float4 v = *reinterpret_cast<const float4*>(tile + j);
          float d;
          d = v.x - sh; s1 += d; s2 = fmaf(d, d, s2); d = v.y - sh; s1 += d; s2 = fmaf(d, d, s2);
          d = v.z - sh; s1 += d; s2 = fmaf(d, d, s2); d = v.w - sh; s1 += d; s2 = fmaf(d, d, s2);
        }
      }
      const long long tn = ts + NB;
      if (tn >= NT || tn / TP != rs) {
        float a = s1, c = s2;
        #pragma unroll
        for (int q = 16; q > 0; q >>= 1) { a += __shfl_xor_sync(~0u, a, q); c += __shfl_xor_sync(~0u, c, q); }
        const int rb = rowseq++ % REDS2;
        if (lane == 0) { red[rb][0][warp] = a; red[rb][1][warp] = c; mbar_arrive(&fullred[rb]); }
      }
    }
    if (ko >= 0 && ko < steps) {
      const long long to = b + ko * NB, ro = to / TP; const int oo = (int)(to - ro * TP) * TILE;
      if (ro != orow) {
        orow = ro;
        const int rb = oseq % REDS2;
        mbar_wait(&readyb[rb], (unsigned)((oseq / REDS2) & 1));
        ++oseq;
        mean = rowstat[rb][0]; rstd = rowstat[rb][1];
      }
      const float* tile = ring + (ko % RING) * TILE;
      #pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int j = (u * THREADS + tid) * 4;
        if (oo + j < ROW_LEN) {
          const int ch = (int)(ro % GROUPS) * CPG + (oo + j) / HW;
          const float g = __ldg(wgt + ch) * rstd, bo = __ldg(bia + ch) - mean * g;
          float4 r = *reinterpret_cast<const float4*>(tile + j);
          r.x = fmaf(r.x, g, bo); r.y = fmaf(r.y, g, bo); r.z = fmaf(r.z, g, bo); r.w = fmaf(r.w, g, bo);
          st_out(y + ro * ROW_LEN + oo + j, r);
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[ko % RING]);
    }
  }
}
"""




def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    batch, ch, groups, hw = 112, 64, 8, 512 * 512
    rows, row_len = batch * groups, ch // groups * hw
    x = torch.rand(batch, ch, 512, 512, device="cuda")
    y = torch.empty_like(x)
    w = torch.randn(ch, device="cuda"); bb = torch.randn(ch, device="cuda")
    gb = 2 * x.numel() * 4 / 1e9
    ref = torch.nn.functional.group_norm(x, groups, w, bb)
    res = []
    # The last call's variants; earlier calls' kernels (a block-wide ring, a barrier-free ring, one helper warp)
    # are in this file as of commit 457e160.
    variants = [dict(kernel="lagws4", threads=t, unroll=u, bps=1, ring=r, extra=e, hints=1, atomic=a)
                for a in (0, 1)
                for (t, u, r, es) in [(512, 4, 6, (1, 2, 3)), (768, 2, 9, (2, 3, 4)), (640, 3, 7, (2, 3, 4))]
                for e in es]
    if os.environ.get("VARIANTS"):
        variants = json.loads(os.environ["VARIANTS"])
    one = os.environ.get("PROBE_ONLY")
    for rep in range(1 if one else 2):
        copy_ms = timeit(lambda: y.copy_(x))
        eager = timeit(lambda: torch.nn.functional.group_norm(x, groups, w, bb), 5)
        print(f"[{rep}] copy {copy_ms:.3f} ms ({gb / copy_ms:.0f} GB/s), eager {eager:.3f} ms ({100 * copy_ms / eager:.1f}%)", flush=True)
        res.append(dict(rep=rep, label="copy", ms=copy_ms, eager_ms=eager))
        for v in variants:
            kname = v.get("kernel", "lagnorm")
            label = ({"lagws4": "ws4_r{ring}_"}.get(kname, "l2_")).format(**v) + "t{threads}_u{unroll}_b{bps}_e{extra}_h{hints}".format(**v) + "".join(f"_{f}" for f in ("nowait", "nostat", "atomic") if v.get(f))
            if one and label != one:
                continue
            rec = dict(rep=rep, label=label, **v, copy_ms=copy_ms, eager_ms=eager)
            try:
                defs = dict(ROWS=rows, ROW_LEN=row_len, THREADS=v["threads"], UNROLL=v["unroll"], BPS=v["bps"],
                            HINTS=v["hints"], RING=v.get("ring", 1), NOWAIT=v.get("nowait", 0), NOSTAT=v.get("nostat", 0), ATOMIC=v.get("atomic", 0), GROUPS=groups, CPG=ch // groups, HW=hw)
                head = "".join(f"#define {k} {val}\n" for k, val in defs.items())
                k = load_kernel(head + SRC, kname, filename=f"lag_{label}.cu")
                tile = v["threads"] * 4 * v["unroll"]
                shared = 4 * tile * v.get("ring", 0) if kname == "lagws4" else 0
                block = v["threads"] + (96 if kname == "lagws4" else 0)
                grid = min(k.resident_blocks(block, shared), 132 * v["bps"])
                tp = -(-row_len // tile)
                lag = -(-tp // grid) + v["extra"]
                if kname == "lagws4" and lag >= v["ring"]:
                    raise ValueError(f"lag {lag} does not fit a ring of {v['ring']}")
                ws = torch.empty(rows * grid * 2 + rows * 2, device="cuda")
                cnt = torch.zeros(2 * rows, dtype=torch.int32, device="cuda")

                def run():
                    cnt.zero_()
                    if v.get("atomic"):
                        ws[rows * grid * 2:].zero_()
                    k((grid, 1, 1), (block, 1, 1), [x, w, bb, y, ws, cnt, lag], shared_mem=shared, cooperative=True)
                y.zero_(); run(); torch.cuda.synchronize()
                err = (y - ref).abs().max().item()
                ms = timeit(run) if not one else float("nan")
                l2_mb = lag * grid * tile * 4 / 2**20
                rec.update(ok=True, ms=ms, pct_copy=100 * copy_ms / ms, vs_eager=eager / ms, max_err=err,
                           regs=k.registers, grid=grid, lag=lag, in_flight_mb=l2_mb)
                print(f"  {label}: {ms:.3f} ms = {100 * copy_ms / ms:.1f}% of copy, {eager / ms:.2f}x eager, err {err:.2e}, "
                      f"regs {k.registers}, grid {grid}, lag {lag} ({l2_mb:.1f} MB)", flush=True)
            except Exception as e:  # noqa: BLE001 - a probe records the failure and goes on
                rec.update(ok=False, error=repr(e)[:500])
                print(f"  {label}: FAILED {e!r}"[:600], flush=True)
            res.append(rec)
            json.dump(res, open(f"{out}/lag_probe.json", "w"), indent=1)


main()
