"""``stitch bench --repeat N``: every task verified N times, each time in fresh processes and with no cache.

Each repetition is a whole bench run of its own (its shard and worker processes start
anew, every verdict is measured, none is answered from a cache or reuses a compiled
baseline) under ``RUN_DIR/repeat-K``. The summary gives, per task, the median of the N
speedups and their spread (max / min), and ``repeat.json`` keeps every figure:

    {"gpu": ..., "commit": ..., "runs": N,
     "tasks": [{"name": ..., "speedup_vs_eager": [...], "speedup_vs_compile": [...]}]}

(a run where the task was not correct contributes null).
"""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path
from typing import Any, Callable, Sequence

import attrs

from stitch_lsp.benchsuite.results import BenchReport
from stitch_lsp.benchsuite.stats import valid_speedup

REPEAT_FILE = "repeat.json"


def spread(values: Sequence[float | None]) -> float | None:
    """max / min of the valid values; None with fewer than two."""
    good = [v for v in values if valid_speedup(v)]
    return max(good) / min(good) if len(good) >= 2 else None


def check_record(record: Any) -> list[str]:
    """What keeps ``record`` from the repeat layout tooling reads; empty when it has it exactly."""
    problems = []
    if not isinstance(record, dict) or set(record) != {"gpu", "commit", "runs", "tasks"}:
        return ["want exactly the keys gpu, commit, runs, tasks"]
    if not isinstance(record["runs"], int) or not isinstance(record["tasks"], list):
        return ["runs is an integer and tasks a list"]
    for t in record["tasks"]:
        if not isinstance(t, dict) or set(t) != {"name", "speedup_vs_eager", "speedup_vs_compile"}:
            problems.append(f"task {t!r}: want exactly name, speedup_vs_eager, speedup_vs_compile")
            continue
        for key in ("speedup_vs_eager", "speedup_vs_compile"):
            if len(t[key]) != record["runs"] or not all(v is None or isinstance(v, (int, float)) for v in t[key]):
                problems.append(f"{t['name']}: {key} wants one number (or null) per run")
    return problems


def median(values: Sequence[float | None]) -> float | None:
    good = [v for v in values if valid_speedup(v)]
    return statistics.median(good) if good else None


def commit() -> str:
    """The commit of the code that ran: ``$STITCH_COMMIT`` where the code was copied out of its checkout,
    else its git checkout's, else "unknown"."""
    import os

    if os.environ.get("STITCH_COMMIT"):
        return os.environ["STITCH_COMMIT"]
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def gpu_name(reports: Sequence[BenchReport], run_dirs: Sequence[Path] = ()) -> str:
    """The GPU the runs measured (the copy-bandwidth step's record, else a verdict's device)."""
    for report in reports:
        for info in report.run.gpus:
            if info.device is not None and info.device.name:
                return info.device.name
    for folder in run_dirs:
        for path in sorted((Path(folder) / "details").glob("*.json")):
            try:
                device = (json.loads(path.read_text(encoding="utf-8")).get("verdict") or {}).get("device") or {}
            except (OSError, ValueError):
                continue
            if device.get("name"):
                return str(device["name"])
    return ""


def collect(reports: Sequence[BenchReport], run_dirs: Sequence[Path] = ()) -> dict[str, Any]:
    """The repeat record: every task of any run, its speedups in run order (null where not correct)."""
    names: list[str] = []
    for report in reports:
        for r in report.results:
            if r.name not in names:
                names.append(r.name)
    tasks = []
    for name in names:
        eager, compiled = [], []
        for report in reports:
            result = next((r for r in report.results if r.name == name), None)
            ok = result is not None and result.correct
            eager.append(result.speedup_vs_eager if ok and valid_speedup(result.speedup_vs_eager) else None)
            compiled.append(result.speedup_vs_compile if ok and valid_speedup(result.speedup_vs_compile) else None)
        tasks.append({"name": name, "speedup_vs_eager": eager, "speedup_vs_compile": compiled})
    return {"gpu": gpu_name(reports, run_dirs), "commit": commit(), "runs": len(reports), "tasks": tasks}


def render(record: dict[str, Any]) -> str:
    rows = [("task", "vs eager median", "max/min", "vs compile median", "max/min", "correct runs")]
    for t in record["tasks"]:
        e, c = t["speedup_vs_eager"], t["speedup_vs_compile"]
        rows.append((t["name"], _x(median(e)), _r(spread(e)), _x(median(c)), _r(spread(c)),
                     f"{sum(1 for v in e if v is not None)}/{len(e)}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)).rstrip()
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.insert(0, f"{record['runs']} runs, each in fresh processes with no cache, on {record['gpu'] or '?'} "
                    f"(commit {record['commit'][:12]}); speedups are ratios of GPU time")
    return "\n".join(lines)


def _x(v: float | None) -> str:
    return f"{v:.3f}x" if v is not None else "—"


def _r(v: float | None) -> str:
    return f"{v:.3f}" if v is not None else "—"


def run_repeated(options: Any, n: int, run_once: Callable[[Any], BenchReport]) -> tuple[list[BenchReport], dict]:
    """Run the bench ``n`` times (``run_once(options)`` each), fresh and uncached, under RUN_DIR/repeat-K."""
    reports, dirs = [], []
    for k in range(1, n + 1):
        one = attrs.evolve(options, run_dir=Path(options.run_dir) / f"repeat-{k}", resume=False, rerun=[],
                           no_cache=True)
        dirs.append(one.run_dir)
        reports.append(run_once(one))
        # Written after every run: a repeat stopped part way keeps the runs it finished.
        record = collect(reports, dirs)
        Path(options.run_dir).mkdir(parents=True, exist_ok=True)
        (Path(options.run_dir) / REPEAT_FILE).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        if reports[-1].run.interrupted:
            break
    return reports, record
