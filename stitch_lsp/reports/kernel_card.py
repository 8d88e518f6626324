"""The hover card of a kernel: its Nsight Compute analysis, its verdict, what to try next.

Tidy Markdown (short tables, a few bullets), from plain data: a ``KernelProfile``
when one exists, else what is known statically (ptxas figures, rule findings)
and how to get a profile. Reused by the Markdown report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from stitch_lsp.findings import Finding
from stitch_lsp.reports.fmt import bandwidth, cell, clip, duration_ms, duration_us, nbytes, number, pct, sentences, speedup
from stitch_lsp.reports.ratios import cache_note, compile_name, latency_text, measure_note, speed_text
from stitch_lsp.verdict import DeviceInfo, KernelProfile, KernelResources, Verdict, VerdictStatus

PROFILE_COMMAND = "stitch.profileKernel"
VERIFY_COMMAND = "stitch.verifyKernel"

# Below this share of peak on both SM and memory, a kernel is latency-bound (Nsight's own threshold).
LATENCY_THRESHOLD = 60.0


def bound_of(p: KernelProfile) -> str:
    if p.bound:
        return p.bound
    sm, mem = p.sm_throughput_pct, p.memory_throughput_pct
    if sm is None or mem is None:
        return ""
    if max(sm, mem) < LATENCY_THRESHOLD:
        return "latency"
    return "memory" if mem >= sm else "compute"


def _bound_line(p: KernelProfile) -> str:
    bound = bound_of(p)
    sm, mem = pct(p.sm_throughput_pct), pct(p.memory_throughput_pct)
    if bound == "memory":
        return f"**memory-bound** (memory {mem} vs SM {sm} of peak)"
    if bound == "compute":
        return f"**compute-bound** (SM {sm} vs memory {mem} of peak)"
    if bound == "latency":
        return f"**latency-bound**: neither SM ({sm}) nor memory ({mem}) reaches {LATENCY_THRESHOLD:.0f} % of peak"
    return "—"


def _roofline(p: KernelProfile) -> str | None:
    ai, ridge = p.arithmetic_intensity, p.ridge_point
    if ai is None:
        return None
    text = f"{number(ai)} FLOP/B"
    if ridge:
        if ai < ridge:
            text += f" vs ridge {number(ridge)} FLOP/B: memory side, {number(ridge / ai if ai else None, 2)}× below the ridge"
        else:
            text += f" vs ridge {number(ridge)} FLOP/B: compute side, {number(ai / ridge, 2)}× past the ridge"
    return text


def _occupancy(p: KernelProfile) -> str | None:
    if p.achieved_occupancy_pct is None and p.theoretical_occupancy_pct is None:
        return None
    text = f"{pct(p.achieved_occupancy_pct)} achieved of {pct(p.theoretical_occupancy_pct)} theoretical"
    if p.occupancy_limiter:
        text += f" · limited by {p.occupancy_limiter}"
    return text


def _registers(p: KernelProfile) -> str | None:
    if p.registers is None and p.spill_bytes is None:
        return None
    parts = []
    if p.registers is not None:
        parts.append(f"{p.registers} / thread")
    if p.spill_bytes:
        parts.append(f"**{nbytes(p.spill_bytes)} spilled**")
    elif p.spill_bytes == 0:
        parts.append("no spills")
    if p.shared_bytes:
        parts.append(f"{nbytes(p.shared_bytes)} shared / block")
    return " · ".join(parts)


def advice(p: KernelProfile) -> list[str]:
    """What to try next, most promising first (short, concrete)."""
    tips: list[str] = []
    bound = bound_of(p)
    dram = p.dram_throughput_pct or 0.0
    if p.spill_bytes:
        tips.append("Registers spill to local memory: cut live values per thread, or loosen a tight `__launch_bounds__`.")
    limiter = p.occupancy_limiter.lower()
    theo = p.theoretical_occupancy_pct
    if theo is not None and theo < 50 and "register" in limiter:
        tips.append(f"Occupancy is capped by registers ({p.registers or '?'} / thread): `__launch_bounds__(threads, minBlocks)` or fewer live values.")
    elif theo is not None and theo < 50 and "shared" in limiter:
        tips.append("Occupancy is capped by shared memory: smaller tiles, or fewer bytes staged per block.")
    elif theo is not None and theo < 50 and ("block" in limiter or "warp" in limiter):
        tips.append("Occupancy is capped by the block size: launch larger blocks (≥ 128 threads).")
    if p.achieved_occupancy_pct is not None and theo is not None and theo - p.achieved_occupancy_pct > 20:
        tips.append("Achieved occupancy is far below theoretical: too few blocks for the SMs, or a long tail; check the grid size.")
    if bound == "memory" and dram >= 80:
        tips.append("At the DRAM roof: it gets faster only by moving fewer bytes — fuse neighbouring ops into this pass, use narrower types.")
    elif bound == "memory":
        tips.append("Memory-bound below the DRAM roof: coalesce accesses, use vectorised loads (`float4`), reuse data through shared memory.")
    elif bound == "compute":
        tips.append("Compute-bound: tensor cores (`mma` / `wmma`) for matmul-like work, fewer instructions per element, no accidental FP64.")
    elif bound == "latency":
        tips.append("Latency-bound: more work in flight — more blocks per SM, several independent loads per thread, fewer `__syncthreads()`.")
    best = max((r for r in p.rules if r.estimated_speedup_pct), key=lambda r: r.estimated_speedup_pct or 0, default=None)
    if best is not None:
        tips.append(f"Nsight's biggest estimated gain: *{best.name}* (up to {best.estimated_speedup_pct:.0f} %).")
    return tips[:4]


def profile_section(p: KernelProfile, device: DeviceInfo | None = None) -> list[str]:
    lines: list[str] = []
    where = []
    if device is not None and device.name:
        where.append(device.name)
    if p.grid or p.block:
        where.append(f"grid {p.grid or '?'} × block {p.block or '?'}")
    where.append(f"**{duration_us(p.duration_us)}**")
    lines.append(" · ".join(where))
    lines.append("")
    lines.append("| % of peak | |")
    lines.append("|---|---:|")
    lines.append(f"| SM throughput | {pct(p.sm_throughput_pct)} |")
    lines.append(f"| Memory throughput | {pct(p.memory_throughput_pct)} |")
    dram = pct(p.dram_throughput_pct)
    if p.dram_bandwidth_gbs is not None:
        dram += f" · {bandwidth(p.dram_bandwidth_gbs)}"
    lines.append(f"| DRAM throughput | {dram} |")
    lines.append("")
    rows = [("Bound", _bound_line(p)), ("Occupancy", _occupancy(p)), ("Registers", _registers(p)), ("Roofline", _roofline(p))]
    rows = [(k, v) for k, v in rows if v]
    if rows:
        lines.append("| | |")
        lines.append("|---|---|")
        lines.extend(f"| {k} | {cell(v)} |" for k, v in rows)
        lines.append("")
    rules = sorted(p.rules, key=lambda r: -(r.estimated_speedup_pct or 0))
    shown = [r for r in rules if r.rule_type in ("OPT", "WRN") or r.estimated_speedup_pct][:3]
    if shown:
        lines.append("**Nsight guidance**")
        for r in shown:
            gain = f" *(est. +{r.estimated_speedup_pct:.0f} %)*" if r.estimated_speedup_pct else ""
            lines.append(f"- **{r.name}**{gain}: {sentences(r.message, 300)}")
        lines.append("")
    tips = advice(p)
    if tips:
        lines.append("**Try next**")
        lines.extend(f"- {t}" for t in tips)
        lines.append("")
    return lines


def badge(verdict: Verdict) -> str:
    """One short correctness label."""
    s = verdict.status
    trials = verdict.correctness.trials
    if s is VerdictStatus.CORRECT:
        return f"✓ correct ({len(trials)}/{len(trials)} checks)" if trials else "✓ correct"
    if s is VerdictStatus.INCORRECT:
        failed = len(verdict.correctness.failed_trials)
        return f"✗ {failed}/{len(trials)} checks failed" if trials else "✗ incorrect"
    if s is VerdictStatus.HACKING:
        codes = ", ".join(f.code for f in verdict.hack_flags[:2])
        return f"⚠ rejected ({codes})" if codes else "⚠ rejected"
    return {
        VerdictStatus.COMPILE_ERROR: "✗ compile error",
        VerdictStatus.UNVERIFIABLE: "? unverifiable",
        VerdictStatus.CRASHED: "✗ crashed",
        VerdictStatus.TIMEOUT: "⏱ timed out",
        VerdictStatus.OUT_OF_MEMORY: "✗ out of memory",
        VerdictStatus.TOO_LARGE: "✗ too large for this GPU",
        VerdictStatus.NO_GPU: "no GPU",
        VerdictStatus.BAD_INPUT: "✗ bad input",
        VerdictStatus.CANCELLED: "cancelled",
        VerdictStatus.ERROR: "✗ error",
    }.get(s, s.value)


def speed_label(verdict: Verdict) -> str | None:
    """"1.80× ±0.02 eager · 0.41× ±0.01 torch.compile" (GPU time; see ``reports.ratios``)."""
    return speed_text(verdict.timing)


def accuracy_label(verdict: Verdict) -> str | None:
    """Error against a float64 run of the reference, beside the speed: the ratio to eager's."""
    a = verdict.accuracy
    if a.status != "measured" or a.ratio is None:
        return None
    mark = "⚠ " if a.less_accurate else ""
    return (f"{mark}**Accuracy** {a.ratio:.2f}× eager's error against float64 "
            f"(max abs err {number(a.candidate_max_abs_err)} vs {number(a.eager_max_abs_err)})")


