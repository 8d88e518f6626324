"""What the Ray executor costs over the local one, per task and per run, on the CPU stand-in.

    python bench/ray_overhead.py [--small 20] [--large 220] [--repeats 3] [--out bench/results/ray_overhead]

Both executors run the same suites of trivial tasks through the stand-in backend
(tests/bench/fake_backend.py: no GPU, a task takes no time of its own), each with one
worker: the local executor's shard process, and one Ray actor (holding one shard process)
on a one-node Ray cluster this script starts with one fake GPU. Runs of two sizes give
the per-task cost (the slope) and the fixed cost (start, connection, actors) apart.
Needs the cluster extra (pip install 'stitch-lsp[cluster]').
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TASK = "LEVEL = 1\nTAGS = ('pw',)\nclass Model: pass\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n"
BACKEND = "tests.bench.fake_backend"


def suite(root: Path, count: int) -> Path:
    folder = root / f"tasks{count}"
    folder.mkdir()
    for i in range(count):
        (folder / f"pw_t{i:04d}_fp32.py").write_text(TASK)
    return folder


def one_run(tasks_dir: Path, run_dir: Path, cluster: str | None) -> float:
    from stitch_lsp.benchsuite.executor import LocalExecutor
    from stitch_lsp.benchsuite.suite import BenchOptions, run_bench
    from stitch_lsp.settings import Settings

    options = BenchOptions(tasks_dir=tasks_dir, run_dir=run_dir, backend=BACKEND, gpus=1, cluster=cluster,
                           measure_bandwidth=False, command="ray_overhead")
    start = time.perf_counter()
    report = run_bench(options, Settings(), out=io.StringIO(), executor=None if cluster else LocalExecutor(1))
    elapsed = time.perf_counter() - start
    assert report.summary.ran == len(report.results) and not report.not_run, "every task must run"
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=50)
    parser.add_argument("--large", type=int, default=1050)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="write OUT.json and OUT.md")
    args = parser.parse_args()

    import ray
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.pop("FAKE_BENCH_LOG", None)
    os.environ["CUDA_VISIBLE_DEVICES"] = "0"  # the local executor's one slot
    started = time.perf_counter()
    cluster = Cluster(initialize_head=True, connect=False,
                      head_node_args={"num_cpus": 1, "num_gpus": 1, "include_dashboard": False})
    cluster_start = time.perf_counter() - started
    times: dict[str, dict[int, list[float]]] = {"local": {}, "ray": {}}
    try:
        with tempfile.TemporaryDirectory(prefix="stitch-ray-overhead-") as tmp:
            root = Path(tmp)
            suites = {n: suite(root, n) for n in (args.small, args.large)}
            for name, address in (("local", None), ("ray", cluster.address)):  # warm-up: caches, runtime env
                one_run(suites[args.small], root / f"warmup-{name}", address)
            for rep in range(args.repeats):
                for name, address in (("local", None), ("ray", cluster.address)):
                    for n, folder in suites.items():
                        elapsed = one_run(folder, root / f"run-{name}-{n}-{rep}", address)
                        times[name].setdefault(n, []).append(elapsed)
                        print(f"{name:5} {n:4} tasks: {elapsed:7.2f} s", flush=True)
    finally:
        cluster.shutdown()

    rows = {}
    for name, by_size in times.items():
        small, large = statistics.median(by_size[args.small]), statistics.median(by_size[args.large])
        per_task = (large - small) / (args.large - args.small)
        rows[name] = {"per_task_ms": per_task * 1e3, "fixed_s": small - per_task * args.small,
                      "median_s": {str(k): statistics.median(v) for k, v in by_size.items()},
                      "runs_s": {str(k): v for k, v in by_size.items()}}
    added_ms = rows["ray"]["per_task_ms"] - rows["local"]["per_task_ms"]
    added_fixed = rows["ray"]["fixed_s"] - rows["local"]["fixed_s"]
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    env = {"python": platform.python_version(), "ray": ray.__version__, "cpus": os.cpu_count(),
           "machine": platform.machine(), "load_avg_at_end": os.getloadavg()[0],
           "when": time.strftime("%Y-%m-%d %H:%M:%S %z"), "cluster_start_s": round(cluster_start, 2)}
    table = "\n".join([
        "| executor | per task | fixed per run | median run, "
        f"{args.small} tasks | median run, {args.large} tasks |",
        "|---|---|---|---|---|",
        *(f"| {name} | {r['per_task_ms']:.1f} ms | {r['fixed_s']:.2f} s | {r['median_s'][str(args.small)]:.2f} s | "
          f"{r['median_s'][str(args.large)]:.2f} s |" for name, r in rows.items()),
    ])
    summary = (f"Ray adds {added_ms:.1f} ms per task and {added_fixed:.2f} s per run "
               f"(connection, runtime environment, actor start) over the local executor.")
    print(table)
    print(summary)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        Path(f"{args.out}.json").write_text(json.dumps({"command": command, "env": env, "executors": rows,
                                                        "added_per_task_ms": added_ms,
                                                        "added_per_run_s": added_fixed}, indent=1) + "\n")
        Path(f"{args.out}.md").write_text(
            f"# Ray executor overhead on the CPU stand-in\n\n`{command}`\n\n"
            f"{env['when']}; Python {env['python']}, Ray {env['ray']}, {env['cpus']} CPU cores "
            f"({env['machine']}), load average {env['load_avg_at_end']:.1f} at the end; one worker each: "
            f"the local shard process vs one Ray actor (and its shard) on a one-node cluster with one fake "
            f"GPU (started in {env['cluster_start_s']} s, not counted). Tasks do nothing "
            f"(tests/bench/fake_backend.py); per task = slope between {args.small} and {args.large} tasks, "
            f"medians of {args.repeats} runs after one warm-up run each.\n\n{table}\n\n{summary}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
