"""A quick GPU check of template-Coder candidates for a KernelBench directory: correct? how fast next to eager?

    # on any machine (CPU): trace, plan, lower and write each covered task's candidate module
    PYTHONPATH=. python bench/kernelbench_gpu_check.py generate ../shared/corpora/kernelbench/level1 OUT/
    # on the GPU machine: load each candidate, compare with eager on fresh inputs, time both
    PYTHONPATH=. python bench/kernelbench_gpu_check.py check OUT/ [--budget-s 150] [--json R.json]

``generate --set "reduction_kernels.CLUSTER_THREADS=(1024,)" --suffix @t1024`` (the value a Python literal) writes
the candidates with one of the template Coder's module constants changed, under names ending in the suffix:
variants to time side by side in one check.

Not the Verifier (``stitch bench`` is): one seed plus a NaN / Inf case, eager's default tolerance for the
dtype, the medians of interleaved CUDA-event timings (L2 flushed between calls) and the copy bandwidth
measured in the same run. It exists to check many tasks in a little GPU time: generating candidates, the
slow part on the CPU, happens before, elsewhere.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import re
import statistics
import sys
import time
import traceback
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _number(path: Path) -> int:
    m = re.match(r"(\d+)", path.name)
    return int(m.group(1)) if m else 0


def generate(directory: Path, out: Path, only: list[str], settings: list[str] = (), suffix: str = "") -> int:
    import importlib

    from stitch_lsp.plan.planner import make_plan
    from stitch_lsp.coders.template import TemplateCoder
    from stitch_lsp.pipeline import Task
    from stitch_lsp.worker.trace_handler import trace_task

    for setting in settings:
        target, value = setting.split("=", 1)
        module, attr = target.rsplit(".", 1)
        mod = importlib.import_module(f"stitch_lsp.coders.template.{module}")
        setattr(mod, attr, ast.literal_eval(value))
    out.mkdir(parents=True, exist_ok=True)
    level = re.search(r"level_?(\d+)", str(directory))
    manifest = json.loads((out / "manifest.json").read_text()) if (out / "manifest.json").exists() else {}
    for path in sorted(directory.glob("*.py"), key=_number):
        if only and not any(path.stem.startswith(o) for o in only):
            continue
        source = path.read_text()
        name = f"L{level.group(1) if level else 0}_{path.stem}{suffix}"
        reply = trace_task(source)
        if not reply.ok:
            manifest[name] = {"status": "trace failed", "why": reply.message}
            continue
        task = Task(name=name, source=source)
        plan = make_plan(task, reply.graph)
        candidate = TemplateCoder().generate(task, plan)
        status = "covered" if not candidate.blocking_ops else "partial"
        if not candidate.cuda_sources and not candidate.library_fusions and not candidate.blocking_ops:
            status = "library only"
        (out / f"{name}.py").write_text(candidate.module_source)
        (out / f"{name}.ref.py").write_text(source)
        manifest[name] = {"status": status, "kernels": len(candidate.cuda_sources), "blocking": candidate.blocking_ops,
                          "min_bytes": plan.bytes_moved, "memory_bound": all(
                              g.kind not in ("gemm", "conv", "pool", "attention") for g in plan.groups),
                          "notes": [n for n in candidate.notes if n.startswith("stitch_fused")]}
        print(name, status, len(candidate.cuda_sources), flush=True)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return 0


def _module(path: Path, name: str):
    module = types.ModuleType(name)
    module.__file__ = str(path)
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    return module


def _tolerance(dtype) -> tuple[float, float]:
    import torch

    return {torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2)}.get(dtype, (1e-4, 1e-4))


def _compare(ref, got) -> str:
    import torch

    refs = ref if isinstance(ref, (tuple, list)) else [ref]
    gots = got if isinstance(got, (tuple, list)) else [got]
    if len(refs) != len(gots):
        return f"{len(gots)} outputs, want {len(refs)}"
    for k, (r, g) in enumerate(zip(refs, gots)):
        if not isinstance(r, torch.Tensor):
            continue
        if r.shape != g.shape or r.dtype != g.dtype:
            return f"output {k}: {tuple(g.shape)} {g.dtype}, want {tuple(r.shape)} {r.dtype}"
        if not r.is_floating_point():
            bad = int((r != g).sum())
            if bad:
                return f"output {k}: {bad} of {r.numel()} differ"
            continue
        rtol, atol = _tolerance(r.dtype)
        rf, gf = r.float(), g.float()
        nan_r, nan_g = torch.isnan(rf), torch.isnan(gf)
        if bool((nan_r != nan_g).any()):
            return f"output {k}: NaN in {int((nan_r != nan_g).sum())} places where the reference differs"
        ok = torch.isclose(gf, rf, rtol=rtol, atol=atol, equal_nan=True)
        if not bool(ok.all()):
            err = (gf - rf).abs().nan_to_num(0).max().item()
            return f"output {k}: {int((~ok).sum())} of {r.numel()} off (max abs err {err:.3g})"
    return ""


def _time(fn, flush, reps: int) -> float:
    import torch

    times = []
    for _ in range(reps):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def check(out: Path, budget_s: float, json_path: Path | None, only: list[str]) -> int:
    import torch

    manifest = json.loads((out / "manifest.json").read_text())
    flush = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    src = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy_ms = _time(lambda: dst.copy_(src), flush, 10)
    copy_gbs = 2 * src.numel() / (copy_ms * 1e-3) / 1e9
    del src, dst
    started = time.perf_counter()
    rows = []
    names = list(manifest)
    if only:  # in the order asked for, so a budget cut drops the last asked
        names = [n for o in only for n in names if n.startswith(o)]
    for name in dict.fromkeys(names):
        info = manifest[name]
        if info["status"] not in ("covered", "partial", "library only"):
            continue
        if time.perf_counter() - started > budget_s:
            rows.append({"task": name, "result": "not run (budget)"})
            continue
        row = {"task": name, "coverage": info["status"], "kernels": info.get("kernels", 0)}
        t0 = time.perf_counter()
        try:
            ref = _module(out / f"{name}.ref.py", "stitch_reference")
            cand = _module(out / f"{name}.py", "stitch_candidate")
            # In inference mode, as the Verifier runs them (BatchNorm with running statistics, dropout off).
            torch.manual_seed(0)
            with torch.device("cuda"):
                model = ref.Model(*ref.get_init_inputs()).eval()
            torch.manual_seed(0)
            with torch.device("cuda"):
                new = cand.ModelNew(*ref.get_init_inputs()).eval()
            torch.manual_seed(1)
            with torch.device("cuda"):
                inputs = list(ref.get_inputs())
            with torch.no_grad():
                want = model(*inputs)
                got = new(*inputs)
                torch.cuda.synchronize()
                why = _compare(want, got)
                del want, got
                if not why and info["status"] != "library only":
                    # NaN / Inf where the reference is defined: they must land where eager puts them.
                    for x in inputs:
                        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 8:
                            flat = x.view(-1)
                            flat[1], flat[x.numel() // 2], flat[-2] = float("nan"), float("inf"), -float("inf")
                    want = model(*inputs)
                    got = new(*inputs)
                    torch.cuda.synchronize()
                    why2 = _compare(want, got)
                    del want, got
                    why = f"NaN/Inf case: {why2}" if why2 else ""
                    torch.manual_seed(1)
                    with torch.device("cuda"):
                        inputs = list(ref.get_inputs())
                row["result"] = "correct" if not why else "INCORRECT " + why
                reps = 5
                eager_ms = _time(lambda: model(*inputs), flush, reps)
                cand_ms = _time(lambda: new(*inputs), flush, reps)
                eager_ms = min(eager_ms, _time(lambda: model(*inputs), flush, reps))
            row.update(eager_ms=round(eager_ms, 4), stitch_ms=round(cand_ms, 4),
                       speedup=round(eager_ms / cand_ms, 3) if cand_ms > 0 else None)
            if info.get("memory_bound") and info.get("min_bytes"):
                row["pct_copy_bw"] = round(100 * info["min_bytes"] / (cand_ms * 1e-3) / 1e9 / copy_gbs, 1)
            del model, new, inputs
        except Exception as exc:
            row["result"] = f"ERROR {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            row["traceback"] = traceback.format_exc()[-1500:]
        torch.cuda.empty_cache()
        row["seconds"] = round(time.perf_counter() - t0, 2)
        rows.append(row)
        print(f"{name:70s} {row['result'][:70]:70s} {row.get('speedup', '')}x eager "
              f"{row.get('pct_copy_bw', '')}% copy {row['seconds']}s", flush=True)
    speedups = [r["speedup"] for r in rows if r.get("result") == "correct" and r.get("speedup")]
    geo = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else None
    summary = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "cuda": torch.version.cuda,
               "copy_gbs": round(copy_gbs, 1), "tasks": len(rows),
               "correct": sum(1 for r in rows if r.get("result") == "correct"),
               "geomean_vs_eager": round(geo, 3) if geo else None}
    print(json.dumps(summary))
    if json_path:
        json_path.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate")
    g.add_argument("dir", type=Path)
    g.add_argument("out", type=Path)
    g.add_argument("--only", default="")
    g.add_argument("--set", action="append", default=[], help="MODULE.CONSTANT=VALUE of the template Coder")
    g.add_argument("--suffix", default="")
    c = sub.add_parser("check")
    c.add_argument("out", type=Path)
    c.add_argument("--budget-s", type=float, default=150.0)
    c.add_argument("--json", type=Path)
    c.add_argument("--only", default="")
    args = parser.parse_args()
    only = [o for o in args.only.split(",") if o]
    if args.cmd == "generate":
        return generate(args.dir, args.out, only, args.set, args.suffix)
    return check(args.out, args.budget_s, args.json, only)


if __name__ == "__main__":
    raise SystemExit(main())
