"""The numbers a kernel engineer expects from a suite run.

fast_p (KernelBench): the fraction of ALL selected tasks that are correct AND
faster than p times the baseline, the speedup's whole 95 % interval above p. Tasks that did not run, failed, or have no
finite speedup count in the denominator and never in the numerator.
The geometric mean is over correct tasks with a finite, positive speedup.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Iterable

from stitch_lsp.benchsuite.results import CODER_ERROR, ERROR, NOT_COVERED, FastP, Summary, TaskResult

P_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0)
COPY_TARGET = 0.8  # memory-bound kernels should reach 80% of the measured copy bandwidth
# The suite's goals for the template Coder (issue: geometric means over correct tasks).
GOAL_VS_EAGER = 1.5
GOAL_VS_COMPILE = 1.1


def valid_speedup(value: float | None) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def faster_than(speedup: float | None, ci: list[float] | None, p: float) -> bool:
    """Faster than p x the baseline beyond the noise: the whole 95 % interval lies above p.
    A result recorded without an interval (older runs) is judged by its median."""
    if not valid_speedup(speedup):
        return False
    if ci and len(ci) == 2:
        return ci[0] > p
    return speedup > p


def fast_p(results: Iterable[TaskResult], total: int, p: float, baseline: str) -> float | None:
    """``baseline`` is "eager" or "compile". None when there are no tasks at all."""
    if total <= 0:
        return None
    attr = "speedup_vs_eager" if baseline == "eager" else "speedup_vs_compile"
    hits = 0
    for result in results:
        if result.correct and faster_than(getattr(result, attr), getattr(result, attr + "_ci", None), p):
            hits += 1
    return hits / total


def geomean(values: Iterable[float | None]) -> float | None:
    logs = [math.log(v) for v in values if valid_speedup(v)]
    return math.exp(sum(logs) / len(logs)) if logs else None


def pct_of_copy(result: TaskResult, copy_gbs: float | None) -> float | None:
    """The candidate's bandwidth as a share of the copy bandwidth: its kernels' own time where the
    profile measured it, else the timed call's (which adds launch and host costs)."""
    gbs = result.kernel_gbs or result.achieved_gbs
    if not gbs or not copy_gbs or not math.isfinite(gbs):
        return None
    return 100.0 * gbs / copy_gbs


def claimed(result: TaskResult) -> bool:
    """The Coder wrote a kernel for the task (whatever became of it)."""
    if result.status in (NOT_COVERED, CODER_ERROR):
        return False
    return not (result.status == ERROR and not result.compiled)


def misses(result: TaskResult, copy_gbs: float | None) -> list[str]:
    """The goals a correct task falls short of, in words; empty when it meets them all."""
    if not result.correct:
        return []
    out = []
    if not valid_speedup(result.speedup_vs_eager) or result.speedup_vs_eager < GOAL_VS_EAGER:
        out.append(f"< {GOAL_VS_EAGER:g}x eager")
    if not valid_speedup(result.speedup_vs_compile) or result.speedup_vs_compile < GOAL_VS_COMPILE:
        out.append(f"< {GOAL_VS_COMPILE:g}x torch.compile")
    share = pct_of_copy(result, copy_gbs)
    if result.bound == "memory" and share is not None and share < 100 * COPY_TARGET:
        out.append(f"{share:.0f}% of copy bandwidth")
    return out


def summarise(results: list[TaskResult], total: int, copy_gbs: float | None = None) -> Summary:
    correct = [r for r in results if r.correct]
    compiled = sum(1 for r in results if r.compiled)
    memory = [r for r in correct if r.bound == "memory" and pct_of_copy(r, copy_gbs) is not None]
    return Summary(
        tasks=total,
        ran=len(results),
        compiled=compiled,
        correct=len(correct),
        compile_rate=compiled / total if total else None,
        correct_rate=len(correct) / total if total else None,
        fast_p=[
            FastP(p=p, vs_eager=fast_p(results, total, p, "eager"), vs_compile=fast_p(results, total, p, "compile"))
            for p in P_VALUES
        ],
        geomean_vs_eager=geomean(r.speedup_vs_eager for r in correct),
        geomean_vs_compile=geomean(r.speedup_vs_compile for r in correct),
        geomean_count=sum(1 for r in correct if valid_speedup(r.speedup_vs_eager)),
        geomean_compile_count=sum(1 for r in correct if valid_speedup(r.speedup_vs_compile)),
        copy_bandwidth_gbs=copy_gbs,
        memory_bound=len(memory),
        memory_bound_at_80pct=sum(1 for r in memory if pct_of_copy(r, copy_gbs) >= 100 * COPY_TARGET),
        statuses=dict(sorted(Counter(r.status for r in results).items())),
        covered=sum(1 for r in results if claimed(r)),
        covered_correct=sum(1 for r in results if claimed(r) and r.correct),
    )
