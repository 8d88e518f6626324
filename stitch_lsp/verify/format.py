"""A verdict as text for a terminal: every section says what ran and what did not."""

from __future__ import annotations

from stitch_lsp.findings import Severity
from stitch_lsp.reports.ratios import cache_note, compile_name, latency_text, measure_note, speed_text
from stitch_lsp.verdict import (
    Accuracy, CompileResult, Correctness, HackFlag, KernelProfile, MemoryPlan, Profile, Sanitizer, StreamCheck, Timing,
    TimingStats, Verdict, VerdictStatus,
)

GiB = 1 << 30
_LINE_MAX = 240


def one_line(text: str, limit: int = _LINE_MAX) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def why_not_passed(verdict: Verdict) -> str:
    """The one line that says why a verdict is not a pass, most specific first."""
    if verdict.hack_flags:
        flags = "; ".join(f"{f.code} {f.message}" for f in verdict.hack_flags[:2])
        return one_line(f"anti-hacking: {flags}")
    if verdict.status is VerdictStatus.COMPILE_ERROR and verdict.compile:
        errors = [d.message for d in verdict.compile.diagnostics if d.severity is Severity.ERROR]
        if errors:
            return one_line(f"compile error: {errors[0]}")
    failed = verdict.correctness.failed_trials
    if verdict.status is VerdictStatus.INCORRECT and failed:
        trial = failed[0]
        err = f" max abs err {trial.max_abs_err:.3g}" if trial.max_abs_err is not None else ""
        more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
        return one_line(f"failed {trial.name}{err}{more}: {trial.detail}".rstrip(": "))
    return one_line(verdict.summary or verdict.correctness.message or verdict.status.value)


def _stats(label: str, s: TimingStats | None) -> str:
    if s is None:
        return f"  {label:<16} -"
    return (f"  {label:<16} {s.median_ms:10.4f} ms  p10 {s.p10_ms:.4f}  p90 {s.p90_ms:.4f}  "
            f"min {s.min_ms:.4f}  n={s.samples}")


def format_verdict(v: Verdict, candidate_label: str = "candidate") -> str:
    out: list[str] = []
    out.append(f"{v.status.value.upper()}: {v.summary}" + (f" {cache_note(v)}" if cache_note(v) else ""))
    if v.device:
        d = v.device
        out.append(f"device: {d.name} (sm {d.compute_capability}, driver {d.driver or '?'}, CUDA {d.cuda}, "
                   f"torch {d.torch})")
    out += compile_lines(v.compile)
    out += correctness_lines(v.correctness)
    out += timing_lines(v.timing)
    out += accuracy_lines(v.accuracy)
    out += stream_lines(v.streams)
    out += memory_lines(v.memory)
    out += profile_lines(v.profile)
    out += sanitizer_lines(v.sanitizer)
    out += hack_flag_lines(v.hack_flags)
    if v.events:
        out.append("\nevents:")
        for e in v.events:
            out.append("  " + e.replace("\n", "\n    "))
    out.append(f"\n{v.seconds:.2f} s")
    return "\n".join(out)


def compile_lines(c: CompileResult | None) -> list[str]:
    if c is None:
        return []
    state = "ok" if c.ok else "FAILED"
    cached = " (cached)" if c.cached else ""
    out = [f"\ncompile: {state} via {c.backend or '?'} in {c.seconds:.2f} s{cached}"]
    for k in c.kernels:
        out.append(f"  {k.name}: {k.registers} registers, {k.shared_bytes} B shared, {k.stack_bytes} B local/stack, "
                   f"spills {k.spill_stores}/{k.spill_loads}")
    for d in c.diagnostics:
        out.append(f"  {d.path}:{d.range.start.line + 1}: {d.severity.name.lower()}: {d.message}")
    return out


