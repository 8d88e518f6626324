"""Stitch's timing beside triton.testing.do_bench (and NVBench's cuda-bench) on the same pair, one script.

The pair: RMSNorm over 8192 x 4096 fp32 (bench/tasks/norm_rmsnorm_fp32.py), its eager
reference and torch.compile of it, against a handwritten one-block-per-row CUDA kernel
loaded through Stitch's NVRTC loader. Each contender is timed:

- by Stitch (``stitch_lsp.worker.timing.run_interleaved``: GPU time of calls queued behind
  a blocking kernel, L2 flushed, inputs rotated, contenders interleaved, sampling until
  every ratio's 95 % interval is within ±1.5 % or the time cap);
- by ``triton.testing.do_bench`` (back-to-back calls, L2 flushed, median), each contender
  in turn, three alternations, the median of the three medians;
- by cuda-bench (NVBench's Python package: blocking kernel, L2 flush, its own noise-based
  stop), when it imports; in a child process so its command-line runner cannot end this one.

    python bench/timing_side_by_side.py [--out bench/results/timing_side_by_side_h200.json]
        [--mode default|max-autotune-no-cudagraphs] [--budget 2] [--no-cuda-bench]

Prints the table and whether Stitch's GPU-time ratio vs torch.compile is within 5 % of
do_bench's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from stitch_lsp.runtime.loader import load_kernel  # noqa: E402
from stitch_lsp.contract.intervals import median_interval, round_ratios  # noqa: E402
from stitch_lsp.worker.timing import run_interleaved  # noqa: E402

M, N, EPS = 8192, 4096, 1e-6

KERNEL = r'''
extern "C" __global__ void rmsnorm_rows(const float* __restrict__ x, const float* __restrict__ w,
                                        float* __restrict__ y, int n, float eps) {
    const float* xr = x + (size_t)blockIdx.x * n;
    float* yr = y + (size_t)blockIdx.x * n;
    float s = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) { float v = xr[i]; s += v * v; }
    __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.f;
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (threadIdx.x == 0) part[0] = s;
    }
    __syncthreads();
    float r = rsqrtf(part[0] / n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * r * w[i];
}
'''


class Reference(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(1.0 + 0.1 * torch.randn(N))

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(variance + EPS) * self.weight


class Handwritten(torch.nn.Module):
    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight = weight
        self.kernel = load_kernel(KERNEL, "rmsnorm_rows", filename="rmsnorm_rows.cu")

    def forward(self, x):
        y = torch.empty_like(x)
        self.kernel(grid=(x.shape[0],), block=(256,), args=[x, self.weight, y, x.shape[1], EPS])
        return y


def contenders(mode: str):
    torch.manual_seed(0)
    ref = Reference().cuda()
    cand = Handwritten(ref.weight.detach())
    compiled = torch.compile(ref) if mode == "default" else torch.compile(ref, mode=mode)
    sets = [[torch.randn(M, N, device="cuda")] for _ in range(3)]
    with torch.no_grad():
        want = ref(*sets[0])
        got = cand(*sets[0])
        compiled(*sets[0])
        torch.cuda.synchronize()
    err = (got - want).abs().max().item()
    assert err < 1e-3, f"the handwritten kernel is wrong: max abs err {err}"
    return {"eager": lambda a: ref(*a), "compiled": lambda a: compiled(*a), "candidate": lambda a: cand(*a)}, sets, err


def by_stitch(fns, sets, budget: float) -> dict:
    with torch.no_grad():
        run = run_interleaved(fns, sets, cuda=True, budget_s=budget,
                              pairs=[("eager", "candidate"), ("compiled", "candidate")])
    s = run.samples
    out = {"rounds": run.rounds, "calls_per_round": run.calls_per_round, "converged": run.converged,
           "stop": run.stop_reason, "launch": run.launch, "retried_rounds": run.retried_rounds,
           "seconds": round(run.seconds, 3),
           "gpu_median_us": {k: 1e3 * statistics.median(v.gpu_ms) for k, v in s.items()},
           "latency_median_us": {k: 1e3 * statistics.median(v.latency_ms) for k, v in s.items()}}
    for base in ("eager", "compiled"):
        ci = median_interval(round_ratios(s[base].round_gpu_ms, s["candidate"].round_gpu_ms))
        lat = median_interval(round_ratios(s[base].latency_ms, s["candidate"].latency_ms))
        out[f"ratio_vs_{base}"] = [ci.value, ci.low, ci.high] if ci else None
        out[f"latency_ratio_vs_{base}"] = [lat.value, lat.low, lat.high] if lat else None
    return out


def by_do_bench(fns, sets, graph: bool = False, runs: int = 5) -> dict:
    """do_bench (L2 flushed before each call, host cost hidden only while the host keeps ahead of the GPU), or
    do_bench_cudagraph (calls replayed from a CUDA graph: no host cost at all, but no L2 flush either)."""
    from triton.testing import do_bench, do_bench_cudagraph

    times: dict[str, list[float]] = {k: [] for k in fns}
    with torch.no_grad():
        for _ in range(runs):
            for name, fn in fns.items():
                if graph:
                    times[name].append(do_bench_cudagraph(lambda: fn(sets[0]), rep=100, return_mode="median"))
                else:
                    times[name].append(do_bench(lambda: fn(sets[0]), warmup=25, rep=200, return_mode="median"))
    med = {k: 1e3 * statistics.median(v) for k, v in times.items()}
    best = {k: 1e3 * min(v) for k, v in times.items()}
    return {"median_us": med, "min_us": best, "runs_us": {k: [1e3 * t for t in v] for k, v in times.items()},
            "ratio_vs_eager": med["eager"] / med["candidate"], "ratio_vs_compiled": med["compiled"] / med["candidate"],
            "best_ratio_vs_compiled": best["compiled"] / best["candidate"],
            "run_ratios_vs_compiled": [c / k for c, k in zip(times["compiled"], times["candidate"])]}


def cuda_bench_child(mode: str, out: str) -> None:
    """Runs in a child process: each contender as one NVBench benchmark; writes NVBench's JSON to ``out``."""
    import cuda.bench as bench

    fns, sets, _ = contenders(mode)

    def make(fn):
        def benchmark(state):
            def launcher(launch):
                stream = torch.cuda.ExternalStream(launch.get_stream().addressof())
                with torch.cuda.stream(stream), torch.no_grad():
                    fn(sets[0])
            state.exec(launcher)
        return benchmark

    for name, fn in fns.items():
        f = make(fn)
        f.__name__ = name
        bench.register(f)
    bench.run_all_benchmarks([sys.argv[0], "--json", out, "--timeout", "10"])


