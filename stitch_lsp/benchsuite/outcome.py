"""Turning what the fuse pipeline returns (plan, candidate, verdict) into a TaskResult.

Pure: works on the shared data classes only, so it is tested without a GPU.
"""

from __future__ import annotations

from typing import Any

from stitch_lsp.benchsuite.results import CODER_ERROR, ERROR, NOT_COVERED, TaskDetail, TaskResult
from stitch_lsp.benchsuite.tasks import BenchTask
from stitch_lsp.pipeline import Candidate, Plan
from stitch_lsp.verdict import KernelProfile, Timing, Verdict, VerdictStatus
from stitch_lsp.verify.format import one_line, why_not_passed


def _bottleneck(verdict: Verdict) -> KernelProfile | None:
    kernels = [k for k in verdict.profile.kernels if k.role == "candidate"]
    if not kernels:
        return None
    return max(kernels, key=lambda k: k.duration_us or 0.0)


def _pct_of_peak(kernel: KernelProfile) -> float | None:
    if kernel.bound == "memory":
        return kernel.dram_throughput_pct if kernel.dram_throughput_pct is not None else kernel.memory_throughput_pct
    if kernel.bound == "compute":
        return kernel.sm_throughput_pct
    values = [v for v in (kernel.sm_throughput_pct, kernel.memory_throughput_pct) if v is not None]
    return max(values) if values else None


def describe_kernel(kernel: KernelProfile, verdict: Verdict) -> str:
    """One line on the bottleneck kernel: where it sits against the peaks, occupancy, the top ncu rule."""
    parts = [f"{kernel.name}: {kernel.bound or 'unknown'}-bound"]
    peaks = []
    if kernel.dram_throughput_pct is not None:
        peaks.append(f"DRAM {kernel.dram_throughput_pct:.0f}%")
    if kernel.sm_throughput_pct is not None:
        peaks.append(f"SM {kernel.sm_throughput_pct:.0f}%")
    if peaks:
        parts.append(" / ".join(peaks) + " of peak")
    if kernel.achieved_occupancy_pct is not None:
        occ = f"occupancy {kernel.achieved_occupancy_pct:.0f}%"
        if kernel.theoretical_occupancy_pct is not None:
            occ += f" of {kernel.theoretical_occupancy_pct:.0f}%"
        if kernel.occupancy_limiter:
            occ += f" (limited by {kernel.occupancy_limiter})"
        parts.append(occ)
    if kernel.registers:
        parts.append(f"{kernel.registers} registers")
    if kernel.spill_bytes:
        parts.append(f"{kernel.spill_bytes} B spilled")
    rules = sorted((r for r in kernel.rules if r.rule_type != "INF"),
                   key=lambda r: -(r.estimated_speedup_pct or 0.0))
    if rules:
        top = rules[0]
        est = f" (est. {top.estimated_speedup_pct:.0f}% faster)" if top.estimated_speedup_pct else ""
        parts.append(f"ncu {top.name}: {top.message}{est}")
    kernels = [k for k in verdict.profile.kernels if k.role == "candidate"]
    if len(kernels) > 1:
        parts.append(f"{len(kernels)} candidate kernels")
    return one_line("; ".join(parts))


def kernel_figures(verdict: Verdict, min_bytes: int | None) -> tuple[float | None, float | None]:
    """The candidate kernels' total duration in the profile (µs) and the bandwidth that implies."""
    durations = [k.duration_us for k in verdict.profile.kernels if k.role == "candidate"]
    if not durations or any(d is None or d <= 0 for d in durations):
        return None, None
    total = sum(durations)
    return total, (min_bytes / (total * 1e-6) / 1e9 if min_bytes else None)


def plan_bytes(plan: Plan | None) -> int | None:
    if plan is None:
        return None
    total = sum(g.bytes_moved for g in plan.groups)
    return total or None


def to_result(
    task: BenchTask,
    *,
    coder: str,
    plan: Plan | None,
    candidate: Candidate | None,
    verdict: Verdict | None,
    message: str = "",
    gpu: str = "",
    seconds: float = 0.0,
    gemm_fallback: str = "",
) -> TaskResult:
    """``gemm_fallback``: why the GEMM family's candidate is not the one judged here (the fuse service's
    note; the row's figures are the candidate's that the verdict judged)."""
    result = TaskResult(
        name=task.name,
        status="error",
        level=task.level,
        tags=list(task.tags),
        dtype=task.dtype,
        coder=candidate.coder if candidate else coder,
        gpu=gpu,
        seconds=round(seconds, 3),
        bound=task.expected_bound,
        bound_source="task" if task.expected_bound else "",
        min_bytes=task.min_bytes or plan_bytes(plan),
        gemm_fallback=one_line(gemm_fallback),
    )
    if verdict is None:
        _unjudged(result, plan, candidate, message)
        return result
    if candidate is None:  # a verdict without a candidate (no GPU, ...)
        result.status = verdict.status.value
        result.reason = why_not_passed(verdict)
        return result

    result.status = verdict.status.value
    result.summary = one_line(verdict.summary)
    result.compiled = verdict.compile.ok if verdict.compile is not None else None
    result.hack_flags = [f.code for f in verdict.hack_flags]
    _timing(result, verdict.timing)
    _profile(result, verdict)
    _reason(result, verdict, candidate, gemm_fallback)
    return result


