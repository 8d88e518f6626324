"""Plan and lower every task of a KernelBench directory on the CPU, no GPU: what the template Coder covers.

    PYTHONPATH=. python bench/kernelbench_dry_run.py ../shared/corpora/kernelbench/level1 ../shared/corpora/kernelbench/level2 \\
        --out bench/results/kernelbench_coverage [--host-check] [--syntax]

Each task is traced on the meta device (no memory, no compute, whatever its sizes), planned and
lowered as ``stitch bench --coder template`` would, and ends as one of:

- ``covered``: every op runs in a generated kernel or a library call (cuBLAS, cuDNN, pooling);
- ``library only``: nothing but library calls (a plain GEMM or convolution): covered, nothing to fuse;
- ``partial``: kernels were written, but the ops named stay PyTorch (the first is what stops it);
- ``not covered``: no kernel, the ops named stay PyTorch;
- ``trace failed``: the task could not be traced (the message says why).

``--syntax`` compiles every generated kernel for the host with g++ (``-fsyntax-only``, the CUDA
headers and the host shim of the kernel tests): the code generated at the task's own sizes is at
least well formed; ``--nvcc PATH`` compiles each for sm_90 and reports errors and register spills. ``--host-check`` shrinks the task's module-level sizes (every integer constant
above 16 becomes 8-16, keeping divisibility where it can), runs the lowered program with its
kernels built for the host (tests/agents/test_template_rows_host.py's threads, barriers and
shuffles) and compares it with eager PyTorch on the CPU: a check of the kernels' logic on shapes a
CPU runs in seconds. Writes ``OUT.json`` and ``OUT.md``.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stitch_lsp.plan import op_table  # noqa: E402
from stitch_lsp.coders import conv_layouts  # noqa: E402
from stitch_lsp.plan.planner import make_plan  # noqa: E402
from stitch_lsp.coders.template import lower  # noqa: E402
from stitch_lsp.pipeline import Task  # noqa: E402
from stitch_lsp.worker.trace_handler import trace_task  # noqa: E402

try:
    from stitch_lsp.task.precision import cast_source  # noqa: E402
except ImportError:  # before --precision existed: fp32 only
    def cast_source(source: str, precision: str) -> str:
        return source

try:
    from stitch_lsp.plan.library_calls import library_kind  # noqa: E402
except ImportError:  # before library calls had a module: GEMMs only
    def library_kind(op: str) -> str | None:
        return "gemm" if op in op_table.LIBRARY_OPS else None


def _number(path: Path) -> int:
    m = re.match(r"(\d+)", path.name)
    return int(m.group(1)) if m else 0


def classify(program) -> tuple[str, list[str], list[str]]:
    """(status, ops that stay PyTorch without a template, library calls)."""
    blocking = list(getattr(program, "blocking_ops", None) or [])
    library = list(getattr(program, "library_calls", None) or [])
    if not hasattr(program, "blocking_ops"):  # older lowering: split uncovered_ops by op
        for label in program.uncovered_ops:
            op = label.split(" ")[0]
            (library if library_kind(op) else blocking).append(label)
    fused = bool(program.kernels or program.library_fusions)
    if blocking:
        return ("partial" if fused else "not covered"), blocking, library
    if fused:
        return "covered", blocking, library
    return ("library only" if library else "not covered"), blocking, library


def group_summary(program) -> list[str]:
    out = []
    for step in program.steps:
        if step.kernel is not None:
            out.append(f"{step.kernel.kind}: {step.kernel.note}")
    return out


# ----------------------------------------------------------------------------- host checks


def _small(value: int) -> int:
    if value <= 16:
        return value
    # A small value keeping a power-of-two factor (sizes that divide each other mostly are powers of two).
    return 16 if value % 16 == 0 and value >= 256 else 8 if value % 8 == 0 else 12 if value % 4 == 0 \
        else 10 if value % 2 == 0 else 9


def _shrunk_source(source: str) -> str | None:
    """The task with its module-level integer sizes (and tuples of them) made small: a CPU runs the host
    kernels in seconds. Sizes are read by evaluating each module-level assignment in order."""
    tree = ast.parse(source)
    env: dict = {}
    new: dict[str, object] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets)):
            continue
        try:
            value = eval(compile(ast.Expression(node.value), "size", "eval"), {"__builtins__": {}}, dict(env))  # noqa: S307
        except Exception:
            continue
        for target in node.targets:  # height = width = 128
            name = target.id
            env[name] = value
            if type(value) is int and value > 16:
                new[name] = _small(value)
            elif isinstance(value, tuple) and value and all(type(v) is int for v in value) and max(value) > 16:
                new[name] = tuple(_small(v) for v in value)
    if not new:
        return None
    return source + "\n" + "\n".join(f"{k} = {v!r}" for k, v in new.items()) + "\n"


def host_check(source: str, tmp: Path) -> str:
    """'ok', or why the host run differs from eager (or could not run)."""
    sys.path.insert(0, str(REPO))
    from tests.agents import test_template_pointwise_host as host
    from tests.agents import test_template_rows_host as rows

    small = _shrunk_source(source)
    if small is None:
        return "skipped: no module-level sizes to shrink"
    try:
        ns: dict = {}
        exec(compile(small, "task", "exec"), ns)
        import torch

        with torch.no_grad():
            ns["Model"](*ns["get_init_inputs"]())(*ns["get_inputs"]())
    except Exception as exc:  # the shrunk sizes do not fit the model: not our failure
        return f"skipped: shrunk sizes do not run in eager ({type(exc).__name__})"
    reply = trace_task(small)
    if not reply.ok:
        return f"trace failed: {reply.message}"
    program = lower(reply.graph)
    if not program.kernels:
        return "skipped: no kernels"
    threads = max(k.grid * k.block for k in program.kernels)
    if threads > HOST_THREADS:
        return f"skipped: {threads} threads at the shrunk sizes, too many to run on the host"
    host._driver = rows._driver  # threads, barriers, shuffles
    verdicts = []
    for mode in ("", "split"):
        if mode == "split":
            # Every reduction along rows split into three parts: the multi-kernel path at a size a CPU runs.
            from stitch_lsp.coders.template import reduction_kernels as rk

            def three(rows_, row_len, vec, blocks, **kw):
                chunk = -(-(-(-row_len // 3)) // vec) * vec
                return rk.Split(-(-row_len // chunk), chunk, 64) if row_len > chunk else None

            saved, rk.split_for = rk.split_for, three
            try:
                program = lower(reply.graph)
            finally:
                rk.split_for = saved
            if not any(k.scratch for k in program.kernels):
                break
        (tmp / (mode or "plain")).mkdir(exist_ok=True)
        try:
            host.check_against_eager(small, program, ("random",), tmp / (mode or "plain"))
            verdicts.append(f"{mode or 'ok'}")
        except AssertionError as exc:
            return f"MISMATCH{' (split)' if mode else ''} " + " ".join(str(exc).split())[:300]
        except Exception as exc:
            return f"ERROR{' (split)' if mode else ''} {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return "ok" + (" (split too)" if "split" in verdicts else "")


def nvcc_check(program, tmp: Path, nvcc: str) -> str:
    """Each kernel compiled for sm_90 as the loader would (NVRTC takes the same source): errors, and the
    kernels ptxas reports spilling registers."""
    notes = []
    for k in program.kernels:
        cu = tmp / f"{k.name}.cu"
        cu.write_text(k.source)
        out = subprocess.run([nvcc, "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-o", str(tmp / f"{k.name}.cubin"),
                              str(cu)], capture_output=True, text=True, timeout=600)
        if out.returncode:
            first = next((line for line in out.stderr.splitlines() if "error" in line), out.stderr[:200])
            notes.append(f"{k.name}: {first.strip()[:200]}")
            continue
        spill = re.search(r"(\d+) bytes spill stores", out.stderr)
        regs = re.search(r"Used (\d+) registers", out.stderr)
        if spill and int(spill.group(1)):
            notes.append(f"{k.name}: spills {spill.group(1)} B ({regs.group(1) if regs else '?'} registers)")
    return "ok" if not notes else "; ".join(notes)


def syntax_check(program, tmp: Path) -> str:
    from tests.agents import test_template_pointwise_host as host
    from tests.agents import test_template_rows_host as rows

    bad = []
    for k in program.kernels:
        cpp = tmp / f"{k.name}.cpp"
        cpp.write_text(rows.SHIM + k.source)
        out = subprocess.run([host.GXX, "-std=c++17", "-fsyntax-only", "-w", f"-I{host.INCLUDE}", str(cpp)],
                             capture_output=True, text=True, timeout=300)
        if out.returncode:
            first = next((line for line in out.stderr.splitlines() if "error" in line), out.stderr[:200])
            bad.append(f"{k.name}: {first.strip()[:200]}")
    return "ok" if not bad else "; ".join(bad)


# ----------------------------------------------------------------------------- main


def run_dir(directory: Path, args) -> list[dict]:
    rows_out = []
    files = sorted((p for p in directory.glob("*.py") if p.name != "__init__.py"), key=_number)
    if args.tasks:
        files = [p for p in files if any(k in p.stem for k in args.tasks.split(","))]
    for path in files:
        level = re.search(r"level_?(\d+)", str(directory))
        row = {"task": path.stem, "level": int(level.group(1)) if level else None}
        source = cast_source(path.read_text(encoding="utf-8"), args.precision)
        started = time.perf_counter()
        try:
            reply = trace_task(source)
            row["trace_s"] = round(time.perf_counter() - started, 2)
            if not reply.ok or reply.graph is None:
                row.update(status="trace failed", blocking=[reply.message])
            else:
                plan = make_plan(Task(name=path.stem, source=source), reply.graph, layouts=conv_layouts)
                t1 = time.perf_counter()
                program = lower(reply.graph)
                row["lower_s"] = round(time.perf_counter() - t1, 2)
                status, blocking, library = classify(program)
                row.update(status=status, blocking=blocking, library=library, kernels=len(program.kernels),
                           groups=group_summary(program), predicted=plan.predicted_speedup)
                if args.syntax and program.kernels:
                    with tempfile.TemporaryDirectory() as tmp:
                        row["syntax"] = syntax_check(program, Path(tmp))
                if args.nvcc and program.kernels:
                    with tempfile.TemporaryDirectory() as tmp:
                        row["nvcc"] = nvcc_check(program, Path(tmp), args.nvcc)
        except Exception as exc:
            row.update(status="crashed", blocking=[f"{type(exc).__name__}: {exc}"],
                       traceback=traceback.format_exc()[-2000:])
        if args.host_check and row.get("status") in ("covered", "partial"):
            with tempfile.TemporaryDirectory() as tmp:
                row["host"] = host_check(source, Path(tmp))
        row["seconds"] = round(time.perf_counter() - started, 2)
        print(f"L{row['level']} {row['task']}: {row['status']}"
              + (f" — {row['blocking'][0]}" if row.get("blocking") else "")
              + (f" [host {row['host']}]" if "host" in row else "")
              + (f" [syntax {row['syntax']}]" if row.get("syntax", "ok") != "ok" else "")
              + (f" [nvcc {row['nvcc']}]" if row.get("nvcc", "ok") != "ok" else ""), flush=True)
        rows_out.append(row)
    return rows_out


COVERED = ("covered", "library only")
HOST_THREADS = 1 << 18  # a host thread per CUDA thread: more than this takes minutes


def render(rows: list[dict], command: str) -> str:
    lines = ["# KernelBench coverage of the template Coder (CPU dry run: trace, plan, lower)", "",
             f"Command: `{command}`", ""]
    levels = sorted({r["level"] for r in rows})
    lines += ["| level | tasks | covered | of which library only | partial | not covered | trace failed / crashed |",
              "|---|---|---|---|---|---|---|"]
    for lv in levels:
        rs = [r for r in rows if r["level"] == lv]
        c = Counter(r["status"] for r in rs)
        cov = c["covered"] + c["library only"]
        lines.append(f"| {lv} | {len(rs)} | {cov} ({100 * cov / len(rs):.0f}%) | {c['library only']} | "
                     f"{c['partial']} | {c['not covered']} | {c['trace failed'] + c['crashed']} |")
    stops = Counter()
    for r in rows:
        if r["status"] not in COVERED and r.get("blocking"):
            stops[r["blocking"][0].split(" (")[0].split(":")[0]] += 1
    if stops:
        lines += ["", "What stops the tasks not covered (first op left to PyTorch, tasks):", ""]
        lines += [f"- `{op}`: {n}" for op, n in stops.most_common()]
    host = Counter(r["host"].split(":")[0].split(" ")[0] for r in rows if "host" in r)
    if host:
        lines += ["", "Host check at shrunk sizes (kernels built with g++, compared with eager on the CPU): "
                  + ", ".join(f"{k} {v}" for k, v in host.most_common())]
    lines += ["", "| level | task | result | kernels | what stops it / host check |", "|---|---|---|---|---|"]
    for r in rows:
        why = "; ".join(r.get("blocking") or [])[:160]
        extra = r.get("host", "")
        if r.get("syntax", "ok") != "ok":
            extra += f" syntax: {r['syntax'][:100]}"
        if r.get("nvcc", "ok") != "ok":
            extra += f" nvcc: {r['nvcc'][:160]}"
        lines.append(f"| {r['level']} | {r['task']} | {r['status']} | {r.get('kernels', '')} | "
                     f"{(why + ' ' + extra).strip().replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="writes OUT.json and OUT.md")
    parser.add_argument("--host-check", action="store_true")
    parser.add_argument("--syntax", action="store_true")
    parser.add_argument("--nvcc", default="", help="compile every kernel for sm_90 with this nvcc (errors, spills)")
    parser.add_argument("--tasks", default="", help="only task names containing one of these (comma-separated)")
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"),
                        help="each task cast as stitch bench --precision casts it")
    args = parser.parse_args()
    rows: list[dict] = []
    for d in args.dirs:
        rows += run_dir(d, args)
    command = "PYTHONPATH=. python bench/kernelbench_dry_run.py " + " ".join(sys.argv[1:])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(render(rows, command))
    print(render(rows, command).split("\n| level | task | result")[0])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
