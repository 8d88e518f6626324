"""A verdict as a Markdown report (``stitch.showReport`` writes it under ``.stitch/reports/``)."""

from __future__ import annotations

import re
import time
from pathlib import Path

from stitch_lsp.reports.fmt import cell, clip, duration_ms, number
from stitch_lsp.reports.kernel_card import accuracy_label, badge, profile_section, speed_label
from stitch_lsp.reports.ratios import compile_name, latency_text, measure_note
from stitch_lsp.verdict import Verdict


def verdict_report(kernel: str, verdict: Verdict, *, source: str = "", reference: str = "") -> str:
    out: list[str] = [f"# `{kernel}` — {badge(verdict)}", ""]
    if verdict.summary:
        out += [verdict.summary, ""]
    out += _facts_table(verdict, source, reference)
    out += _compile_section(verdict)
    out += _correctness_section(verdict)
    out += _timing_section(verdict)
    out += _nsight_section(verdict)
    out += _sanitizer_section(verdict)
    out += _hack_flags_section(verdict)
    out += _rubric_section(verdict)
    if verdict.events:
        out += ["## Worker events", ""] + [f"- {e}" for e in verdict.events] + [""]
    return "\n".join(out).rstrip() + "\n"


def _facts_table(verdict: Verdict, source: str, reference: str) -> list[str]:
    facts = []
    if source:
        facts.append(f"| kernel | `{source}` |")
    if reference:
        facts.append(f"| reference | `{reference}` |")
    d = verdict.device
    if d is not None and d.name:
        facts.append(f"| GPU | {cell(d.name)} (sm {d.compute_capability}, driver {d.driver}, CUDA {d.cuda}, torch {d.torch}) |")
    speed = speed_label(verdict)
    if speed:
        facts.append(f"| speedup | {speed} |")
        facts.append(f"| measured by | {cell(measure_note(verdict.timing))} |")
        latency = latency_text(verdict.timing)
        if latency:
            facts.append(f"| call latency | {latency} |")
    if verdict.measured_at:
        facts.append(f"| measured | {verdict.measured_at}{' (answered from the cache)' if verdict.from_cache else ''} |")
    facts.append(f"| took | {verdict.seconds:.1f} s |")
    if verdict.cache_key:
        facts.append(f"| cache key | `{verdict.cache_key[:16]}` |")
    return ["| | |", "|---|---|", *facts, ""]


def _compile_section(verdict: Verdict) -> list[str]:
    c = verdict.compile
    if c is None:
        return []
    out = ["## Compile", ""]
    out.append(f"{'ok' if c.ok else '**failed**'} · {c.backend or 'compiler'} · {c.seconds:.2f} s" + (" (cached)" if c.cached else ""))
    out.append("")
    for k in c.kernels:
        out.append(f"- `{k.name}`: {k.registers} registers, {k.shared_bytes} B shared, spills {k.spill_stores} B stores / {k.spill_loads} B loads")
    for f in c.diagnostics[:10]:
        out.append(f"- line {f.range.start.line + 1}: {f.severity.name.lower()}: {clip(f.message, 200)}")
    out.append("")
    return out


def _correctness_section(verdict: Verdict) -> list[str]:
    corr = verdict.correctness
    out = ["## Correctness", "", f"{corr.status}" + (f" · {corr.dtype}, atol {corr.atol:g}, rtol {corr.rtol:g}" if corr.dtype else "")]
    if corr.message:
        out += ["", corr.message]
    if corr.trials:
        out += ["", "| check | kind | result | max abs err | max rel err | detail |", "|---|---|---|---:|---:|---|"]
        for t in sorted(corr.trials, key=lambda t: t.passed)[:40]:
            out.append(
                f"| `{t.name}` | {t.kind} | {'✓' if t.passed else '✗'} | {number(t.max_abs_err)} | {number(t.max_rel_err)} | {cell(clip(t.detail, 100))} |"
            )
    out.append("")
    return out


