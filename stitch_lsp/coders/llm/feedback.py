"""The Verifier's verdict, written for the model: what failed, where, and what to do next.

Bounded in size (a long nvcc log or a hundred failing trials would crowd out the
code); compile errors are quoted with the offending source line.
"""

from __future__ import annotations

from stitch_lsp.reports.ratios import speed_text
from stitch_lsp.verify.rubric import LABELS, static_analysis
from stitch_lsp.pipeline import Candidate, Plan
from stitch_lsp.verdict import KernelProfile, RubricScore, Verdict, VerdictStatus

MAX_DIAGNOSTICS = 12
MAX_TRIALS = 8
MAX_RULES = 4


def header(round_number: int, rounds: int) -> str:
    left = rounds - round_number
    return f"# Verifier feedback, round {round_number} of {rounds} ({left} round{'s' if left != 1 else ''} left)"


def reply_problem_feedback(problem: str, round_number: int, rounds: int) -> str:
    return "\n\n".join([header(round_number, rounds), "Your reply could not be used:", problem,
                        "Answer again in the required format: a short plan, one ```cuda block, one ```python block."])


def verdict_feedback(verdict: Verdict, candidate: Candidate, *, round_number: int, rounds: int,
                     target_speedup: float, plan: Plan | None = None) -> str:
    parts = [header(round_number, rounds), f"Result: {verdict.status.value} — {verdict.summary}"]
    status = verdict.status
    if verdict.compile is not None and not verdict.compile.ok:
        parts.append(compile_section(verdict, candidate))
    if verdict.hack_flags:
        parts.append(hacking_section(verdict))
    if verdict.correctness.failed_trials or status is VerdictStatus.INCORRECT:
        parts.append(correctness_section(verdict))
    if status in (VerdictStatus.CRASHED, VerdictStatus.TIMEOUT, VerdictStatus.OUT_OF_MEMORY, VerdictStatus.TOO_LARGE,
                  VerdictStatus.BAD_INPUT, VerdictStatus.ERROR, VerdictStatus.UNVERIFIABLE):
        parts.append(failure_section(verdict))
    if status is VerdictStatus.CORRECT:
        parts.append(performance_section(verdict, target_speedup, plan))
    if verdict.sanitizer.findings:
        parts.append("Sanitizer:\n" + "\n".join(
            f"- {f.tool}: {f.kind} in {f.kernel or '?'}"
            + (f" at {f.file or 'kernel.cu'}:{f.line + 1}" if f.line is not None else "") + f": {f.message}"
            for f in verdict.sanitizer.findings[:MAX_DIAGNOSTICS]))
    if static := static_section(candidate):
        parts.append(static)
    if rubric := rubric_section(verdict.rubric):
        parts.append(rubric)
    parts.append(next_step(verdict, target_speedup))
    return "\n\n".join(parts)


def compile_section(verdict: Verdict, candidate: Candidate) -> str:
    compile_ = verdict.compile
    assert compile_ is not None
    lines = [f"Compilation failed ({compile_.backend or 'compiler'}):"]
    errors = sorted(compile_.diagnostics, key=lambda d: (int(d.severity), d.range.start.line))
    for diag in errors[:MAX_DIAGNOSTICS]:
        file = diag.path.rsplit("/", 1)[-1] or "kernel.cu"
        line = diag.range.start.line
        lines.append(f"- {file}:{line + 1}:{diag.range.start.character + 1}: {diag.severity.name.lower()}: {diag.message}")
        source = _source_for(file, candidate)
        if source is not None:
            src_lines = source.splitlines()
            if 0 <= line < len(src_lines):
                lines.append(f"    {line + 1:>4} | {src_lines[line].rstrip()}")
        lines += [f"      {note}" for note in diag.related[:3]]
    if len(errors) > MAX_DIAGNOSTICS:
        lines.append(f"- ... and {len(errors) - MAX_DIAGNOSTICS} more")
    if not errors and compile_.log:
        lines.append(_tail(compile_.log, 40))
    return "\n".join(lines)


