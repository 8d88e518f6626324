"""Regenerate bench/tasks/README.md's table and bench/tasks/index.json from the tasks.

    PYTHONPATH=. python bench/task_table.py            # rewrite both
    PYTHONPATH=. python bench/task_table.py --check    # exit 1 if either is stale

Sizes come from running each task on the meta device (shapes only, no memory):
minimum bytes = every input, parameter, buffer and the output, each moved once;
FLOPs = the matrix multiplies (torch's FlopCounterMode), elementwise work left out.
The floor is max(bytes / copy bandwidth, FLOPs / peak) with the H100 figures below.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

TASKS = Path(__file__).resolve().parent / "tasks"
COPY_GBS = 2940.0  # device-to-device copy measured on the H100 (DESIGN.md)
PEAK_TFLOPS = {torch.float32: 49.0, torch.bfloat16: 989.0}  # fp32: eager cuBLAS measured; bf16: datasheet dense
BEGIN, END = "<!-- task-table:begin -->", "<!-- task-table:end -->"


def describe(path: Path) -> dict:
    spec = importlib.util.spec_from_file_location(f"stitch_bench_task_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with torch.device("meta"):
        model = module.Model(*module.get_init_inputs())
        inputs = module.get_inputs()
        with FlopCounterMode(display=False) as counter:
            out = model(*inputs)
    tensors = [*inputs, *model.parameters(), *model.buffers(), out]
    min_bytes = sum(t.numel() * t.element_size() for t in tensors)
    flops = int(counter.get_total_flops())
    floor_ms = max(min_bytes / (COPY_GBS * 1e9), flops / (PEAK_TFLOPS[module.DTYPE] * 1e12)) * 1e3
    return {
        "name": path.stem,
        "level": module.LEVEL,
        "tags": list(module.TAGS),
        "what": module.__doc__.strip().split("\n\n")[0].replace("\n", " "),
        "inputs": [f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}" for t in inputs],
        "output": f"{tuple(out.shape)} {str(out.dtype).removeprefix('torch.')}",
        "dtype": str(module.DTYPE).removeprefix("torch."),
        "bound": "compute" if "compute-bound" in module.TAGS else "memory",
        "min_bytes": min_bytes,
        "flops": flops,
        "floor_ms": round(floor_ms, 4),
    }


def render(rows: list[dict]) -> str:
    lines = [
        "| task | level | what it models | inputs → output | dtype | bound | min bytes | FLOPs | floor (H100) |",
        "|---|---|---|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        shapes = ", ".join(s.rsplit(" ", 1)[0] for s in r["inputs"]) + " → " + r["output"].rsplit(" ", 1)[0]
        flops = f"{r['flops'] / 1e9:.1f} G" if r["flops"] else "—"
        lines.append(
            f"| `{r['name']}` | {r['level']} | {r['what']} | {shapes} | {r['dtype']} | {r['bound']} "
            f"| {r['min_bytes'] / 1e6:.0f} MB | {flops} | {r['floor_ms'] * 1e3:.0f} µs |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if README.md or index.json is stale")
    args = parser.parse_args()
    rows = [describe(p) for p in sorted(TASKS.glob("*.py")) if not p.name.startswith("_")]
    index = json.dumps({"copy_gbs": COPY_GBS, "tasks": rows}, indent=1) + "\n"
    readme_path, index_path = TASKS / "README.md", TASKS / "index.json"
    readme = readme_path.read_text()
    head, rest = readme.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    new_readme = f"{head}{BEGIN}\n{render(rows)}\n{END}{tail}"
    if args.check:
        stale = [p.name for p, text in ((readme_path, new_readme), (index_path, index))
                 if not p.exists() or p.read_text() != text]
        if stale:
            print("stale: " + ", ".join(stale) + " (run bench/task_table.py)", file=sys.stderr)
            return 1
        return 0
    readme_path.write_text(new_readme)
    index_path.write_text(index)
    print(f"{len(rows)} tasks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
