"""The template Coder on every bench task, on a GPU: correct? how fast vs eager and torch.compile?

    python bench/fuse_template_suite.py [--out DIR] [--tasks GLOB] [--budget-s 260] [--verifier N]

For each task: trace → plan → generate (in this process), then check the candidate
against the reference (3 seeds, plus the task's sizes made odd, the Verifier's
second shape), and time eager / torch.compile (default mode) / candidate with CUDA
events, L2 flushed before every iteration, medians of interleaved rounds. Measures
the device-to-device copy bandwidth in the same run, and reports each memory-bound
candidate's achieved bandwidth (the plan's fewest bytes / its time) against it.
``--verifier N`` also runs the full Verifier (``stitch_lsp.verify``) on the first N
tasks. Writes ``fuse_suite.json`` and ``fuse_suite.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from stitch_lsp.agents.planner import make_plan  # noqa: E402
from stitch_lsp.agents.template_coder import TemplateCoder  # noqa: E402
from stitch_lsp.pipeline import Task  # noqa: E402
from stitch_lsp.worker.trace_handler import trace_task  # noqa: E402


def load(source: str, name: str, overrides: dict | None = None) -> types.ModuleType:
    mod = types.ModuleType(name)
    exec(compile(source, name, "exec"), mod.__dict__)
    for k, v in (overrides or {}).items():
        setattr(mod, k, v)
    return mod


def size_globals(mod, source: str) -> dict[str, int]:
    import ast

    used = set(mod.get_inputs.__code__.co_names) | set(mod.get_init_inputs.__code__.co_names)
    out = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            names = []
            for t in node.targets:  # `M = 4096` and `M, N = 4096, 1024` alike
                names += [e for e in (t.elts if isinstance(t, ast.Tuple) else [t]) if isinstance(e, ast.Name)]
            for t in names:
                if t.id in used:
                    v = getattr(mod, t.id, None)
                    if isinstance(v, int) and not isinstance(v, bool) and v >= 8:
                        out[t.id] = v
    return out


def build(ref_mod, cand_mod):
    with torch.device("cuda"):
        torch.manual_seed(1234)
        ref = ref_mod.Model(*ref_mod.get_init_inputs())
        torch.manual_seed(1234)
        cand = cand_mod.ModelNew(*ref_mod.get_init_inputs())
    return ref.cuda(), cand.cuda()


def draw(ref_mod, seed: int):
    torch.manual_seed(seed)
    return [x.cuda() for x in ref_mod.get_inputs()]


def compare(a, b, dtype) -> tuple[bool, float]:
    a = a if isinstance(a, (tuple, list)) else [a]
    b = b if isinstance(b, (tuple, list)) else [b]
    tol = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2), torch.float16: (5e-3, 5e-3)}
    worst = 0.0
    ok = True
    for x, y in zip(a, b):
        atol, rtol = tol.get(x.dtype, (1e-4, 1e-4))
        if x.shape != y.shape or x.dtype != y.dtype:
            return False, float("inf")
        xf, yf = x.float(), y.float()
        nan_ok = torch.equal(torch.isnan(xf), torch.isnan(yf))
        fin = torch.isfinite(xf) & torch.isfinite(yf)
        err = ((xf - yf).abs() / (atol + rtol * yf.abs()))[fin]
        worst = max(worst, float(err.max()) if err.numel() else 0.0)
        ok = ok and nan_ok and bool(torch.equal(torch.isinf(xf), torch.isinf(yf))) and worst <= 1.0
    return ok, worst


_FLUSH = None


def timed(fns: dict, rounds: int = 9) -> dict[str, float]:
    global _FLUSH
    if _FLUSH is None:
        _FLUSH = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.float32, device="cuda")
    for f in fns.values():
        for _ in range(3):
            f()
    torch.cuda.synchronize()
    samples = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            _FLUSH.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            f()
            e.record()
            e.synchronize()
            samples[k].append(s.elapsed_time(e))
    return {k: statistics.median(v) for k, v in samples.items()}


def copy_bandwidth() -> float:
    x = torch.empty(1 << 28, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    t = timed({"copy": lambda: y.copy_(x)}, rounds=10)["copy"]
    return 2 * x.numel() * 4 / (t * 1e-3) / 1e9


EDIT_CHECK = """
import sys, torch
sys.path[:] = [p for p in sys.path if 'stitch' not in p.lower() or p.endswith('ws')]
import stitch_kernels.{module} as fused
import reference
assert 'stitch_lsp' not in sys.modules
torch.manual_seed(0)
model = reference.Model(*reference.get_init_inputs()).cuda()
inputs = [x.cuda() for x in reference.get_inputs()]
state = [model.get_parameter(p) if k == 'param' else model.get_buffer(p) for k, p in {state}]
with torch.no_grad():
    want = model(*inputs)
    got = fused.{func}(*state, *inputs)
torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
assert 'stitch_lsp' not in sys.modules
print('same results, stitch_lsp not imported')
"""


def edit_check(out: Path, task_name: str = "norm_residual_rmsnorm_bf16") -> str:
    """The files an accepted edit writes, run in a fresh process that cannot import Stitch."""
    from stitch_lsp.agents.fuse_edit import edit_files, names_for
    from stitch_lsp.agents.fuse_service import FuseOutcome
    from stitch_lsp.settings import Settings

    try:
        source = (REPO / "bench" / "tasks" / f"{task_name}.py").read_text()
        task = Task(name=task_name, source=source, origin_path="reference.py")
        traced = trace_task(source)
        plan = make_plan(task, traced.graph)
        outcome = FuseOutcome(task=task, plan=plan)
        module_path, func = names_for(task, Settings())
        ws = Path("/tmp/stitch_edit_ws")
        for rel, text in edit_files(outcome, Settings(), module_path, func).items():
            (ws / rel).parent.mkdir(parents=True, exist_ok=True)
            (ws / rel).write_text(text)
        (ws / "reference.py").write_text(source)
        state = [(i.role, i.path) for i in traced.graph.inputs if i.role != "input"]
        script = EDIT_CHECK.format(module=Path(module_path).stem, func=func, state=state)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        run = subprocess.run([sys.executable, "-c", script], cwd=ws, env=env, capture_output=True, text=True,
                             timeout=120)
        return "passed" if run.returncode == 0 else "failed: " + (run.stdout + run.stderr)[-600:]
    except Exception as exc:
        return f"error: {type(exc).__name__}: {exc}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--tasks", default=str(REPO / "bench" / "tasks" / "*.py"))
    ap.add_argument("--budget-s", type=float, default=260.0)
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args()
    started = time.time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:
        driver = ""
    bw = copy_bandwidth()
    env = {"gpu": props.name, "driver": driver, "torch": torch.__version__, "cuda": torch.version.cuda,
           "python": platform.python_version(), "copy_gbs": round(bw, 1),
           "command": " ".join([Path(sys.executable).name] + sys.argv)}
    print(json.dumps(env), flush=True)
    rows = []
    for path in sorted(glob.glob(args.tasks), key=lambda p: (not Path(p).stem.startswith("red_"), p)):
        name = Path(path).stem
        if name.startswith("_"):
            continue
        row = {"task": name}
        rows.append(row)
        if time.time() - started > args.budget_s:
            row["status"] = "skipped (time budget)"
            continue
        try:
            source = Path(path).read_text()
            task = Task(name=name, source=source)
            t0 = time.time()
            traced = trace_task(source)
            if not traced.ok:
                row["status"] = "trace failed: " + traced.message
                continue
            plan = make_plan(task, traced.graph)
            cand = TemplateCoder().generate(task, plan)
            row["gen_s"] = round(time.time() - t0, 2)
            row["kernels"] = len(cand.cuda_sources)
            row["uncovered"] = cand.uncovered_ops
            row["bytes"] = plan.bytes_moved
            row["floor_us"] = round(plan.floor_us, 1)
            row["predicted"] = plan.predicted_speedup
            row["memory_bound"] = all(g.kind != "gemm" for g in plan.groups)
            ref_mod = load(source, "ref_" + name)
            cand_mod = load(cand.module_source, "cand_" + name)
            checks = []
            with torch.no_grad():
                ref, model = build(ref_mod, cand_mod)
                for seed in (1, 2, 3):
                    inputs = draw(ref_mod, seed)
                    ok, err = compare(model(*inputs), ref(*inputs), None)
                    checks.append(ok)
                    row["max_err_ratio"] = max(row.get("max_err_ratio", 0.0), err)
                sizes = size_globals(ref_mod, source)
                if sizes:
                    odd = {k: (v - 1 if v % 2 == 0 else v - 2) for k, v in sizes.items()}
                    ref_mod2 = load(source, "ref2_" + name, odd)
                    ref2 = model2 = None
                    try:
                        ref2, model2 = build(ref_mod2, cand_mod)
                        inputs = draw(ref_mod2, 4)
                        ok, err = compare(model2(*inputs), ref2(*inputs), None)
                        row["odd_shape"] = "passed" if ok else f"failed (err ratio {err:.3g})"
                        checks.append(ok)
                    except Exception as exc:  # the reference itself may not take odd sizes
                        row["odd_shape"] = f"error: {type(exc).__name__}: {str(exc)[:160]}"
                        if "fused" in traceback.format_exc():
                            checks.append(False)
                    ref2 = model2 = None
                inputs = draw(ref_mod, 5)
                row["correct"] = all(checks)
                fns = {"eager": lambda: ref(*inputs), "candidate": lambda: model(*inputs)}
                if not args.no_compile and time.time() - started < args.budget_s - 30:
                    compiled = torch.compile(ref)
                    compiled(*inputs)
                    fns["compile"] = lambda: compiled(*inputs)
                times = timed(fns)
            row.update({f"{k}_ms": round(v, 4) for k, v in times.items()})
            row["vs_eager"] = round(times["eager"] / times["candidate"], 3)
            if "compile" in times:
                row["vs_compile"] = round(times["compile"] / times["candidate"], 3)
            row["achieved_gbs"] = round(plan.bytes_moved / (times["candidate"] * 1e-3) / 1e9, 1)
            row["pct_copy_bw"] = round(100 * row["achieved_gbs"] / bw, 1)
            row["status"] = "ok" if row["correct"] else "INCORRECT"
        except Exception as exc:
            row["status"] = f"error: {type(exc).__name__}: {str(exc)[:300]}"
            row["traceback"] = traceback.format_exc()[-1500:]
        print(json.dumps({k: v for k, v in row.items() if k != "traceback"}), flush=True)
        torch.cuda.empty_cache()
    edit = edit_check(out)
    print(json.dumps({"edit_check": edit}), flush=True)
    good = [r for r in rows if r.get("correct")]
    summary = {}
    for key in ("vs_eager", "vs_compile"):
        vals = [r[key] for r in good if key in r]
        if vals:
            summary[f"geomean_{key}"] = round(math.exp(sum(math.log(v) for v in vals) / len(vals)), 3)
    mb = [r for r in good if r.get("memory_bound")]
    summary["memory_bound_at_80pct"] = f"{sum(1 for r in mb if r.get('pct_copy_bw', 0) >= 80)}/{len(mb)}"
    summary["correct"] = f"{len(good)}/{len(rows)}"
    summary["edit_in_fresh_process"] = edit
    (out / "fuse_suite.json").write_text(json.dumps({"env": env, "summary": summary, "rows": rows}, indent=1))
    lines = [f"# Template Coder on bench/tasks — {env['gpu']}, driver {driver}, torch {env['torch']}, CUDA {env['cuda']}",
             "", f"Command: `{env['command']}`; copy bandwidth {bw:.0f} GB/s (measured in the same run).", "",
             "| task | status | kernels | vs eager | vs compile | cand ms | GB/s | % copy | odd shape | left in PyTorch |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['task']} | {r.get('status', '')[:60]} | {r.get('kernels', '')} | {r.get('vs_eager', '')} | "
                     f"{r.get('vs_compile', '')} | {r.get('candidate_ms', '')} | {r.get('achieved_gbs', '')} | "
                     f"{r.get('pct_copy_bw', '')} | {r.get('odd_shape', '')[:40]} | "
                     f"{'; '.join(u.split(' ')[0] for u in r.get('uncovered', []))} |")
    lines += ["", "Summary: " + json.dumps(summary)]
    (out / "fuse_suite.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-len(rows) - 3:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