def _timing_section(verdict: Verdict) -> list[str]:
    """GPU times and call latencies, the clocks they ran at, and the checks that share the section
    (accuracy, memory plan, streams)."""
    t = verdict.timing
    out = ["## Timing", "", t.status + (f" · {t.method}" if t.method else "")]
    if t.message:
        out += ["", t.message]
    if t.eager or t.candidate:
        out += ["", "| | GPU time median | p10 | p90 | samples | call latency median |", "|---|---:|---:|---:|---:|---:|"]
        for label, s, lat in (("eager PyTorch", t.eager, t.eager_latency),
                              (compile_name(t.compile_mode), t.compiled, t.compiled_latency),
                              ("this kernel", t.candidate, t.candidate_latency)):
            if s is not None:
                out.append(f"| {label} | {duration_ms(s.median_ms)} | {duration_ms(s.p10_ms)} | {duration_ms(s.p90_ms)} "
                           f"| {s.samples} | {duration_ms(lat.median_ms) if lat else '—'} |")
    if t.clocks is not None and t.clocks.source:
        sm = "–".join(str(v) for v in sorted(set(t.clocks.sm_mhz))) or "?"
        mem = "–".join(str(v) for v in sorted(set(t.clocks.mem_mhz))) or "?"
        out += ["", f"Clocks ({t.clocks.source}): SM {sm} MHz, memory {mem} MHz"
                + ("; " + "; ".join(t.clocks.notes) if t.clocks.notes else "; steady, no other process on the GPU")]
    if not t.host_clock_ok:
        out += ["", "**The host clock disagrees with CUDA events**: work may be hidden on another stream."]
    if t.suspicious:
        out += ["", "Over 10× faster: extra scrutiny ran."]
    return out + _checks_beside_timing(verdict) + [""]


def _checks_beside_timing(verdict: Verdict) -> list[str]:
    out = []
    accuracy = accuracy_label(verdict)
    if accuracy:
        out += ["", accuracy]
    m = verdict.memory
    if m.status != "skipped" or m.peak_bytes is not None:
        peak = f" · peak {m.peak_bytes / (1 << 30):.2f} GiB" if m.peak_bytes is not None else ""
        out += ["", f"Memory plan: {m.status}{peak}" + (f" · {m.message}" if m.message else "")]
    if verdict.streams.status != "skipped":
        out += ["", f"Streams: {verdict.streams.status} · {verdict.streams.message}"]
    return out


def _nsight_section(verdict: Verdict) -> list[str]:
    p = verdict.profile
    out = ["## Nsight Compute", "", p.status + (f": {p.message}" if p.message else "")]
    if p.command:
        out += ["", f"`{p.command}`"]
    for kp in p.kernels:
        out += ["", f"### `{kp.name}` ({kp.role})", ""]
        out += profile_section(kp, verdict.device)
    out.append("")
    return out


def _sanitizer_section(verdict: Verdict) -> list[str]:
    s = verdict.sanitizer
    out = ["## compute-sanitizer", "", s.status + (f": {s.message}" if s.message else "")]
    for f in s.findings[:20]:
        where = f" ({Path(f.file).name}:{f.line + 1})" if f.file and f.line is not None else ""
        out.append(f"- **{f.tool}** {f.kind}{where}: {clip(f.message, 200)}")
    out.append("")
    return out


def _hack_flags_section(verdict: Verdict) -> list[str]:
    if not verdict.hack_flags:
        return []
    out = ["## Anti-hacking flags", ""]
    for h in verdict.hack_flags:
        line = f" (line {h.line + 1})" if h.line is not None else ""
        out.append(f"- `{h.code}`{line}: {h.message}" + (f" — {clip(h.evidence, 120)}" if h.evidence else ""))
    out.append("")
    return out


def _rubric_section(verdict: Verdict) -> list[str]:
    if not verdict.rubric:
        return []
    out = ["## Rubric", "", "| dimension | score | reasons |", "|---|---:|---|"]
    for r in verdict.rubric:
        out.append(f"| {r.dimension} | {r.score} / 5 | {cell('; '.join(r.reasons))} |")
    out.append("")
    return out


def report_path(workspace: Path, kernel: str, when: float | None = None) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(when if when is not None else time.time()))
    safe = re.sub(r"[^\w.-]+", "_", kernel) or "kernel"
    return workspace / ".stitch" / "reports" / f"{safe}-{stamp}.md"
