"""Generated row and column reduction kernels built for the host CPU (g++) and run against eager PyTorch.

Like test_template_pointwise_host.py (whose program runner this reuses), but a reduction kernel's
threads talk to each other: here every thread of a block is an OS thread, ``__syncthreads`` is a
barrier of the block, ``__shfl_xor_sync`` an exchange through a barrier of the warp, and
``__shared__`` memory a static (blocks run one after another). So the statistics passes, the
one-pass variance merges, the guards of partial chunks and rows, the streamed passes and the
column splits are checked without a GPU, on random and adversarial (NaN, ±Inf, large, denormal)
inputs, in the launch shapes the Coder picks and in forced ones.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from stitch_lsp.coders.template import lower, reduction_kernels as kernels  # noqa: E402
from stitch_lsp.coders.template.program import program_data  # noqa: E402
from tests.agents import test_template_pointwise_host as host  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.timeout(900),
              pytest.mark.skipif(host.GXX is None or host.INCLUDE is None, reason="needs g++ and the CUDA headers")]

SHIM = r"""
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <mutex>
#include <condition_variable>
#include <algorithm>
#include <vector_types.h>
struct StitchDim3 { unsigned x = 0, y = 1, z = 1; };
static thread_local StitchDim3 blockIdx, threadIdx;
static StitchDim3 blockDim, gridDim;
#define __global__
#define __launch_bounds__(...)
#define __shared__ static
template <typename T> static inline T __ldg(const T* p) { return *p; }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
using std::min;
using std::max;
#define __expf(x) expf(x)
#define __logf(x) logf(x)
#define __sinf(x) sinf(x)
#define __cosf(x) cosf(x)
#define __fdividef(a, b) ((a) / (b))
#define rsqrtf(x) (1.f / sqrtf(x))

