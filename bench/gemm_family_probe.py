"""The GEMM family on a GPU, task by task: tiles measured, then the fused program against eager.

    python bench/gemm_family_probe.py TASK.py ... --out DIR [--compile] [--no-tune] [--budget S]

For every task: trace it, lower it with the GEMM family on, and collect its GEMM kernels. Then one
tuning run (the worker's own ``gemm_tune`` code, every candidate tile compiled in parallel) times each
kernel's tiles and cuBLAS on the same GEMMs; the fastest tiles go into a tile cache. Each task is then
lowered again with that cache (the product's path: ``GemmOptions(mode="auto")``) and its candidate
module run on the GPU against the reference: the Verifier's tolerance on fresh inputs, the max error
against an fp64 run of the reference for eager (fp32, and TF32 for fp32 tasks) and for the candidate,
and medians of eager, the candidate and (``--compile``) ``torch.compile``, L2 flushed before each call.
Writes ``probe.json`` and ``tiles.json`` under DIR and prints a table last.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _module(source: str, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__["__name__"] = name
    exec(compile(source, name, "exec"), module.__dict__)
    return module


def _to(value, **kw):
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(**kw) if value.is_floating_point() else value.to(device=kw.get("device", value.device))
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, **kw) for v in value)
    return value


def _max_err(out, ref) -> float:
    import torch

    out, ref = out.double(), ref.double()
    finite = torch.isfinite(ref)
    return float((out - ref)[finite].abs().max()) if bool(finite.any()) else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("tasks", nargs="+")
    ap.add_argument("--out", default="/tmp/gemm_probe")
    ap.add_argument("--compile", default="", help="also time torch.compile (default mode) for tasks whose name "
                    "contains this ('' none, '*' all)")
    ap.add_argument("--per-shape", action="store_true",
                    help="tune one kernel per GEMM shape and give its tile to every epilogue of that shape")
    ap.add_argument("--no-tune", action="store_true")
    ap.add_argument("--budget", type=float, default=240.0, help="seconds for the tuning run")
    ap.add_argument("--task-budget", type=float, default=400.0, help="start no task after this many seconds")
    args = ap.parse_args()

    import torch

    from stitch_lsp.coders.template import candidate_module, lower
    from stitch_lsp.plan.gemm_spec import GEMM_OP, spec_of
    from stitch_lsp.coders.template.gemm_tune import tune_cases
    from stitch_lsp.plan.gemm_tiles import GemmOptions, TileCache, record
    from stitch_lsp.contract.gemm_tune import TuneRequest
    from stitch_lsp.pipeline import Task
    from stitch_lsp.serde import to_dict
    from stitch_lsp.worker.verify.compare import compare
    from stitch_lsp.worker.gemm_tune_handler import time_call, tune
    from stitch_lsp.worker.trace_handler import trace_task

    started = time.perf_counter()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name(0)
    import triton

    print(f"gpu {gpu}; torch {torch.__version__} (CUDA {torch.version.cuda}); triton {triton.__version__}", flush=True)
    tasks = []
    specs = []
    for path in args.tasks:
        source = Path(path).read_text()
        reply = trace_task(source)
        if not reply.ok:
            print(f"{Path(path).stem}: trace failed: {reply.message}", flush=True)
            continue
        program = lower(reply.graph, GemmOptions(mode="triton"))
        found = [spec_of(n) for n in program.graph.nodes if n.op == GEMM_OP]
        specs += found
        tasks.append((Path(path).stem, source, reply.graph))
    cache = TileCache(out_dir / "tiles.json")
    tune_reply = None
    if specs and not args.no_tune:
        cases = tune_cases(specs, gpu)
        shared: dict = {}
        if args.per_shape:
            def shape(case):
                return case.key.split("|")[1:5]  # shape, dtype, precision, transposes (not the epilogue)

            firsts: dict = {}
            for case in cases:
                firsts.setdefault(json.dumps(shape(case)), case)
                shared.setdefault(firsts[json.dumps(shape(case))].key, []).append(case.key)
            cases = list(firsts.values())
        print(f"tuning {len(cases)} kernels, {sum(len(c.tiles) for c in cases)} tiles ...", flush=True)
        tune_reply = tune(TuneRequest(cases=cases, budget_s=args.budget),
                          lambda stage, message="", percent=None: print(f"  {stage}: {message}", flush=True))
        for line in record(tune_reply, cache, gpu):
            print("  " + line, flush=True)
        for result in tune_reply.results:  # the same tile for the other epilogues of each shape
            entry = cache.get(result.key)
            for other in shared.get(result.key, []):
                if entry is not None and other != result.key:
                    cache.put(other, entry)
        (out_dir / "tune.json").write_text(json.dumps(to_dict(tune_reply), indent=1))
    flush = torch.empty(16 << 20, device="cuda", dtype=torch.float32)
    rows = []
    for name, source, graph in tasks:
        if time.perf_counter() - started > args.task_budget:
            rows.append({"task": name, "status": "not run (budget)"})
            continue
        row: dict = {"task": name}
        try:
            program = lower(graph, GemmOptions(mode="auto", gpu=gpu, cache=cache))
            row["kernels"] = [k.note if k.backend == "triton" else f"{k.name} {k.kind}" for k in program.kernels]
            row["uncovered"] = list(program.uncovered_ops)
            cand = _module(candidate_module(Task(name=name, source=source), program), f"cand_{name}")
            ref_mod = _module(source, f"ref_{name}")
            torch.manual_seed(0)
            with torch.device("cuda"):
                init = list(ref_mod.get_init_inputs())
                model = ref_mod.Model(*init)
                torch.manual_seed(0)
                mine = cand.ModelNew(*init)
            mine.load_state_dict(model.state_dict())
            rng = torch.Generator(device="cuda")
            with torch.device("cuda"):
                torch.manual_seed(1234)
                inputs = list(ref_mod.get_inputs())
            with torch.no_grad():
                t0 = time.perf_counter()
                ours = mine(*inputs)
                torch.cuda.synchronize()
                row["first_call_s"] = round(time.perf_counter() - t0, 2)
                eager = model(*inputs)
                cmp = compare(eager, ours)
                row["correct"] = cmp.passed
                row["detail"] = cmp.detail[:160]
                dtype = next((p.dtype for p in model.parameters()), torch.float32)
                if dtype == torch.float32:
                    ref64 = _module(source, f"ref64_{name}").Model(*init).to("cuda").double()
                    ref64.load_state_dict(model.state_dict())
                    out64 = ref64(*_to(inputs, dtype=torch.float64))
                    torch.backends.cuda.matmul.allow_tf32 = True
                    tf32 = model(*inputs)
                    torch.backends.cuda.matmul.allow_tf32 = False
                    row["err_eager"] = _max_err(eager, out64)
                    row["err_ours"] = _max_err(ours, out64)
                    row["err_tf32"] = _max_err(tf32, out64)
                    row["tf32_passes"] = compare(eager, tf32).passed
                    del ref64, out64
                row["eager_us"] = round(time_call(lambda: model(*inputs), flush), 1)
                row["ours_us"] = round(time_call(lambda: mine(*inputs), flush), 1)
                if args.compile == "*" or (args.compile and args.compile in name):
                    compiled = torch.compile(model)
                    t0 = time.perf_counter()
                    compiled(*inputs)
                    torch.cuda.synchronize()
                    row["compile_s"] = round(time.perf_counter() - t0, 1)
                    row["compile_us"] = round(time_call(lambda: compiled(*inputs), flush), 1)
            del model, mine, inputs
        except Exception as exc:  # noqa: BLE001 - one task's failure is a row, not the end
            row["status"] = f"error: {type(exc).__name__}: {str(exc)[:300]}"
            row["trace"] = traceback.format_exc()[-1500:]
        torch.cuda.empty_cache()
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "trace"})[:600], flush=True)
    report = {"gpu": gpu, "torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton.__version__,
              "command": " ".join(sys.argv), "rows": rows, "seconds": round(time.perf_counter() - started, 1)}
    (out_dir / "probe.json").write_text(json.dumps(report, indent=1))
    print()
    print(f"{'task':44} {'ok':>3} {'eager':>9} {'ours':>9} {'x eager':>8} {'compile':>9} {'x comp':>7} "
          f"{'err ours/eager':>14} {'tf32/eager':>10}")
    geo = []
    for r in rows:
        if "ours_us" not in r:
            print(f"{r['task'][:44]:44} {r.get('status', '')[:100]}")
            continue
        sp = r["eager_us"] / r["ours_us"]
        geo.append(sp)
        comp = r.get("compile_us")
        ratio = (r["err_ours"] / r["err_eager"]) if r.get("err_eager") else float("nan")
        tf = (r["err_tf32"] / r["err_eager"]) if r.get("err_eager") else float("nan")
        print(f"{r['task'][:44]:44} {'yes' if r.get('correct') else 'NO':>3} {r['eager_us']:9.1f} {r['ours_us']:9.1f} "
              f"{sp:7.2f}x {comp if comp else float('nan'):9.1f} "
              f"{(comp / r['ours_us']) if comp else float('nan'):6.2f}x {ratio:14.2f} {tf:10.1f}")
    if geo:
        print(f"geomean vs eager {math.exp(sum(math.log(g) for g in geo) / len(geo)):.2f}x over {len(geo)} tasks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
