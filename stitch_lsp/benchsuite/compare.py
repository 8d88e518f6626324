"""Two bench reports side by side (before / after a Coder change, template vs llm):

    python -m stitch_lsp.benchsuite.compare BEFORE.json AFTER.json

One row per task in either report: each side's result and speedup over eager and
torch.compile, and how the speedup changed; then the two summaries' headline figures.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stitch_lsp.benchsuite.results import BenchReport, TaskResult
from stitch_lsp.benchsuite.stats import valid_speedup
from stitch_lsp.serde import from_json


def _x(value: float | None) -> str:
    return f"{value:.2f}x" if valid_speedup(value) else "—"


def _cell(result: TaskResult | None) -> str:
    if result is None:
        return "not run"
    return "correct" if result.correct else result.status


def _change(a: TaskResult | None, b: TaskResult | None) -> str:
    if a is None or b is None:
        return ""
    if a.correct != b.correct:
        return "now correct" if b.correct else "now FAILS"
    if a.correct and valid_speedup(a.speedup_vs_eager) and valid_speedup(b.speedup_vs_eager):
        ratio = b.speedup_vs_eager / a.speedup_vs_eager
        return f"{ratio:.2f}x" + (" faster" if ratio > 1.02 else " slower" if ratio < 0.98 else "")
    return ""


def compare(before: BenchReport, after: BenchReport) -> str:
    a = {r.name: r for r in before.results}
    b = {r.name: r for r in after.results}
    names = sorted(set(a) | set(b) | set(before.not_run) | set(after.not_run))
    header = ("task", "before", "eager", "compile", "after", "eager", "compile", "change")
    rows = [header]
    for name in names:
        ra, rb = a.get(name), b.get(name)
        rows.append((name, _cell(ra), _x(ra.speedup_vs_eager if ra else None),
                     _x(ra.speedup_vs_compile if ra else None), _cell(rb),
                     _x(rb.speedup_vs_eager if rb else None), _x(rb.speedup_vs_compile if rb else None),
                     _change(ra, rb)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    sa, sb = before.summary, after.summary
    lines += [
        "",
        f"{'':24}{'before':>12}{'after':>12}",
        f"{'correct':24}{f'{sa.correct}/{sa.tasks}':>12}{f'{sb.correct}/{sb.tasks}':>12}",
        f"{'geomean vs eager':24}{_x(sa.geomean_vs_eager):>12}{_x(sb.geomean_vs_eager):>12}",
        f"{'geomean vs compile':24}{_x(sa.geomean_vs_compile):>12}{_x(sb.geomean_vs_compile):>12}",
    ]
    for fa, fb in zip(sa.fast_p, sb.fast_p):
        va = f"{100 * fa.vs_eager:.0f}%" if fa.vs_eager is not None else "—"
        vb = f"{100 * fb.vs_eager:.0f}%" if fb.vs_eager is not None else "—"
        lines.append(f"{f'fast_{fa.p:g} vs eager':24}{va:>12}{vb:>12}")
    lines.append(f"before: {before.run.run_id} ({before.run.coder}); after: {after.run.run_id} ({after.run.coder})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stitch_lsp.benchsuite.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    try:
        reports = [from_json(p.read_text(encoding="utf-8"), BenchReport) for p in (args.before, args.after)]
    except (OSError, ValueError, TypeError, KeyError) as exc:
        print(f"compare: {exc}", file=sys.stderr)
        return 2
    print(compare(*reports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
