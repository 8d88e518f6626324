"""The KernelBench goals of issue 13, read off a `stitch bench` report and the CPU dry run of the same commit.

    PYTHONPATH=. python bench/kernelbench_goals.py REPORT.json [REPORT.json ...] \\
        --coverage bench/results/kernelbench_coverage_after.json [--out bench/results/kernelbench_goals]

REPORT: `stitch bench` reports (a run's report.json, `bench/run_suite.sh`'s .json, or
`python -m stitch_lsp.benchsuite.merge`'s); several are merged as the merge does (a task's latest result wins).
The coverage JSON (`bench/kernelbench_dry_run.py`) says which tasks a GEMM, a convolution or attention
dominates (a library call, or the GEMM family's kernel): the speedup goals are over the others. Prints, per
level, each goal against its target; `--out` also writes OUT.md and OUT.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stitch_lsp.plan.library_calls import library_kind  # noqa: E402
from stitch_lsp.benchsuite.merge import merge  # noqa: E402
from stitch_lsp.benchsuite.results import CODER_ERROR, ERROR, SHARD_CRASHED, TIMEOUT, BenchReport  # noqa: E402
from stitch_lsp.verdict import VerdictStatus  # noqa: E402
from stitch_lsp.benchsuite.stats import claimed, geomean, pct_of_copy, valid_speedup  # noqa: E402
from stitch_lsp.serde import from_json  # noqa: E402

COVERED_GOAL = 0.85
EAGER_GOAL, COMPILE_GOAL, COMPILE_FLOOR = 1.4, 1.15, 0.97
COPY_GOAL = 0.85
# Endings that are none of the five (correct, incorrect, not covered, unverifiable, too large):
# the run, not the task, failed.
UNEXPLAINED = {ERROR, CODER_ERROR, SHARD_CRASHED, TIMEOUT, VerdictStatus.CRASHED.value, VerdictStatus.ERROR.value}
BOUND_KINDS = ("gemm", "conv", "attention")


def library_bound(row: dict) -> bool:
    """The dry run's row: a GEMM, convolution or attention call, or a GEMM-family kernel, in the program."""
    calls = [label.split(" ")[0] for label in row.get("library") or []]
    return (any(library_kind(op) in BOUND_KINDS for op in calls)
            or any(g.startswith("gemm:") for g in row.get("groups") or []))


def goals(report: BenchReport, coverage: dict[str, dict], copy_of: dict[str, float] | None = None) -> dict:
    """``copy_of``: each task's copy bandwidth, measured in the run its result comes from (default: the
    merged report's)."""
    out: dict = {"copy_gbs": report.summary.copy_bandwidth_gbs, "levels": {}}
    copy_of = copy_of or {}

    def share(r) -> float:
        return pct_of_copy(r, copy_of.get(r.name) or report.summary.copy_bandwidth_gbs) or 0
    level_of = {row["task"]: row["level"] for row in coverage.values()}
    levels = sorted({r.level for r in report.results if r.level is not None})
    for level in levels + ["all"]:
        rs = [r for r in report.results if level == "all" or r.level == level]
        not_run = [n for n in report.not_run if level == "all" or level_of.get(n) == level]
        covered = [r for r in rs if claimed(r)]
        # Unverifiable is one of the endings, not a wrong kernel: the reference's output does not depend
        # on its input, so no check can tell a right kernel from one that returns that output.
        unverifiable = [f"{r.name} ({r.reason[:160]})" for r in covered
                        if r.status == VerdictStatus.UNVERIFIABLE.value]
        wrong = [r.name for r in covered if not r.correct and r.status != VerdictStatus.UNVERIFIABLE.value]
        free = [r for r in covered if r.correct and not library_bound(coverage.get(f"{r.level}/{r.name}", {}))]
        slow = [f"{r.name} ({r.speedup_vs_compile:.2f}x: {r.reason or r.profile_note or 'no reason recorded'})"
                for r in covered if r.correct and valid_speedup(r.speedup_vs_compile)
                and r.speedup_vs_compile < COMPILE_FLOOR]
        # A GEMM's kernels can read "memory" in the profile (shared memory and L2 busier than the SMs' own
        # pipes: DRAM at 5%) without moving the data a copy does: they are out, as from the speedup goals.
        memory = [r for r in free if r.bound == "memory" and r.kernel_gbs]
        at_goal = [r for r in memory if share(r) >= 100 * COPY_GOAL]
        short = [f"{r.name} ({share(r):.1f}%: {r.profile_note[:120]})" for r in memory if r not in at_goal]
        out["levels"][str(level)] = {
            "tasks": len(rs) + len(not_run), "not_run": len(not_run),
            "errors": [f"{r.name} ({r.status}: {r.reason[:160]})" for r in rs if r.status in UNEXPLAINED],
            "covered": len(covered), "covered_pct": 100 * len(covered) / max(1, len(rs) + len(not_run)),
            "covered_not_correct": wrong, "unverifiable": unverifiable,
            "speedup_tasks": len(free),
            "geomean_vs_eager": geomean(r.speedup_vs_eager for r in free),
            "geomean_vs_compile": geomean(r.speedup_vs_compile for r in free),
            "below_floor_vs_compile": slow,
            "memory_bound_profiled": len(memory), "memory_bound_at_85pct": len(at_goal),
            "memory_bound_short": short,
            "bench_seconds": sum(r.seconds for r in rs),
            "steps_seconds": steps_total(rs),
        }
    return out


