"""Combine the reports of runs that each covered part of a suite (``stitch bench --part I/N``)
into one table and summary:

    python -m stitch_lsp.benchsuite.merge A.json B.json [--out PREFIX] [--details RUN_DIR ...]

Rates and fast_p are recomputed over all tasks of all parts; a task in several reports
keeps its latest result. The copy bandwidth is the median over the GPUs measured.
``--details`` re-reads each task's kept verdict (RUN_DIR/details/<task>.json) and
recomputes the figures derived from it, for reports written before a figure existed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from stitch_lsp.benchsuite.outcome import kernel_figures
from stitch_lsp.benchsuite.results import BenchReport, RunInfo, TaskDetail
from stitch_lsp.benchsuite.stats import summarise
from stitch_lsp.benchsuite.table import render
from stitch_lsp.serde import from_json, to_json


def merge(reports: list[BenchReport]) -> BenchReport:
    if not reports:
        raise ValueError("no reports to merge")
    results = {}
    not_run: list[str] = []
    for report in sorted(reports, key=lambda r: r.run.finished or r.run.started):
        for result in report.results:
            results[result.name] = result
        not_run += report.not_run
    ordered = [results[name] for name in sorted(results)]
    missing = sorted(set(not_run) - set(results))
    gpus = [g for r in reports for g in r.run.gpus]
    measured = [g.copy_bandwidth_gbs for g in gpus if g.copy_bandwidth_gbs]
    copy = statistics.median(measured) if measured else None
    first = reports[0].run
    run = RunInfo(
        run_id="+".join(r.run.run_id for r in reports),
        tasks_dir=first.tasks_dir,
        command=" ; ".join(r.run.command for r in reports),
        coder=first.coder if all(r.run.coder == first.coder for r in reports) else "mixed",
        started=min(r.run.started for r in reports),
        finished=max(r.run.finished for r in reports),
        interrupted=any(r.run.interrupted for r in reports),
        stopped_by_budget=any(r.run.stopped_by_budget for r in reports),
        gpus=gpus,
        filters=" + ".join(r.run.filters for r in reports),
        stitch_version=first.stitch_version,
    )
    total = len(ordered) + len(missing)
    return BenchReport(run=run, summary=summarise(ordered, total, copy), results=ordered, not_run=missing)


def refresh_from_details(report: BenchReport, run_dirs: list[Path]) -> int:
    """Kernel-time figures recomputed from the verdicts kept under each run's details/; how many."""
    refreshed = 0
    for result in report.results:
        for run_dir in run_dirs:
            path = run_dir / "details" / f"{result.name}.json"
            if not path.is_file():
                continue
            detail = from_json(path.read_text(encoding="utf-8"), TaskDetail)
            if detail.verdict is not None:
                result.kernel_us, result.kernel_gbs = kernel_figures(detail.verdict, result.min_bytes)
                refreshed += 1
            break
    return refreshed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stitch_lsp.benchsuite.merge", description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=None, help="write PREFIX.json and PREFIX.txt")
    parser.add_argument("--details", type=Path, action="append", default=[], metavar="RUN_DIR",
                        help="a run directory whose details/ verdicts refresh the derived figures (repeatable)")
    args = parser.parse_args(argv)
    try:
        reports = [from_json(p.read_text(encoding="utf-8"), BenchReport) for p in args.reports]
        for report in reports:
            refresh_from_details(report, args.details)
        merged = merge(reports)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        print(f"merge: {exc}", file=sys.stderr)
        return 2
    text = render(merged)
    print(text)
    if args.out:
        Path(f"{args.out}.json").write_text(to_json(merged, indent=1) + "\n", encoding="utf-8")
        Path(f"{args.out}.txt").write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
