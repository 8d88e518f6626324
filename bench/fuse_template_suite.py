"""The template Coder on every bench task, on a GPU: correct? how fast vs eager and torch.compile?

    python bench/fuse_template_suite.py [--out DIR] [--tasks GLOB] [--budget-s 260] [--edit-check-s 45]
    python bench/fuse_template_suite.py --self-test   # the edit-check harness, on CPU

For each task: trace → plan → generate (in this process), then check the candidate
against the reference (3 seeds, plus the task's sizes made odd, the Verifier's
second shape), and time eager / torch.compile (default mode) / candidate with CUDA
events, L2 flushed before every iteration, medians of interleaved rounds. Measures
the device-to-device copy bandwidth in the same run, and reports each memory-bound
candidate's achieved bandwidth (the plan's fewest bytes / its time) against it.
Then the edit check, for every task whose candidate was correct: the files accepting
it would write (the kernel module and the copied runtime loader) are imported by a
fresh interpreter that cannot import Stitch, and their results compared with the
reference's (``edit_check`` in each row, ``edit_in_fresh_process`` in the summary).
``--self-test`` checks that harness on CPU. Writes ``fuse_suite.json`` and
``fuse_suite.md`` under ``--out``.
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

from stitch_lsp.plan.planner import make_plan  # noqa: E402
from stitch_lsp.coders.template import TemplateCoder  # noqa: E402
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
    with torch.device("cuda"):  # drawing 256 MB on the CPU takes seconds a task
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


# The edit check runs here, in a fresh interpreter started with -I (no PYTHONPATH, no user site,
# no script directory): it imports each accepted edit's module next to its copied loader, as the
# user's program would, and saves the fused function's results and the reference's for the
# suite's own compare(). One process for every task; a task that fails is reported and the next
# one runs; a lost CUDA context (or a crash) ends the process and the parent starts another for
# the tasks left.
EDIT_CHILD = r"""
import importlib, importlib.util, json, sys, traceback


class _NoStitch:
    # A user's machine without Stitch: -I drops PYTHONPATH, but an installed Stitch (pip install
    # -e . puts it in site-packages) would still import, so imports of it fail here outright.
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "stitch_lsp":
            raise ModuleNotFoundError(f"No module named {name!r} (the edit check runs without Stitch)")
        return None


sys.meta_path.insert(0, _NoStitch())
spec_path, ws, results = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, ws)
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
print(json.dumps({"ready": True}), flush=True)

def cpu(v):
    return [cpu(x) for x in v] if isinstance(v, (tuple, list)) else v.detach().cpu()

for entry in json.load(open(spec_path)):
    name = entry["task"]
    try:
        ns = {"__name__": "reference_" + name}
        path = ws + "/references/" + name + ".py"
        exec(compile(open(path).read(), path, "exec"), ns)
        torch.manual_seed(0)
        model = ns["Model"](*ns["get_init_inputs"]()).to(device)
        with torch.device(device):  # drawn where they are used: 256 MB on the CPU takes seconds
            inputs = [x.to(device) for x in ns["get_inputs"]()]
        fused = getattr(importlib.import_module(entry["module"]), entry["func"])
        args = [model.get_parameter(p) if role == "param" else model.get_buffer(p) if role == "buffer"
                else inputs[i] for role, p, i in entry["args"]]
        with torch.no_grad():
            want = model(*inputs)
            got = fused(*args)
        if device == "cuda":
            torch.cuda.synchronize()
        leaked = [m for m in sys.modules if m.split(".")[0] == "stitch_lsp"]
        if leaked:
            raise ImportError("the edit imported " + leaked[0])
        torch.save({"got": cpu(got), "want": cpu(want)}, results + "/" + name + ".pt")
        print(json.dumps({"task": name, "ran": True}), flush=True)
    except BaseException as exc:
        message = (type(exc).__name__ + ": " + str(exc)).strip()[-400:]
        print(json.dumps({"task": name, "ran": False, "error": message}), flush=True)
        if "CUDA error" in message or "illegal" in message or "CUDA_ERROR" in message:
            sys.exit(3)  # the CUDA context is lost: the parent restarts for the tasks left
"""


def edit_entry(name: str, source: str, plan, ws: Path) -> dict:
    """Write the files accepting ``name``'s fused kernel would write (under ``ws``); how to call it."""
    from stitch_lsp.fuse.edit import edit_files, names_for
    from stitch_lsp.fuse.service import FuseOutcome
    from stitch_lsp.settings import Settings

    task = Task(name=name, source=source, origin_path=f"references/{name}.py")
    module_path, func = names_for(task, Settings())
    for rel, text in edit_files(FuseOutcome(task=task, plan=plan), Settings(), module_path, func).items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    (ws / "references").mkdir(parents=True, exist_ok=True)
    (ws / "references" / f"{name}.py").write_text(source)
    # The fused function's arguments, as the edit's call passes them (fuse_edit.call_arguments).
    args = [(i.role, i.path, i.index) for i in plan.graph.inputs]
    return {"task": name, "module": module_path.removesuffix(".py").replace("/", "."), "func": func, "args": args}


