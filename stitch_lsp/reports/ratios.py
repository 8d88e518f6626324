"""Speedups with their noise, as every surface shows them.

"1.80× ±0.02 eager · 0.41× ±0.01 torch.compile"; a ratio whose 95 % interval holds
1.0 reads "same as torch.compile (within noise)". Which measure the ratios use
(GPU time or call latency), the compile mode, and whether the figure came from a
cache are said by ``measure_note`` and ``cache_note``.
"""

from __future__ import annotations

from typing import Sequence

from stitch_lsp.reports.fmt import speedup
from stitch_lsp.verdict import CALL_LATENCY, GPU_TIME, Timing, Verdict

MEASURE_WORDS = {GPU_TIME: "GPU time", CALL_LATENCY: "call latency"}


def compile_name(mode: str) -> str:
    return "torch.compile" if not mode or mode == "default" else f"torch.compile ({mode})"


def within_noise(ci: Sequence[float] | None) -> bool:
    return bool(ci) and len(ci) == 2 and ci[0] <= 1.0 <= ci[1]


def ratio_text(value: float | None, ci: Sequence[float] | None, baseline: str) -> str | None:
    if value is None:
        return None
    if within_noise(ci):
        return f"same as {baseline} (within noise)"
    if not ci or len(ci) != 2:
        return f"{speedup(value)} {baseline}"
    half = max(ci[1] - value, value - ci[0], 0.0)
    noise = f"±{half:.2f}" if half >= 0.005 else "±<0.01"
    return f"{speedup(value)} {noise} {baseline}"


def speed_text(t: Timing) -> str | None:
    """The headline ratios (GPU time) of a timing, each with its interval."""
    parts = [ratio_text(t.speedup_vs_eager, t.speedup_vs_eager_ci, "eager"),
             ratio_text(t.speedup_vs_compile, t.speedup_vs_compile_ci, compile_name(t.compile_mode))]
    parts = [p for p in parts if p]
    return " · ".join(parts) if parts else None


def latency_text(t: Timing) -> str | None:
    """The same ratios by call latency (host cost included), for the detail views."""
    parts = [ratio_text(t.latency_vs_eager, t.latency_vs_eager_ci, "eager"),
             ratio_text(t.latency_vs_compile, t.latency_vs_compile_ci, compile_name(t.compile_mode))]
    parts = [p for p in parts if p]
    return " · ".join(parts) if parts else None


def measure_note(t: Timing) -> str:
    """Which measure the headline uses, how it converged, and the clock notes: one line."""
    words = MEASURE_WORDS.get(t.measure, t.measure)
    rounds = f"95 % intervals over {t.rounds} rounds"
    if t.rounds and not t.converged:
        rounds += f", not within ±{100 * t.ci_target:g} % by the time cap"
    parts = [f"ratios of {words}" + (f" ({t.launch})" if t.launch else ""), rounds,
             f"torch.compile mode {t.compile_mode or 'default'}"]
    if t.clocks is not None and t.clocks.flagged:
        parts.append("⚠ " + "; ".join(t.clocks.notes))
    return "; ".join(parts)


def cache_note(verdict: Verdict, cached: bool = False) -> str:
    """"(cached, measured 2026-11-28 10:42:05 UTC)" for a verdict answered from a cache, else ""."""
    if not (cached or verdict.from_cache):
        return ""
    return f"(cached, measured {verdict.measured_at})" if verdict.measured_at else "(cached)"