def by_cuda_bench(mode: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "nvbench.json"
        proc = subprocess.run([sys.executable, __file__, "--cuda-bench-child", out.as_posix(), "--mode", mode],
                              capture_output=True, text=True, timeout=240)
        if not out.exists():
            return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-5:]}
        data = json.loads(out.read_text())
    found: dict[str, dict[str, float]] = {}
    for b in data.get("benchmarks", []):
        for st in b.get("states", []):
            for summ in st.get("summaries", []):
                tag = summ.get("tag", "")
                if "time" not in tag:
                    continue
                for d in summ.get("data", []):
                    if d.get("name") == "value":
                        try:
                            found.setdefault(b["name"], {})[tag] = float(d["value"]) * 1e6
                        except (TypeError, ValueError, KeyError):
                            pass
    out_d: dict = {"times_us": found}
    key = next((t for t in ("nv/cold/time/gpu/median", "nv/cold/time/gpu/mean")
                if all(t in found.get(n, {}) for n in ("eager", "compiled", "candidate"))), None)
    if key:
        out_d["used"] = key
        out_d["ratio_vs_eager"] = found["eager"][key] / found["candidate"][key]
        out_d["ratio_vs_compiled"] = found["compiled"][key] / found["candidate"][key]
    return out_d


def versions() -> dict:
    p = torch.cuda.get_device_properties(0)
    smi = ""
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
    except OSError:
        pass
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = ""
    return {"gpu": p.name, "nvidia_smi": smi, "torch": torch.__version__, "cuda": torch.version.cuda,
            "triton": triton_version, "python": platform.python_version()}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="")
    parser.add_argument("--mode", default="default", choices=("default", "max-autotune-no-cudagraphs"))
    parser.add_argument("--budget", type=float, default=2.0, help="Stitch's time cap (s)")
    parser.add_argument("--no-cuda-bench", action="store_true")
    parser.add_argument("--cuda-bench-child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cuda_bench_child:
        cuda_bench_child(args.mode, args.cuda_bench_child)
        return 0
    fns, sets, err = contenders(args.mode)
    result = {"pair": f"RMSNorm {M}x{N} fp32: handwritten one-block-per-row kernel vs eager and torch.compile",
              "compile_mode": args.mode, "max_abs_err": err, "versions": versions(),
              "command": "python " + " ".join(shlex.quote(a) for a in sys.argv)}
    result["stitch"] = by_stitch(fns, sets, args.budget)
    result["do_bench"] = by_do_bench(fns, sets)
    try:
        result["do_bench_cudagraph"] = by_do_bench(fns, sets, graph=True, runs=3)
    except Exception as exc:  # noqa: BLE001 - a contender that cannot be captured
        result["do_bench_cudagraph"] = {"error": f"{type(exc).__name__}: {exc}"}
    result["stitch_again"] = by_stitch(fns, sets, args.budget)  # run to run, same process
    if not args.no_cuda_bench:
        try:
            result["cuda_bench"] = by_cuda_bench(args.mode)
        except Exception as exc:  # noqa: BLE001 - an optional third opinion
            result["cuda_bench"] = {"error": f"{type(exc).__name__}: {exc}"}
    st, db = result["stitch"], result["do_bench"]
    diff = st["ratio_vs_compiled"][0] / db["ratio_vs_compiled"] - 1.0
    result["stitch_vs_do_bench_compile_ratio_diff"] = diff
    result["within_5pct"] = abs(diff) <= 0.05
    result["stitch_vs_do_bench_best_diff"] = st["ratio_vs_compiled"][0] / db["best_ratio_vs_compiled"] - 1.0
    if "ratio_vs_compiled" in result.get("do_bench_cudagraph", {}):
        result["stitch_vs_do_bench_cudagraph_diff"] = (st["ratio_vs_compiled"][0]
                                                       / result["do_bench_cudagraph"]["ratio_vs_compiled"] - 1.0)
    if "ratio_vs_compiled" in result.get("cuda_bench", {}):
        cb_ratio = result["cuda_bench"]["ratio_vs_compiled"]
        result["stitch_vs_cuda_bench_diff"] = st["ratio_vs_compiled"][0] / cb_ratio - 1.0
    print(json.dumps(result, indent=1))
    print(f"\n{'':28}{'eager µs':>10}{'compile µs':>12}{'kernel µs':>11}{'vs eager':>10}{'vs compile':>12}")
    for label, med, re_, rc in (
            ("stitch (GPU time)", st["gpu_median_us"], st["ratio_vs_eager"][0], st["ratio_vs_compiled"][0]),
            ("stitch, again", result["stitch_again"]["gpu_median_us"], result["stitch_again"]["ratio_vs_eager"][0],
             result["stitch_again"]["ratio_vs_compiled"][0]),
            ("stitch (call latency)", st["latency_median_us"], st["latency_ratio_vs_eager"][0],
             st["latency_ratio_vs_compiled"][0]),
            ("do_bench (median of 5)", db["median_us"], db["ratio_vs_eager"], db["ratio_vs_compiled"]),
            ("do_bench (best of 5)", db["min_us"], db["min_us"]["eager"] / db["min_us"]["candidate"],
             db["best_ratio_vs_compiled"])):
        print(f"{label:28}{med['eager']:10.1f}{med['compiled']:12.1f}{med['candidate']:11.1f}{re_:10.3f}{rc:12.3f}")
    dg = result.get("do_bench_cudagraph", {})
    if "median_us" in dg:
        m = dg["median_us"]
        print(f"{'do_bench_cudagraph (no flush)':28}{m['eager']:10.1f}{m['compiled']:12.1f}{m['candidate']:11.1f}"
              f"{dg['ratio_vs_eager']:10.3f}{dg['ratio_vs_compiled']:12.3f}")
    print("do_bench runs, compile / kernel: " + " ".join(f"{r:.3f}" for r in db["run_ratios_vs_compiled"]))
    cb = result.get("cuda_bench", {})
    if "ratio_vs_compiled" in cb:
        t = {k: v[cb["used"]] for k, v in cb["times_us"].items()}
        print(f"{'cuda-bench (' + cb['used'].split('/')[-1] + ')':28}{t['eager']:10.1f}{t['compiled']:12.1f}"
              f"{t['candidate']:11.1f}{cb['ratio_vs_eager']:10.3f}{cb['ratio_vs_compiled']:12.3f}")
    elif cb:
        print(f"cuda-bench: {cb.get('error')}")
    print(f"\nStitch's ratio vs torch.compile {st['ratio_vs_compiled'][0]:.3f} "
          f"[{st['ratio_vs_compiled'][1]:.3f}, {st['ratio_vs_compiled'][2]:.3f}], do_bench's "
          f"{db['ratio_vs_compiled']:.3f} (median of 5): {100 * diff:+.1f} % -> "
          f"{'within' if result['within_5pct'] else 'NOT within'} 5 %; vs do_bench's best of 5 "
          f"{100 * result['stitch_vs_do_bench_best_diff']:+.1f} %"
          + "".join(f"; vs {k.split('_vs_')[1][:-5]} {100 * result[k]:+.1f} %"
                    for k in ("stitch_vs_do_bench_cudagraph_diff", "stitch_vs_cuda_bench_diff") if k in result))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
