"""The text a user reads: one row per task, then the suite summary."""

from __future__ import annotations

import math

from stitch_lsp.benchsuite.results import BenchReport, Summary, TaskResult
from stitch_lsp.benchsuite.stats import (
    COPY_TARGET, GOAL_VS_COMPILE, GOAL_VS_EAGER, misses, pct_of_copy, valid_speedup,
)


def _x(value: float | None, ci: list[float] | None = None, baseline: str = "") -> str:
    """A speedup with its interval: "1.80x ±0.02"; "same" when the interval holds 1.0."""
    if not valid_speedup(value):
        return "—"
    if ci and len(ci) == 2:
        if ci[0] <= 1.0 <= ci[1]:
            return f"same as {baseline} (within noise)" if baseline else "same (within noise)"
        half = max(ci[1] - value, value - ci[0], 0.0)
        return f"{value:.2f}x ±{half:.2f}" if half >= 0.005 else f"{value:.2f}x ±<0.01"
    return f"{value:.2f}x"


def _ms(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value * 1e3:.0f}µs" if value < 1 else f"{value:.2f}ms"


def _pct(value: float | None) -> str:
    return f"{value:.0f}%" if value is not None and math.isfinite(value) else "—"


def _rate(value: float | None) -> str:
    return f"{100 * value:.1f}%" if value is not None else "—"


def result_cell(result: TaskResult) -> str:
    if result.correct:
        return "correct" + (f" ({result.reason})" if result.reason else "")
    return f"{result.status}: {result.reason}" if result.reason else result.status