def peak_label(p: KernelProfile) -> str | None:
    """"% of peak" of whatever bounds the kernel (DRAM for memory-bound, SM otherwise)."""
    bound = bound_of(p)
    if bound == "memory" and p.dram_throughput_pct is not None:
        return f"DRAM {p.dram_throughput_pct:.0f} % of peak"
    if p.sm_throughput_pct is not None and bound in ("compute", "latency"):
        if bound == "latency" and p.dram_throughput_pct is not None and p.dram_throughput_pct > p.sm_throughput_pct:
            return f"DRAM {p.dram_throughput_pct:.0f} % of peak"
        return f"SM {p.sm_throughput_pct:.0f} % of peak"
    if p.dram_throughput_pct is not None:
        return f"DRAM {p.dram_throughput_pct:.0f} % of peak"
    return None


def verdict_section(verdict: Verdict) -> list[str]:
    lines = [f"**Verdict** {badge(verdict)}" + (f" · {speed_label(verdict)}" if speed_label(verdict) else "")
             + (f" {cache_note(verdict)}" if cache_note(verdict) else "")]
    if verdict.summary:
        lines.append(f"{clip(verdict.summary, 240)}")
    t = verdict.timing
    if t.status == "measured" and (t.eager or t.candidate):
        lines.append("")
        lines.append(f"*{measure_note(t)}*")
        latency = latency_text(t)
        if latency:
            lines.append(f"Call latency (host included): {latency}")
        lines.append("")
        lines.append("| timed | GPU time | p10 – p90 | call latency |")
        lines.append("|---|---:|---:|---:|")
        for label, stats, lat in (("eager PyTorch", t.eager, t.eager_latency),
                                  (compile_name(t.compile_mode), t.compiled, t.compiled_latency),
                                  ("this kernel", t.candidate, t.candidate_latency)):
            if stats is not None:
                lines.append(f"| {label} | {duration_ms(stats.median_ms)} | {duration_ms(stats.p10_ms)} – "
                             f"{duration_ms(stats.p90_ms)} | {duration_ms(lat.median_ms) if lat else '—'} |")
    accuracy = accuracy_label(verdict)
    if accuracy:
        lines.append("")
        lines.append(accuracy)
    failed = verdict.correctness.failed_trials
    if failed:
        lines.append("")
        for trial in failed[:3]:
            err = f" max abs err {number(trial.max_abs_err)}" if trial.max_abs_err is not None else ""
            lines.append(f"- ✗ `{trial.name}`{err}{': ' + clip(trial.detail, 120) if trial.detail else ''}")
    lines.append("")
    return lines