def correctness_lines(corr: Correctness) -> list[str]:
    out = [f"\ncorrectness: {corr.status}" + (f" — {corr.message}" if corr.message else "")]
    if corr.dtype:
        out.append(f"  dtype {corr.dtype}, rtol {corr.rtol:g}, atol {corr.atol:g} × max(1, RMS of the reference)")
    for t in corr.trials:
        mark = "pass" if t.passed else "FAIL"
        err = ""
        if t.max_abs_err is not None:
            err = f" max|err| {t.max_abs_err:.3g}"
            if t.max_rel_err is not None:
                err += f" max rel {t.max_rel_err:.3g}"
        out.append(f"  [{mark}] {t.name:<28} {t.kind:<12}{err}  {t.detail}")
    for n in corr.not_checked:
        out.append(f"  [not checked] {n}")
    return out


def timing_lines(tm: Timing) -> list[str]:
    out = [f"\ntiming: {tm.status}" + (f" — {tm.message}" if tm.message else "")]
    if tm.status != "measured":
        return out
    out.append("  GPU time:")
    out.append(_stats("eager", tm.eager))
    out.append(_stats(compile_name(tm.compile_mode), tm.compiled))
    out.append(_stats("candidate", tm.candidate))
    if tm.eager_latency is not None:
        out.append("  call latency (host included):")
        out.append(_stats("eager", tm.eager_latency))
        out.append(_stats(compile_name(tm.compile_mode), tm.compiled_latency))
        out.append(_stats("candidate", tm.candidate_latency))
    speed = speed_text(tm)
    if speed:
        out.append(f"  speedup: {speed} (GPU time)")
    latency = latency_text(tm)
    if latency:
        out.append(f"  by call latency (host included): {latency}")
    out.append(f"  {measure_note(tm)}")
    return out + _timing_conditions(tm)


def _timing_conditions(tm: Timing) -> list[str]:
    """What the measurement ran under: clocks, the host clock's agreement, extra scrutiny, the method."""
    out = []
    if tm.clocks is not None and tm.clocks.source:
        sm = "-".join(str(v) for v in sorted(set(tm.clocks.sm_mhz))) or "?"
        mem = "-".join(str(v) for v in sorted(set(tm.clocks.mem_mhz))) or "?"
        out.append(f"  clocks ({tm.clocks.source}): SM {sm} MHz, memory {mem} MHz"
                   + ("; " + "; ".join(tm.clocks.notes) if tm.clocks.notes else ""))
    elif tm.clocks is not None and tm.clocks.notes:
        out.append(f"  clocks: {'; '.join(tm.clocks.notes)}")
    if not tm.host_clock_ok:
        out.append("  host clock disagrees with the CUDA events: work hidden from the timer")
    if tm.suspicious:
        out.append("  over 10x: extra scrutiny ran")
    if tm.method:
        out.append(f"  method: {tm.method}")
    return out


def profile_lines(p: Profile) -> list[str]:
    out = [f"\nprofile: {p.status}" + (f" — {p.message}" if p.message else "")]
    for k in p.kernels:
        out.append("  " + ", ".join(_profile_parts(k)))
        for r in k.rules:
            gain = f" (est. {r.estimated_speedup_pct:.0f}% faster)" if r.estimated_speedup_pct else ""
            out.append(f"    {r.rule_type or 'rule'} {r.name}{gain}: {r.message[:300]}")
    return out


def _profile_parts(k: KernelProfile) -> list[str]:
    parts = [f"{k.role} {k.name}"]
    if k.duration_us is not None:
        parts.append(f"{k.duration_us:.2f} us")
    if k.dram_throughput_pct is not None:
        parts.append(f"DRAM {k.dram_throughput_pct:.1f}%")
    if k.sm_throughput_pct is not None:
        parts.append(f"SM {k.sm_throughput_pct:.1f}%")
    if k.achieved_occupancy_pct is not None:
        parts.append(f"occupancy {k.achieved_occupancy_pct:.1f}%/{k.theoretical_occupancy_pct or 0:.1f}%"
                     + (f" ({k.occupancy_limiter})" if k.occupancy_limiter else ""))
    if k.registers is not None:
        parts.append(f"{k.registers} regs")
    if k.bound:
        parts.append(f"{k.bound}-bound")
    return parts