def render_rows(results: list[TaskResult], copy_gbs: float | None, width: int = 60) -> str:
    header = ("task", "result", "vs eager", "vs compile", "eager", "compile", "stitch", "bound", "% peak", "% copy BW")
    rows = [header]
    for r in results:
        cell = result_cell(r)
        if len(cell) > width:
            cell = cell[: width - 1] + "…"
        bound = r.bound + ("?" if r.bound and r.bound_source == "task" else "")
        copy = _pct(pct_of_copy(r, copy_gbs)) if r.bound == "memory" else ""
        if copy and copy != "—" and not r.kernel_gbs:
            copy = "~" + copy  # from the timed call: no profile of the kernels alone
        rows.append((r.name, cell, _x(r.speedup_vs_eager, r.speedup_vs_eager_ci, "eager"),
                     _x(r.speedup_vs_compile, r.speedup_vs_compile_ci, "torch.compile"), _ms(r.eager_ms),
                     _ms(r.compile_ms), _ms(r.candidate_ms), bound or "—", _pct(r.pct_of_peak), copy))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for n, row in enumerate(rows):
        cells = [c.ljust(widths[i]) if i < 2 or i == 7 else c.rjust(widths[i]) for i, c in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    modes = sorted({r.compile_mode for r in results if r.compile_mode})
    lines.append(f"speedups: ratios of GPU time (calls queued back to back), median ± its 95% interval; "
                 f"torch.compile mode {', '.join(modes) or 'default'}")
    noted = [r for r in results if r.timing_notes]
    for r in noted[:10]:
        lines.append(f"  {r.name}: {r.timing_notes}")
    return "\n".join(lines)


def render_summary(summary: Summary) -> str:
    s = summary
    lines = [
        f"tasks {s.tasks}   ran {s.ran}   compiled {s.compiled} ({_rate(s.compile_rate)})   "
        f"correct {s.correct} ({_rate(s.correct_rate)})",
        "fast_p (share of ALL tasks correct and faster than p x the baseline, the 95% interval above p):",
        "  p          " + "  ".join(f"{f.p:>5g}" for f in s.fast_p),
        "  vs eager   " + "  ".join(f"{_rate(f.vs_eager):>5}" for f in s.fast_p),
        "  vs compile " + "  ".join(f"{_rate(f.vs_compile):>5}" for f in s.fast_p),
        f"geometric-mean speedup over {s.geomean_count} correct tasks: {_x(s.geomean_vs_eager)} vs eager; "
        + (f"{_x(s.geomean_vs_compile)} vs torch.compile"
           + ("" if s.geomean_compile_count == s.geomean_count
              else f" (over {s.geomean_compile_count}: torch.compile failed or was not timed on the others)")),
    ]
    if s.copy_bandwidth_gbs:
        lines.append(
            f"measured copy bandwidth {s.copy_bandwidth_gbs:.0f} GB/s; memory-bound correct kernels at "
            f">= {100 * COPY_TARGET:.0f}% of it: {s.memory_bound_at_80pct} of {s.memory_bound}"
        )
    else:
        lines.append("copy bandwidth not measured: no % of copy bandwidth")
    if s.statuses:
        lines.append("results: " + ", ".join(f"{k} {v}" for k, v in s.statuses.items()))
    lines.append(render_goals(s))
    return "\n".join(lines)


def _mark(ok: bool | None) -> str:
    return "met" if ok else "NOT met" if ok is not None else "unknown"


def render_goals(s: Summary) -> str:
    """The suite's goals for the Coder, each met or not."""
    all_covered = s.covered_correct == s.covered if s.covered else None
    eager = s.geomean_vs_eager >= GOAL_VS_EAGER if s.geomean_vs_eager is not None else None
    compiled = s.geomean_vs_compile >= GOAL_VS_COMPILE if s.geomean_vs_compile is not None else None
    copy = s.memory_bound_at_80pct == s.memory_bound if s.memory_bound else None
    return "\n".join([
        "goals:",
        f"  correct on every task it covers: {s.covered_correct} of {s.covered} covered tasks "
        f"(not covered: {s.ran - s.covered}, not run: {s.tasks - s.ran}) — {_mark(all_covered)}",
        f"  geometric mean >= {GOAL_VS_EAGER:g}x eager: {_x(s.geomean_vs_eager)} — {_mark(eager)}",
        f"  geometric mean >= {GOAL_VS_COMPILE:g}x torch.compile: {_x(s.geomean_vs_compile)} — {_mark(compiled)}",
        f"  memory-bound kernels >= {100 * COPY_TARGET:.0f}% of copy bandwidth: {s.memory_bound_at_80pct} of "
        f"{s.memory_bound} — {_mark(copy)}",
    ])


def render_misses(results: list[TaskResult], copy_gbs: float | None) -> str:
    """For each correct task short of a goal: which goals, and what its profile shows."""
    lines = []
    for r in results:
        short = misses(r, copy_gbs)
        if short:
            why = r.profile_note or "no profile (run with --profile all or misses to see why)"
            lines.append(f"  {r.name}: {', '.join(short)}. {why}")
    return "why the misses miss:\n" + "\n".join(lines) if lines else ""


def render(report: BenchReport) -> str:
    run = report.run
    where = f"  on {run.executor}" if run.executor not in ("", "local") else ""
    precision = f"  precision {run.precision}" if run.precision and run.precision != "fp32" else ""
    parts = [f"stitch bench  run {run.run_id}  coder {run.coder}{precision}  tasks {run.tasks_dir}{where}"]
    for gpu in run.gpus:
        dev = gpu.device
        name = f"{dev.name} (driver {dev.driver}, CUDA {dev.cuda}, torch {dev.torch})" if dev else "unknown device"
        bw = f"copy {gpu.copy_bandwidth_gbs:.0f} GB/s" if gpu.copy_bandwidth_gbs else gpu.message
        parts.append(f"gpu {gpu.slot or 'default'}: {name}; {bw}")
    parts.append("")
    parts.append(render_rows(report.results, report.summary.copy_bandwidth_gbs))
    short = render_misses(report.results, report.summary.copy_bandwidth_gbs)
    if short:
        parts += ["", short]
    parts.append("")
    parts.append(render_summary(report.summary))
    retried = [r for r in report.results if r.retried]
    if retried:
        parts.append(f"ran again after losing its worker: {len(retried)}: "
                     + "; ".join(f"{r.name} ({r.retried[-1]})" for r in retried[:6]) + (" …" if len(retried) > 6 else ""))
    if report.not_run:
        why = "interrupted" if run.interrupted else "out of time budget" if run.stopped_by_budget else "not run"
        parts.append(f"not run ({why}): {len(report.not_run)}: " + ", ".join(report.not_run[:12])
                     + (" …" if len(report.not_run) > 12 else ""))
    parts.append("bound: from the Nsight Compute profile; '?' = the task's expected bound (no profile). "
                 "% copy BW = the task's minimum bytes / the candidate kernels' time in the Nsight Compute profile "
                 "('~': / the timed call's time, launch and host costs included, where no profile ran), "
                 "against the copy bandwidth measured in this run.")
    return "\n".join(parts)
