"""Where a candidate's GPU time goes, kernel by kernel, beside eager's and ``torch.compile``'s.

    python bench/kernel_breakdown.py TASK_DIR [TASK_DIR ...] [--calls 20] [--json OUT.json]

TASK_DIR is a kept task folder (``reference.py`` with ``Model`` / ``get_inputs`` / ``get_init_inputs``, and
``candidate.py`` with ``ModelNew``), as ``stitch fuse`` and ``stitch bench`` leave under ``.stitch/tasks/``.
Each contender runs ``--calls`` times under ``torch.profiler`` with L2 flushed before every call (as the
Verifier's timing does); the table gives every kernel's mean GPU time a call, and the sum. The flush's own
kernel is left out. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _load(path: Path, name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__["__name__"] = name
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    return module


def _kernels(fn, calls: int, flush) -> dict[str, float]:
    """Mean GPU microseconds a call, by kernel name."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush.zero_()
            fn()
        torch.cuda.synchronize()
    total: dict[str, float] = defaultdict(float)
    for event in prof.events():
        if event.device_type.name != "CUDA":
            continue
        name = event.name
        if "fill" in name.lower() and "vectorized_elementwise" in name.lower():
            continue  # the flush
        total[name[:110]] += event.device_time / calls if hasattr(event, "device_time") else event.cuda_time / calls
    return dict(total)


def breakdown(task_dir: Path, calls: int) -> dict:
    import torch

    ref = _load(task_dir / "reference.py", "reference")
    cand = _load(task_dir / "candidate.py", "candidate")
    torch.manual_seed(0)
    with torch.device("cuda"):
        init = list(ref.get_init_inputs())
        model = ref.Model(*init).eval()
        mine = cand.ModelNew(*init).eval()
        inputs = list(ref.get_inputs())
    mine.load_state_dict(model.state_dict(), strict=False)
    compiled = torch.compile(model)
    flush = torch.empty(64 << 20, device="cuda", dtype=torch.float32)
    out: dict = {"task": str(task_dir)}
    with torch.no_grad():
        for label, fn in (("eager", model), ("torch.compile", compiled), ("candidate", mine)):
            k = _kernels(lambda: fn(*inputs), calls, flush)
            out[label] = {"sum_us": round(sum(k.values()), 2), "kernels": {n: round(v, 2) for n, v in
                                                                           sorted(k.items(), key=lambda kv: -kv[1])}}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tasks", nargs="+", type=Path)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = []
    for task in args.tasks:
        try:
            row = breakdown(task, args.calls)
        except Exception as exc:  # noqa: BLE001 - one task's failure is a line, not the end
            print(f"{task}: {type(exc).__name__}: {exc}")
            continue
        rows.append(row)
        print(f"\n## {task}")
        for label in ("eager", "torch.compile", "candidate"):
            print(f"{label}: {row[label]['sum_us']} µs of kernels a call")
            for name, us in row[label]["kernels"].items():
                print(f"    {us:8.2f}  {name}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