def _unjudged(result: TaskResult, plan: Plan | None, candidate: Candidate | None, message: str) -> None:
    """Status and reason of a task that got no verdict: not traced, no candidate, or not verified."""
    if plan is None:
        # Not traced: a construct the tracer cannot follow is outside what the Coder covers; a task
        # that does not even import is broken.
        result.status = ERROR if "does not import" in message or "has no " in message else NOT_COVERED
    elif candidate is None:  # the Coder failed or is unavailable (no API key, ...)
        result.status = CODER_ERROR
    elif not candidate.fuses_anything:  # the Coder wrote no kernel: outside what it handles
        result.status = NOT_COVERED
    else:
        result.status = ERROR  # a kernel was written but never verified
    result.reason = one_line(message or "no candidate and no verdict")


def _timing(result: TaskResult, timing: Timing) -> None:
    """The speedups, their intervals, the medians and what makes the timing doubtful."""
    result.speedup_vs_eager = timing.speedup_vs_eager
    result.speedup_vs_compile = timing.speedup_vs_compile
    result.speedup_vs_eager_ci = timing.speedup_vs_eager_ci
    result.speedup_vs_compile_ci = timing.speedup_vs_compile_ci
    result.compile_mode = timing.compile_mode if timing.compiled else ""
    notes = [] if timing.converged or timing.speedup_vs_eager is None else ["not converged"]
    if timing.clocks is not None and timing.clocks.flagged:
        notes += timing.clocks.notes
    result.timing_notes = one_line("; ".join(notes))
    result.eager_ms = timing.eager.median_ms if timing.eager else None
    result.compile_ms = timing.compiled.median_ms if timing.compiled else None
    result.candidate_ms = timing.candidate.median_ms if timing.candidate else None


def _profile(result: TaskResult, verdict: Verdict) -> None:
    """The bottleneck kernel's bound and note, and the bandwidth the candidate reached."""
    kernel = _bottleneck(verdict)
    if kernel is not None:
        result.kernels = sum(1 for k in verdict.profile.kernels if k.role == "candidate")
        if kernel.bound:
            result.bound, result.bound_source = kernel.bound, "profile"
        result.pct_of_peak = _pct_of_peak(kernel)
        result.profile_note = describe_kernel(kernel, verdict)
    elif verdict.profile.status not in ("skipped", "profiled") or verdict.profile.message:
        result.profile_note = one_line(f"profile {verdict.profile.status}: {verdict.profile.message}")
    if result.min_bytes and result.candidate_ms:
        result.achieved_gbs = result.min_bytes / (result.candidate_ms * 1e-3) / 1e9
    result.kernel_us, result.kernel_gbs = kernel_figures(verdict, result.min_bytes)


def _reason(result: TaskResult, verdict: Verdict, candidate: Candidate, gemm_fallback: str) -> None:
    """What the row says beside its status: what a pass left out, or why it did not pass."""
    timing = verdict.timing
    if verdict.status is VerdictStatus.CORRECT and not verdict.hack_flags:
        notes = [gemm_fallback] if gemm_fallback else []
        blocking = list(getattr(candidate, "blocking_ops", None) or [])
        library = list(getattr(candidate, "library_calls", None) or [])
        if blocking:
            notes.append("partly covered, left as PyTorch: " + ", ".join(blocking))
        if library and not candidate.fuses_anything:
            notes.append("library call only: " + ", ".join(library))
        elif candidate.uncovered_ops and not blocking and not library:
            notes.append("left as PyTorch: " + ", ".join(candidate.uncovered_ops))
        if timing.status != "measured":
            notes.append(f"timing {timing.status}: {timing.message}".rstrip(": "))
        result.reason = one_line("; ".join(notes))
    else:
        if verdict.status is VerdictStatus.CORRECT:  # a flag on a passing verdict: never a win
            result.status = VerdictStatus.HACKING.value
        result.reason = one_line(gemm_fallback) if gemm_fallback else why_not_passed(verdict)


def to_detail(task: BenchTask, outcome: Any) -> TaskDetail:
    return TaskDetail(
        name=task.name,
        message=str(getattr(outcome, "message", "") or ""),
        plan=getattr(outcome, "plan", None),
        candidate=getattr(outcome, "candidate", None),
        verdict=getattr(outcome, "verdict", None),
    )
