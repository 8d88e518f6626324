"""KernelBench's convolutional nets at a size a CPU runs, lowered and run with their kernels built for the host.

    PYTHONPATH=. python bench/conv_chain_host_check.py ../shared/corpora/kernelbench/level3 --tasks 13_,15_ \\
        --out bench/results/conv_chain_host_check

``kernelbench_dry_run.py --host-check`` shrinks every module-level size, which breaks nets whose layers fix
their channel counts (or skips those whose image size is written in ``get_inputs``). Here only the batch
(2) and the image (``--size``, 32 by default) shrink; the channels stay the net's own. Each task is traced,
lowered as ``stitch bench`` lowers it (convolutions chained in channels-last where they can be), run on the
host (kernels built with g++, a host thread per CUDA thread; convolutions through torch on the CPU, in the
layout the program asks for) and compared with eager PyTorch on random and NaN inputs. Writes OUT.json and
OUT.md: per task, the convolutions in channels-last, the transposes left, and the verdict. ``--size 0 --no-run``
counts the same at the task's own sizes, lowering only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stitch_lsp.coders.template import lower  # noqa: E402
from stitch_lsp.coders.template.program import program_data  # noqa: E402
from stitch_lsp.worker.trace_handler import trace_task  # noqa: E402

_SPATIAL = re.compile(r"\b(depth|height|width|image_height|image_width|image_size|D|H|W)\b")


def small_source(source: str, size: int) -> str:
    """The task at batch 2 and ``size`` x ``size`` images, its channels kept."""
    source = re.sub(r"\b224\s*,\s*224\b", f"{size}, {size}", source)
    over = ["batch_size = 2"]
    for line in source.splitlines():
        m = re.match(r"^([A-Za-z_][\w, ]*)=\s*(.+)$", line)
        if m and _SPATIAL.search(m.group(1)):
            names = [n.strip() for n in m.group(1).split(",") if n.strip()]
            over.append(f"{', '.join(names)} = {', '.join([str(size)] * len(names))}")
        if line.startswith("input_shape"):  # (3, 240, 240) or (batch, 3, 224, 224): the image sides only
            over.append(re.sub(r"\b(?:6[4-9]|[7-9]\d|[1-9]\d{2,})\b", str(size), line))
    return source + "\n" + "\n".join(over) + "\n"


def check(source: str, tmp: Path, run: bool = True) -> dict:
    from tests.agents import test_template_pointwise_host as host
    from tests.agents import test_template_rows_host as rows

    host._driver = rows._driver
    reply = trace_task(source)
    if not reply.ok:
        return {"result": f"trace failed: {reply.message}"}
    program = lower(reply.graph)
    steps = program_data(program)["steps"]
    convs = [s for s in steps if s.get("op") == "aten.convolution.default"]
    row = {"convs": len(convs), "channels_last": sum(bool(s.get("layout")) for s in convs),
           "input_transposes": sum(bool(s.get("convert")) for s in convs),
           "chained_kernels": sum("writes its output so" in k.note for k in program.kernels),
           "tails_writing_nchw": sum("writes NCHW" in k.note for k in program.kernels),
           "returned_in_nchw": len(getattr(program, "returned_as", {}))}
    if not run:
        row["result"] = "lowered"
        return row
    try:
        host.check_against_eager(source, program, ("random", "nan"), tmp)
        row["result"] = "ok"
    except AssertionError as exc:
        row["result"] = "MISMATCH " + " ".join(str(exc).split())[:300]
    except Exception as exc:  # noqa: BLE001 - reported per task
        row["result"] = f"ERROR {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory", type=Path)
    parser.add_argument("--tasks", default="", help="comma-separated name prefixes")
    parser.add_argument("--size", type=int, default=32, help="image size; 0: the task's own sizes")
    parser.add_argument("--no-run", action="store_true", help="lower and count only")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    prefixes = [p for p in args.tasks.split(",") if p]
    rows = {}
    for path in sorted(args.directory.glob("*.py")):
        if prefixes and not any(path.name.startswith(p) for p in prefixes):
            continue
        started = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            source = path.read_text(encoding="utf-8")
            row = check(small_source(source, args.size) if args.size else source, Path(tmp), run=not args.no_run)
        row["seconds"] = round(time.perf_counter() - started, 1)
        rows[path.stem] = row
        print(path.stem, row, flush=True)
    command = "PYTHONPATH=. python bench/conv_chain_host_check.py " + " ".join(sys.argv[1:])
    args.out.with_suffix(".json").write_text(json.dumps({"command": command, "tasks": rows}, indent=1))
    lines = ["# Convolutional nets on the host: chains in channels-last against eager PyTorch", "",
             f"Command: `{command}`", "",
             "| task | convolutions | in channels-last | input transposes | chained kernels | tails writing NCHW"
             " | outputs copied back | result | s |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r.get('convs', '')} | {r.get('channels_last', '')} | "
                     f"{r.get('input_transposes', '')} | {r.get('chained_kernels', '')} | "
                     f"{r.get('tails_writing_nchw', '')} | {r.get('returned_in_nchw', '')} | {r['result']} | "
                     f"{r['seconds']} |")
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return 0 if all(r["result"] in ("ok", "lowered") for r in rows.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