def candidate_profile(verdict: Verdict | None, kernel: str) -> KernelProfile | None:
    """The profiled launch of ``kernel`` in a verdict (the candidate's, not the reference's)."""
    if verdict is None or verdict.profile.status != "profiled":
        return None
    kernels = [k for k in verdict.profile.kernels if k.role == "candidate"]
    named = [k for k in kernels if k.name == kernel or k.name.split("(")[0].split("<")[0].endswith(kernel)]
    return (named or kernels or [None])[0]


def kernel_card(
    kernel: str,
    *,
    verdict: Verdict | None = None,
    resources: KernelResources | None = None,
    findings: Sequence[Finding] = (),
    paired: bool = True,
    pairing_problem: str = "",
    trusted: bool = True,
    running: str = "",
    cu_path: str = "",
) -> str:
    """The hover card for ``kernel`` (Markdown)."""
    profile = candidate_profile(verdict, kernel)
    title = f"#### `{kernel}`" + (" · Nsight Compute" if profile else "")
    lines = [title, ""]
    if running:
        lines += [f"*{running}*", ""]
    if verdict is not None and verdict.status is not VerdictStatus.CANCELLED:
        lines += verdict_section(verdict)
    if profile is not None:
        lines += profile_section(profile, verdict.device if verdict else None)
    if profile is None:
        lines += static_section(resources, findings)
        lines += _how_to_get_more(kernel, verdict, paired, pairing_problem, trusted, cu_path)
    return "\n".join(lines).rstrip() + "\n"