def _source_for(file: str, candidate: Candidate) -> str | None:
    if file in candidate.cuda_sources:
        return candidate.cuda_sources[file]
    if file.endswith(".py"):
        return candidate.module_source
    if len(candidate.cuda_sources) == 1:
        return next(iter(candidate.cuda_sources.values()))
    return None


def hacking_section(verdict: Verdict) -> str:
    lines = ["Anti-hacking checks REJECTED this candidate (it will never be offered, whatever its speed):"]
    for flag in verdict.hack_flags:
        where = f" (module line {flag.line + 1})" if flag.line is not None else ""
        kind = "while running" if flag.dynamic else "in the code"
        lines.append(f"- {flag.code} {kind}{where}: {flag.message}" + (f" — {flag.evidence}" if flag.evidence else ""))
    lines.append("Do the computation in your own CUDA kernel; forward may only allocate, check, reshape and launch.")
    return "\n".join(lines)


def correctness_section(verdict: Verdict) -> str:
    c = verdict.correctness
    failed = c.failed_trials
    lines = [f"Correctness: {len(c.trials) - len(failed)} of {len(c.trials)} trials passed"
             + (f" (dtype {c.dtype}, atol {c.atol:g}, rtol {c.rtol:g})" if c.dtype else "")
             + (f". {c.message}" if c.message else "")]
    for trial in failed[:MAX_TRIALS]:
        figures = []
        if trial.max_abs_err is not None:
            figures.append(f"max abs err {trial.max_abs_err:.3g}")
        if trial.max_rel_err is not None:
            figures.append(f"max rel err {trial.max_rel_err:.3g}")
        if trial.mismatches:
            figures.append(f"{trial.mismatches} mismatching elements")
        lines.append(f"- FAILED {trial.name} ({trial.kind}): {', '.join(figures) or 'mismatch'}"
                     + (f". {trial.detail}" if trial.detail else ""))
    if len(failed) > MAX_TRIALS:
        lines.append(f"- ... and {len(failed) - MAX_TRIALS} more failed trials")
    passed_kinds = sorted({t.kind for t in c.trials if t.passed})
    if passed_kinds:
        lines.append(f"Passed kinds: {', '.join(passed_kinds)}.")
    return "\n".join(lines)


def failure_section(verdict: Verdict) -> str:
    lines = [f"The run did not complete: {verdict.status.value}."]
    lines += [f"- {event}" for event in verdict.events[-6:]]
    if verdict.correctness.message:
        lines.append(f"- {verdict.correctness.message}")
    return "\n".join(lines)


def performance_section(verdict: Verdict, target_speedup: float, plan: Plan | None) -> str:
    t = verdict.timing
    lines = []
    if t.status == "measured" and t.candidate is not None:
        # With the intervals: a ratio within noise is no gain to chase.
        speed = speed_text(t) or "speedup unknown"
        lines.append(f"Correct. Timing: {t.candidate.median_ms * 1000:.1f} µs median GPU time ({speed}); "
                     f"target {target_speedup:g}x vs eager.")
        if plan is not None and plan.floor_us:
            lines.append(f"Floor for this task: {plan.floor_us:.1f} µs — you are at "
                         f"{plan.floor_us / (t.candidate.median_ms * 1000) * 100:.0f}% of it.")
    else:
        lines.append(f"Correct. Timing not measured ({t.message or t.status}).")
    a = verdict.accuracy
    if a.status == "measured" and a.ratio is not None:
        lines.append(f"Accuracy against a float64 run of the reference: max |error| {a.candidate_max_abs_err:.3g}, "
                     f"eager's {a.eager_max_abs_err:.3g} ({a.ratio:.2f}x eager's)"
                     + (" — much less accurate than eager: keep float32 arithmetic and accumulators." if a.less_accurate
                        else "."))
    kernels = [k for k in verdict.profile.kernels if k.role == "candidate"]
    if kernels:
        lines.append("Profile (Nsight Compute):")
        for kernel in sorted(kernels, key=lambda k: -(k.duration_us or 0))[:3]:
            lines.append("- " + kernel_line(kernel))
            for rule in sorted(kernel.rules, key=lambda r: -(r.estimated_speedup_pct or 0))[:MAX_RULES]:
                est = f" (est. {rule.estimated_speedup_pct:.0f}% faster)" if rule.estimated_speedup_pct else ""
                lines.append(f"    {rule.name}{est}: {rule.message}")
    elif verdict.profile.status != "profiled":
        lines.append(f"Not profiled ({verdict.profile.message or verdict.profile.status}).")
    for res in (verdict.compile.kernels if verdict.compile else []):
        if res.spill_stores or res.spill_loads:
            lines.append(f"- {res.name}: {res.registers} registers, spills {res.spill_stores} B stores / "
                         f"{res.spill_loads} B loads — reduce register pressure.")
    return "\n".join(lines)