def steps_total(results: list) -> dict[str, float]:
    """Seconds per step summed over the tasks, longest first: where the bench's time goes."""
    total: dict[str, float] = {}
    for r in results:
        for step, seconds in (r.steps or {}).items():
            total[step] = total.get(step, 0.0) + seconds
    return dict(sorted(((k, round(v, 1)) for k, v in total.items()), key=lambda kv: -kv[1]))


def _fmt(x: float | None, unit: str = "x") -> str:
    return "—" if x is None else f"{x:.2f}{unit}"


def render(figures: dict, command: str) -> str:
    lines = ["# KernelBench goals (issue 13)", "", f"Command: `{command}`", "",
             f"Copy bandwidth measured in the run(s): {_fmt(figures['copy_gbs'], ' GB/s')} (median; each task's "
             "share is taken against the copy measured in its own run)", "",
             "| level | tasks | not run | errors (goal 0) | covered (goal 85%) | covered, not correct (goal 0) | "
             "unverifiable | "
             f"geomean vs eager (goal {EAGER_GOAL}x) | vs torch.compile (goal {COMPILE_GOAL}x) | over tasks | "
             f"below {COMPILE_FLOOR}x compile | memory-bound >= 85% copy BW (profiled) | bench time |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for level, f in figures["levels"].items():
        lines.append(f"| {level} | {f['tasks']} | {f['not_run']} | {len(f['errors'])} | {f['covered']} "
                     f"({f['covered_pct']:.0f}%) | {len(f['covered_not_correct'])} | {len(f.get('unverifiable', []))} | "
                     f"{_fmt(f['geomean_vs_eager'])} | "
                     f"{_fmt(f['geomean_vs_compile'])} | {f['speedup_tasks']} | {len(f['below_floor_vs_compile'])} | "
                     f"{f['memory_bound_at_85pct']} of {f['memory_bound_profiled']} | {f['bench_seconds'] / 60:.1f} min |")
    f = figures["levels"]["all"]
    for title, items in (("Errors", f["errors"]), ("Covered, not correct", f["covered_not_correct"]),
                         ("Unverifiable (the reference's output does not depend on its input)", f.get("unverifiable")),
                         (f"Below {COMPILE_FLOOR}x torch.compile", f["below_floor_vs_compile"]),
                         (f"Memory-bound, under {100 * COPY_GOAL:.0f}% of the copy bandwidth", f["memory_bound_short"])):
        if items:
            lines += ["", f"{title}:", ""] + [f"- {item}" for item in items]
    steps = f.get("steps_seconds") or {}
    if steps:
        whole = sum(steps.values()) or 1.0
        lines += ["", "Where the bench's time goes (seconds summed over the tasks, from each task's progress steps):", "",
                  "| step | seconds | share |", "|---|---|---|"]
        lines += [f"| {k} | {v:.0f} | {100 * v / whole:.0f}% |" for k, v in list(steps.items())[:12]]
    lines += ["", "Speedup goals over the correct tasks that no GEMM, convolution or attention dominates (the dry "
              "run's program). Memory-bound: tasks the Nsight Compute profile ran on (`--profile all` for all)."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--coverage", type=Path, required=True, help="bench/kernelbench_dry_run.py's JSON")
    parser.add_argument("--out", type=Path, default=None, help="writes OUT.md and OUT.json")
    args = parser.parse_args()
    reports = [from_json(p.read_text(encoding="utf-8"), BenchReport) for p in args.reports]
    report = merge(reports)
    # A task's share of the copy bandwidth is taken against the copy measured in its own run.
    copy_of = {r.name: rep.summary.copy_bandwidth_gbs for rep in reports for r in rep.results
               if rep.summary.copy_bandwidth_gbs}
    coverage = {f"{row['level']}/{row['task']}": row for row in json.loads(args.coverage.read_text())}
    figures = goals(report, coverage, copy_of)
    text = render(figures, "PYTHONPATH=. python bench/kernelbench_goals.py " + " ".join(sys.argv[1:]))
    print(text)
    if args.out:
        args.out.with_suffix(".json").write_text(json.dumps(figures, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