def static_section(resources: KernelResources | None, findings: Sequence[Finding]) -> list[str]:
    lines: list[str] = []
    if resources is not None:
        lines.append("| ptxas | |")
        lines.append("|---|---:|")
        lines.append(f"| Registers | {resources.registers} / thread |")
        lines.append(f"| Shared memory | {nbytes(resources.shared_bytes)} static |")
        spills = resources.spill_stores + resources.spill_loads
        lines.append(f"| Spills | {'**' + nbytes(resources.spill_stores) + ' stores, ' + nbytes(resources.spill_loads) + ' loads**' if spills else 'none'} |")
        if resources.stack_bytes:
            lines.append(f"| Stack | {nbytes(resources.stack_bytes)} |")
        lines.append("")
    if findings:
        lines.append("**Rule findings**")
        for f in list(findings)[:5]:
            lines.append(f"- `{f.code}` line {f.range.start.line + 1}: {sentences(f.message, 300)}")
        if len(findings) > 5:
            lines.append(f"- … and {len(findings) - 5} more")
        lines.append("")
    return lines


def _how_to_get_more(kernel: str, verdict: Verdict | None, paired: bool, problem: str, trusted: bool,
                     cu_path: str = "") -> list[str]:
    if not paired:
        return [
            "*Not profiled.* To verify and profile it, pair it with a reference above the kernel:",
            "",
            "```cuda",
            "// stitch: reference=path/to/ref.py",
            "```",
        ]
    if problem:
        return [f"*Not verified:* {problem}"]
    if not trusted:
        return ["*Not profiled:* this workspace is not trusted, so Stitch runs nothing (no reference imports, no kernel launches)."]
    prof = verdict.profile if verdict is not None else None
    if prof is None or (prof.status == "skipped" and not prof.message):
        where = "Not profiled yet."
    elif prof.status == "skipped":
        where = f"Not profiled: {prof.message}."
    else:
        where = f"No profile: {prof.message or prof.status}."
    target = f"{Path(cu_path).name}:{kernel}" if cu_path else f"FILE.cu:{kernel}"
    return [
        f"*{where}* Run **Stitch: Profile Kernel** with the cursor on `{kernel}` "
        f"(command `{PROFILE_COMMAND}`), set `stitch.onSave.profile` to profile on every save, "
        f"or in a terminal `stitch verify-kernel {target} --profile`. Needs a GPU and Nsight Compute (`ncu`)."
    ]