// A reusable barrier for a fixed number of threads.
struct StitchBarrier {
  std::mutex m; std::condition_variable cv; int count = 0, waiting = 0; long gen = 0;
  void wait() {
    std::unique_lock<std::mutex> lock(m);
    long g = gen;
    if (++waiting == count) { waiting = 0; ++gen; cv.notify_all(); return; }
    cv.wait(lock, [&] { return gen != g; });
  }
};
// Blocks of a cluster run at the same time, each with its own barriers and warps (indexed by its rank).
static int stitch_cluster_size = 1;
static inline unsigned stitch_rank() { return blockIdx.x % stitch_cluster_size; }
static StitchBarrier stitch_block_barriers[16];
static std::vector<StitchBarrier> stitch_warp_barriers(16 * 32);
static float stitch_warp_slots[16 * 32][32];
static inline void __syncthreads() { stitch_block_barriers[stitch_rank()].wait(); }
template <typename T> static inline T __shfl_sync(unsigned, T v, int src) {
  const unsigned w = stitch_rank() * 32 + threadIdx.x / 32, lane = threadIdx.x % 32;
  stitch_warp_slots[w][lane] = v;
  stitch_warp_barriers[w].wait();
  const T got = stitch_warp_slots[w][src & 31];
  stitch_warp_barriers[w].wait();
  return got;
}
template <typename T> static inline T __shfl_xor_sync(unsigned, T v, int o) {
  const unsigned w = stitch_rank() * 32 + threadIdx.x / 32, lane = threadIdx.x % 32;
  stitch_warp_slots[w][lane] = v;
  stitch_warp_barriers[w].wait();
  const T got = stitch_warp_slots[w][lane ^ o];
  stitch_warp_barriers[w].wait();
  return got;
}
// Distributed shared memory: each block of the cluster registers its exchange array; a read by rank
// finds the same offset in that block's array.
static StitchBarrier stitch_cluster_barrier;
static float* stitch_cluster_arrays[16];
static inline void stitch_cluster_bind(float* p) { stitch_cluster_arrays[stitch_rank()] = p; }
static inline void stitch_cluster_sync() { stitch_cluster_barrier.wait(); }
static inline float stitch_cluster_ld(const float* p, unsigned rank) {
  return stitch_cluster_arrays[rank][p - stitch_cluster_arrays[stitch_rank()]];
}
#define __cluster_dims__(...)
// A team kernel's blocks all run at once here (as a cluster's): its barrier counts arrivals in memory, and a
// part of a row is staged by a plain copy (thread 0's, before the block's threads meet at the wait).
template <typename T> static inline T __ldcg(const T* p) { return *p; }
static inline void stitch_team_arrive(int* count) { __atomic_fetch_add(count, 1, __ATOMIC_SEQ_CST); }
static inline void stitch_team_wait(int* count, int blocks) {
  while (__atomic_load_n(count, __ATOMIC_SEQ_CST) < blocks) std::this_thread::yield();
}
static inline void stitch_stage_init(unsigned long long*, int, unsigned) {}
template <typename T> static inline void stitch_stage_row(T* dst, const T* src, int n, unsigned long long*) {
  std::memcpy(dst + ((unsigned long long)src & 15ull) / sizeof(T), src, sizeof(T) * n);  // stitch_stage_shift's
}
static inline void stitch_stage_wait(unsigned long long*, unsigned) { __syncthreads(); }
// A lagged kernel's mbarriers: the word holds the arrivals a phase needs (bits 0-15), those so far (16-31) and the
// phases completed (32-63); a tile's copy is a plain copy, then its arrival.
static inline void stitch_ring_init(unsigned long long* bars, int n, unsigned arrivals) {
  for (int b = 0; b < n; ++b) __atomic_store_n(bars + b, (unsigned long long)arrivals, __ATOMIC_SEQ_CST);
}
static inline void stitch_ring_arrive(unsigned long long* bar) {
  unsigned long long old = __atomic_load_n(bar, __ATOMIC_SEQ_CST), next;
  do {
    const unsigned long long need = old & 0xffffull, got = ((old >> 16) & 0xffffull) + 1, phase = old >> 32;
    next = got == need ? need | ((phase + 1) << 32) : need | (got << 16) | (phase << 32);
  } while (!__atomic_compare_exchange_n(bar, &old, next, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
}
static inline void stitch_ring_wait(unsigned long long* bar, unsigned parity) {
  while (((__atomic_load_n(bar, __ATOMIC_SEQ_CST) >> 32) & 1ull) == parity) std::this_thread::yield();
}
template <typename T> static inline void stitch_ring_copy(T* dst, const T* src, int n, unsigned long long* bar) {
  std::memcpy(dst + ((unsigned long long)src & 15ull) / sizeof(T), src, sizeof(T) * n);
  stitch_ring_arrive(bar);
}
static inline void stitch_count_release(int* count) { __atomic_fetch_add(count, 1, __ATOMIC_SEQ_CST); }
static inline void stitch_count_wait(const int* count, int need) {
  while (__atomic_load_n(count, __ATOMIC_SEQ_CST) < need) std::this_thread::yield();
}
static inline void __syncwarp(unsigned = 0xffffffffu) {
  stitch_warp_barriers[stitch_rank() * 32 + threadIdx.x / 32].wait();
}
// A block's dynamic shared memory: each block (a cluster's rank) runs its own copy of the kernel.
#define STITCH_HELD(name, floats) static float name[floats]
"""


def _driver(source: str, name: str, params: list[tuple[str, str]], n_in: int, grid: int, block: int) -> str:
    """Runs the blocks one by one (a cluster's together), a host thread per CUDA thread (barriers and shuffles
    need them all). A cluster's blocks each need their own shared memory: the kernel is compiled once per rank,
    in a namespace of its own, and rank r's threads run copy r."""
    warps = (block + 31) // 32
    m = re.search(r"__cluster_dims__\((\d+)", source)
    size = int(m.group(1)) if m else 1
    team = re.search(r"teams = gridDim\.x / (\d+);", source)
    if team:
        # A team kernel's blocks wait for one another: the whole grid at once, two teams that take turns at the rows.
        grid = size = min(grid, 2 * int(team.group(1)))
    if "lg_steps" in source:
        grid = size = min(grid, 16)  # a lagged kernel's blocks wait for one another's sums: all at once
    call = name
    if size > 1:
        head, marker, body = source.partition('extern "C" ')
        source = head + "".join(f"namespace stitch_r{r} {{\n{body}\n}}\n" for r in range(size))
        call = "stitch_kernels[r]"
    lines = [f"  gridDim.x = {grid}; blockDim.x = {block}; stitch_cluster_size = {size};",
             f"  stitch_cluster_barrier.count = {size * block};"]
    if size > 1:
        lines.append(f"  decltype(&stitch_r0::{name}) stitch_kernels[] = {{"
                     + ", ".join(f"&stitch_r{r}::{name}" for r in range(size)) + "};")
    return host.driver_main(source, params, n_in, lambda args: lines + [
        f"  for (unsigned r = 0; r < {size}; ++r) {{",
        f"    stitch_block_barriers[r].count = {block};",
        f"    for (unsigned w = 0; w < {warps}; ++w) stitch_warp_barriers[r * 32 + w].count = "
        f"{block} - 32 * (int)w < 32 ? {block} - 32 * (int)w : 32;",
        "  }",
        f"  for (unsigned first = 0; first < {grid}; first += {size}) {{",
        "    std::vector<std::thread> threads;",
        f"    for (unsigned r = 0; r < {size}; ++r) for (unsigned t = 0; t < {block}; ++t) threads.emplace_back([=] {{",
        f"      blockIdx.x = first + r; threadIdx.x = t; {call}({args});", "    });",
        "    for (auto& th : threads) th.join();", "  }"], shim=SHIM)


def _check(name: str, tmp: Path, monkeypatch, sizes: dict, config=None,
           cases=("random", "nan", "inf", "large", "denormal")):
    """Trace the bench task at ``sizes``, lower it (with ``config`` forced), run on the host, compare."""
    from stitch_lsp.worker.trace_handler import trace_task

    source = (REPO / "bench" / "tasks" / f"{name}.py").read_text()
    source += "\n" + "\n".join(f"{k} = {v}" for k, v in sizes.items()) + "\n"
    reply = trace_task(source)
    assert reply.ok, reply.message
    if config is not None:
        monkeypatch.setattr(kernels, "row_config", lambda *a: config)
        monkeypatch.setattr(kernels, "cluster_for", lambda *a, **k: None)  # the forced shape, not a cluster
    program = lower(reply.graph)
    assert program.kernels and all(k.kind in ("row_reduction", "col_reduction") for k in program.kernels), \
        program.notes
    if config is not None:
        assert all(k.block == config.block for k in program.kernels)
    monkeypatch.setattr(host, "_driver", _driver)
    host.check_against_eager(source, program, cases, tmp)
    return program


C = kernels.RowConfig
CASES = {
    # name: (sizes, forced config or None for the Coder's own)
    "layernorm-warp": ("norm_bias_residual_layernorm_fp32", {"M": 12, "N": 80}, None),
    # 640 fp32 = 160 chunks over 64 threads: a partial third chunk, two rows a block, 7 rows (a partial block)
    "layernorm-block-partial": ("norm_bias_residual_layernorm_fp32", {"M": 7, "N": 640}, C(64, 128, False)),
    "layernorm-streamed": ("norm_bias_residual_layernorm_bf16", {"M": 5, "N": 1000}, C(64, 64, True)),
    "layernorm-odd": ("norm_bias_residual_layernorm_bf16", {"M": 9, "N": 301}, C(64, 128, False)),
    "rmsnorm-block": ("norm_rmsnorm_bf16", {"M": 6, "N": 1024}, C(64, 128, False)),
    "residual-rmsnorm": ("norm_residual_rmsnorm_fp32", {"M": 10, "N": 80}, None),
    "groupnorm": ("norm_groupnorm_silu_fp32", {"B": 2, "C": 8, "H": 6, "W": 10, "GROUPS": 4}, None),
    "groupnorm-streamed": ("norm_groupnorm_silu_bf16", {"B": 2, "C": 8, "H": 8, "W": 16, "GROUPS": 2},
                           C(128, 128, True)),
    "softmax-causal": ("red_softmax_causal_bf16", {"B": 1, "H": 2, "S": 24}, None),
    "softmax-causal-block": ("red_softmax_causal_fp32", {"B": 1, "H": 2, "S": 40}, C(64, 256, False)),
    "logsumexp-streamed": ("red_logsumexp_fp32", {"M": 6, "V": 1000}, C(64, 64, True)),
    "logsumexp": ("red_logsumexp_bf16", {"M": 8, "V": 200}, None),
    "cross-entropy": ("red_cross_entropy_fp32", {"M": 8, "V": 200}, None),
    "cross-entropy-streamed": ("red_cross_entropy_bf16", {"M": 5, "V": 600}, C(64, 64, True)),
    "sum-last": ("red_sum_last_dim_fp32", {"M": 8, "N": 520}, C(64, 64, False)),
    "amax-middle": ("red_amax_middle_dim_bf16", {"B": 2, "S": 16, "N": 24}, None),
    "sum-middle-odd": ("red_sum_middle_dim_fp32", {"B": 3, "S": 9, "N": 10}, None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_reduction_kernel_matches_eager_on_the_host(case, tmp_path, monkeypatch):
    name, sizes, config = CASES[case]
    _check(name, tmp_path, monkeypatch, sizes, config)


OFFSET_CASES = {
    "layernorm-block": ("norm_bias_residual_layernorm_fp32", {"M": 7, "N": 640}, C(64, 128, False)),
    "layernorm-streamed": ("norm_bias_residual_layernorm_fp32", {"M": 5, "N": 1000}, C(64, 64, True)),
    "groupnorm-streamed": ("norm_groupnorm_silu_fp32", {"B": 2, "C": 8, "H": 8, "W": 16, "GROUPS": 2},
                           C(128, 128, True)),
}


@pytest.mark.parametrize("case", sorted(OFFSET_CASES))
def test_one_pass_variance_is_as_accurate_as_eager_under_a_large_offset(case, tmp_path, monkeypatch):
    """Inputs + 1000 with unit spread (fp32): sums around a thread's own value and means merged as
    offsets from the row's first value keep the result at least as close to the float64 answer as
    eager's own (at this offset neither is within 1e-4 of the other: a value's ulp is 6e-5)."""
    from stitch_lsp.worker.trace_handler import trace_task

    name, sizes, config = OFFSET_CASES[case]
    source = (REPO / "bench" / "tasks" / f"{name}.py").read_text()
    source += "\n" + "\n".join(f"{k} = {v}" for k, v in sizes.items()) + "\n"
    reply = trace_task(source)
    assert reply.ok, reply.message
    monkeypatch.setattr(kernels, "row_config", lambda *a: config)
    monkeypatch.setattr(kernels, "cluster_for", lambda *a, **k: None)
    monkeypatch.setattr(host, "_driver", _driver)
    prog = program_data(lower(reply.graph))
    ns: dict = {}
    exec(compile(source, "task", "exec"), ns)
    torch.manual_seed(0)
    model = ns["Model"](*ns["get_init_inputs"]())
    state = [t.detach() for t in list(model.parameters()) + list(model.buffers())]
    torch.manual_seed(1)
    values = [v + 1000.0 for v in ns["get_inputs"]()]
    with torch.no_grad():
        eager = model(*[v.clone() for v in values])
        exact = model.double()(*[v.double() for v in values])
    got = host._run_program(prog, state + [v.clone() for v in values], tmp_path)
    ours_err = float((got.double() - exact).abs().max())
    eager_err = float((eager.double() - exact).abs().max())
    assert ours_err <= eager_err, (ours_err, eager_err)