def run_edit_checks(entries: list[dict], ws: Path, timeout_s: float = 60.0) -> dict[str, str]:
    """Each entry's outcome: "passed", or "failed: why". Children are restarted past a lost context."""
    results = ws / "results"
    results.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    outcome: dict[str, str] = {}
    deadline = time.time() + timeout_s
    pending = list(entries)
    while pending:
        left = deadline - time.time()
        if left <= 1:
            for e in pending:
                outcome[e["task"]] = "failed: not run (edit-check time budget)"
            break
        spec = ws / "pending.json"
        spec.write_text(json.dumps(pending))
        try:
            run = subprocess.run([sys.executable, "-I", "-c", EDIT_CHILD, str(spec), str(ws), str(results)],
                                 cwd=ws, env=env, capture_output=True, text=True, timeout=left)
            stdout, tail = run.stdout, (run.stderr.strip().splitlines() or [f"exit status {run.returncode}"])[-1]
            code = run.returncode
        except subprocess.TimeoutExpired as exc:
            stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            tail, code = f"timed out after {left:.0f} s", None
        reported, ready, fatal = {}, False, False
        for line in stdout.splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            ready = ready or (isinstance(r, dict) and r.get("ready") is True)
            if isinstance(r, dict) and "task" in r:
                reported[r["task"]] = r
                # Exit 3 right after a failure: that task lost the CUDA context; the rest never ran.
                fatal = code == 3 and not r["ran"]
        if not ready:  # the interpreter itself could not start the check: no task can run
            for e in pending:
                outcome[e["task"]] = f"failed: the edit-check process did not start ({tail[-300:]})"
            break
        for name, r in reported.items():
            if not r["ran"]:
                outcome[name] = "failed: " + r["error"]
                continue
            try:
                saved = torch.load(results / f"{name}.pt")
                ok, err = compare(saved["got"], saved["want"], None)
            except Exception as exc:
                outcome[name] = f"failed: cannot compare the results: {type(exc).__name__}: {exc}"[:400]
                continue
            outcome[name] = "passed" if ok else f"failed: results differ from the reference (err ratio {err:.3g})"
        rest = [e for e in pending if e["task"] not in reported]
        if rest and not fatal:
            # The process ended (or hung) with no word on rest[0]: it crashed there.
            outcome[rest[0]["task"]] = f"failed: the process died ({tail[-300:]})"
            rest = rest[1:]
        pending = rest
    return outcome


def edit_check_summary(outcomes: dict[str, str]) -> str:
    passed = sum(1 for v in outcomes.values() if v == "passed")
    return f"{passed}/{len(outcomes)} passed"