def kernel_line(k: KernelProfile) -> str:
    bits = [k.name]
    if k.duration_us is not None:
        bits.append(f"{k.duration_us:.1f} µs")
    if k.bound:
        bits.append(f"{k.bound}-bound")
    if k.dram_throughput_pct is not None:
        bits.append(f"DRAM {k.dram_throughput_pct:.0f}% of peak")
    if k.sm_throughput_pct is not None:
        bits.append(f"SM {k.sm_throughput_pct:.0f}%")
    if k.achieved_occupancy_pct is not None:
        occ = f"occupancy {k.achieved_occupancy_pct:.0f}%"
        if k.theoretical_occupancy_pct is not None:
            occ += f" of {k.theoretical_occupancy_pct:.0f}% theoretical"
        if k.occupancy_limiter:
            occ += f" (limited by {k.occupancy_limiter})"
        bits.append(occ)
    if k.registers is not None:
        bits.append(f"{k.registers} regs/thread")
    if k.grid or k.block:
        bits.append(f"grid {k.grid} block {k.block}")
    return ", ".join(bits)


def static_section(candidate: Candidate) -> str:
    findings = static_analysis(candidate)
    if not findings:
        return ""
    lines = ["Static analysis of your CUDA (Stitch's rules):"]
    for f in findings[:MAX_DIAGNOSTICS]:
        lines.append(f"- {f.path}:{f.range.start.line + 1}: {f.code}: {f.message}")
        source = candidate.cuda_sources.get(f.path, "").splitlines()
        if 0 <= f.range.start.line < len(source):
            lines.append(f"    {f.range.start.line + 1:>4} | {source[f.range.start.line].rstrip()}")
    return "\n".join(lines)


def rubric_section(scores: list[RubricScore]) -> str:
    weak = [s for s in scores if s.score <= 3]
    if not weak:
        return ""
    lines = ["Rubric (1–5):"]
    for s in weak:
        lines.append(f"- {LABELS.get(s.dimension, s.dimension)}: {s.score}/5 — " + "; ".join(s.reasons[:3]))
    return "\n".join(lines)


def next_step(verdict: Verdict, target_speedup: float) -> str:
    status = verdict.status
    if status is VerdictStatus.COMPILE_ERROR:
        return "Next: fix the compile errors above; change nothing else you do not have to."
    if status is VerdictStatus.HACKING:
        return "Next: remove every flagged construct and compute the result in CUDA."
    if status is VerdictStatus.INCORRECT:
        return ("Next: fix correctness first (indexing, bounds and tail handling, reductions, NaN/Inf, "
                "shapes that are not multiples of the block size).")
    if status is VerdictStatus.CORRECT:
        speedup = verdict.timing.speedup_vs_eager
        if speedup is not None and speedup >= target_speedup:
            return "Target reached."
        return ("Next: keep it correct and make it faster: attack the bottleneck the profile names "
                "(see the skills guide), and say what you changed.")
    return "Next: make the candidate run to completion (bounds, launch configuration, memory use)."


def _tail(text: str, lines: int) -> str:
    all_lines = text.rstrip().splitlines()
    return "\n".join(all_lines[-lines:])