def sanitizer_lines(s: Sanitizer) -> list[str]:
    out = [f"\nsanitizer: {s.status}" + (f" — {s.message}" if s.message else "")]
    for f in s.findings:
        where = f" at {f.file}:{f.line + 1}" if f.line is not None else ""
        out.append(f"  {f.tool}: {f.kind}{where} in {f.kernel or '?'}: {f.message[:200]}")
    return out


def hack_flag_lines(flags: list[HackFlag]) -> list[str]:
    if not flags:
        return ["\nanti-hacking flags: none"]
    out = ["\nanti-hacking flags:"]
    for h in flags:
        where = f" line {h.line + 1}" if h.line is not None else ""
        kind = "dynamic" if h.dynamic else "static"
        out.append(f"  {h.code} ({kind}{where}): {h.message}")
    return out


def accuracy_line(a: Accuracy) -> str:
    """One line: eager's and the candidate's error against float64, and their ratio."""
    if a.status != "measured" or a.ratio is None:
        return ""
    warn = " — less accurate than eager" if a.less_accurate else ""
    return (f"{a.ratio:.2f}x eager's error against float64 (max |err| {a.candidate_max_abs_err:.3g} vs "
            f"{a.eager_max_abs_err:.3g}){warn}")


def accuracy_lines(a: Accuracy) -> list[str]:
    out = [f"\naccuracy: {a.status}" + (f" — {a.message}" if a.status != "measured" and a.message else "")]
    if a.status == "measured":
        out.append(f"  {accuracy_line(a)}")
        out.append(f"  mean |err|: eager {a.eager_mean_abs_err:.3g}, candidate {a.candidate_mean_abs_err:.3g} "
                   f"(seed {a.seed}, reference run in {a.reference_dtype})")
    return out


def stream_lines(s: StreamCheck) -> list[str]:
    out = [f"\nstreams: {s.status}" + (f" — {s.message}" if s.message else "")]
    if s.status == "checked" and len(s.streams) > 1:
        for k in s.kernels[:8]:
            where = "caller's stream" if k.stream == s.current_stream else f"stream {k.stream}"
            out.append(f"  {k.name[:70]} on {where}, {k.duration_us:.1f} us{'' if k.joined else ' — NOT JOINED'}")
    return out


def memory_lines(m: MemoryPlan) -> list[str]:
    out = [f"\nmemory: {m.status}" + (f" — {m.message}" if m.message else "")]
    if m.status in ("planned", "too_large"):
        out.append(f"  traced sizes{'' if m.traced else ' (estimated)'}: one input set {m.input_bytes / GiB:.2f} GiB, "
                   f"outputs {m.output_bytes / GiB:.2f} GiB, forward peak {m.forward_peak_bytes / GiB:.2f} GiB, "
                   f"weights {m.param_bytes / GiB:.2f} GiB")
        out.append(f"  GPU: {m.free_bytes / GiB:.2f} GiB free of {m.gpu_total_bytes / GiB:.2f} GiB, "
                   f"{m.budget_bytes / GiB:.2f} GiB to plan with; comparisons in slices of "
                   f"{m.compare_chunk_elements:,} elements"
                   + (f"; {m.timing_input_sets} timing input set(s)" if m.timing_input_sets else ""))
        for ph in m.phases:
            used = f"; the allocator held up to {ph.peak_bytes / GiB:.2f} GiB" if ph.peak_bytes is not None else ""
            state = "" if ph.runs else " — skipped"
            note = f" ({ph.note})" if ph.note else ""
            out.append(f"  {ph.name:<13} needs {ph.need_bytes / GiB:.2f} GiB of live tensors{used}{state}{note}")
    if m.peak_bytes is not None:
        out.append(f"  peak {m.peak_bytes / GiB:.2f} GiB held from the GPU (live tensors at most "
                   f"{(m.peak_allocated_bytes or 0) / GiB:.2f} GiB)")
    return out