def self_test() -> int:
    """The edit check's own harness on CPU: real edit files of two tasks (their kernels need CUDA, so
    on CPU they must fail with that message after importing without Stitch), and stand-in modules
    that pass, give wrong results, crash the process, and fail to import."""
    import shutil
    import tempfile

    ws = Path(tempfile.mkdtemp(prefix="stitch_edit_selftest_"))
    entries = []
    def small(name: str) -> str:  # the task at its CPU-test sizes (SMALL), set after its own
        source = (REPO / "bench" / "tasks" / f"{name}.py").read_text()
        sizes = getattr(load(source, "sizes_" + name), "SMALL", {})
        return source + "".join(f"\n{k} = {v!r}" for k, v in sizes.items()) + "\n"

    for name in ("pw_gelu_scale_fp32", "norm_rmsnorm_fp32"):
        source = small(name)
        traced = trace_task(source)
        assert traced.ok, traced.message
        entries.append(edit_entry(name, source, make_plan(Task(name=name, source=source), traced.graph), ws))
    ref = small("pw_gelu_scale_fp32")  # no parameters: the fused function takes forward's inputs
    stand_ins = {
        "right": "def f(*args):\n    return _model(*args)\n",
        "wrong": "def f(*args):\n    return _model(*args) + 1.0\n",
        "crash": "import os\ndef f(*args):\n    os._exit(7)\n",
        "noimport": "import stitch_lsp\ndef f(*args):\n    pass\n",
    }
    traced = trace_task(ref)
    for name, body in stand_ins.items():
        (ws / "fake").mkdir(exist_ok=True)
        (ws / "fake" / "__init__.py").write_text("")
        # The stand-in computes the reference itself, with the task's own Model.
        header = ("_ns = {}\nexec(open(%r).read(), _ns)\n"
                  "def _model(*args):\n    return _ns['Model'](*_ns['get_init_inputs']())(*args)\n"
                  ) % str(ws / "references" / f"{name}.py")
        (ws / "fake" / f"{name}.py").write_text(header + body)
        (ws / "references" / f"{name}.py").write_text(ref)
        entries.append({"task": name, "module": f"fake.{name}", "func": "f",
                        "args": [(i.role, i.path, i.index) for i in traced.graph.inputs]})
    entries.append(dict(entries[-1], task="after_crash", module="fake.right"))
    (ws / "references" / "after_crash.py").write_text(ref)
    outcomes = run_edit_checks(entries, ws, timeout_s=240)
    print(json.dumps(outcomes, indent=1))
    expect = {"right": "passed", "after_crash": "passed"}
    problems = [f"{k}: {outcomes.get(k)!r}" for k, v in expect.items() if outcomes.get(k) != v]
    if not outcomes.get("wrong", "").startswith("failed: results differ"):
        problems.append(f"wrong: {outcomes.get('wrong')!r}")
    if "process died" not in outcomes.get("crash", ""):
        problems.append(f"crash: {outcomes.get('crash')!r}")
    if "ModuleNotFoundError" not in outcomes.get("noimport", ""):
        problems.append(f"noimport: {outcomes.get('noimport')!r}")
    for name in ("pw_gelu_scale_fp32", "norm_rmsnorm_fp32"):
        want = "passed" if torch.cuda.is_available() else "CUDA tensors"
        if want not in outcomes.get(name, ""):
            problems.append(f"{name}: {outcomes.get(name)!r}")
    shutil.rmtree(ws, ignore_errors=True)
    print("self-test " + ("passed" if not problems else "FAILED: " + "; ".join(problems)))
    return 0 if not problems else 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--tasks", default=str(REPO / "bench" / "tasks" / "*.py"))
    ap.add_argument("--budget-s", type=float, default=260.0)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--edit-check-s", type=float, default=40.0,
                    help="time for the edit check (every correct task's edit, in a fresh process)")
    ap.add_argument("--self-test", action="store_true",
                    help="check the edit-check harness (runs on CPU) and exit")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
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
    edits = []  # (row, source, plan) of each correct candidate, for the edit check
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
                    # The reference first: sizes it rejects are no test of the candidate. A candidate
                    # that refuses other shapes with a clear error (a kernel specialised to the task's
                    # shapes) is verified for those only, as the Verifier reports it; a wrong answer or
                    # any other error fails.
                    try:
                        ref2, model2 = build(ref_mod2, cand_mod)
                        inputs = draw(ref_mod2, 4)
                        want = ref2(*inputs)
                    except Exception as exc:
                        row["odd_shape"] = f"not checked: the reference rejects them ({type(exc).__name__}: {str(exc)[:120]})"
                    else:
                        try:
                            got = model2(*inputs)
                        except Exception as exc:
                            if type(exc).__name__ == "ShapeMismatch" or "fuse again" in str(exc):
                                row["odd_shape"] = f"refused (verified for the task's shapes only): {str(exc)[:120]}"
                            else:
                                row["odd_shape"] = f"error: {type(exc).__name__}: {str(exc)[:160]}"
                                checks.append(False)
                        else:
                            ok, err = compare(got, want, None)
                            row["odd_shape"] = "passed" if ok else f"failed (err ratio {err:.3g})"
                            checks.append(ok)
                    ref2 = model2 = None
                inputs = draw(ref_mod, 5)
                row["correct"] = all(checks)
                if row["correct"]:
                    edits.append((row, source, plan))
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
    ws = Path(os.environ.get("TMPDIR", "/tmp")) / f"stitch_edit_ws_{os.getpid()}"
    entries, by_task = [], {}
    for row, source, plan in edits:
        try:
            entries.append(edit_entry(row["task"], source, plan, ws))
            by_task[row["task"]] = row
        except Exception as exc:
            row["edit_check"] = f"failed: writing the edit: {type(exc).__name__}: {exc}"[:400]
    try:
        for name, result in run_edit_checks(entries, ws, args.edit_check_s).items():
            by_task[name]["edit_check"] = result
    except Exception as exc:  # the table and the JSON are still written
        for row in by_task.values():
            row.setdefault("edit_check", f"failed: the edit check broke: {type(exc).__name__}: {exc}"[:400])
    checked = {r["task"]: r.setdefault("edit_check", "failed: not checked") for r, _, _ in edits}
    edit = edit_check_summary(checked)
    print(json.dumps({"edit_check": edit, "failed": {k: v for k, v in checked.items() if v != "passed"}}), flush=True)
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
             "| task | status | kernels | vs eager | vs compile | cand ms | GB/s | % copy | odd shape | edit | left in PyTorch |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['task']} | {r.get('status', '')[:60]} | {r.get('kernels', '')} | {r.get('vs_eager', '')} | "
                     f"{r.get('vs_compile', '')} | {r.get('candidate_ms', '')} | {r.get('achieved_gbs', '')} | "
                     f"{r.get('pct_copy_bw', '')} | {r.get('odd_shape', '')[:40]} | {r.get('edit_check', '')[:40]} | "
                     f"{'; '.join(u.split(' ')[0] for u in r.get('uncovered', []))} |")
    lines += ["", "Summary: " + json.dumps(summary)]
    (out / "fuse_suite.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-len(rows) - 3:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
