"""Speedups are shown with their noise wherever they appear, and counted only beyond it."""

from __future__ import annotations

from stitch_lsp.benchsuite.results import TaskResult
from stitch_lsp.benchsuite.stats import fast_p
from stitch_lsp.benchsuite.table import render_rows
from stitch_lsp.findings import Position
from stitch_lsp.reports.kernel_card import speed_label, verdict_section
from stitch_lsp.reports.ratios import ratio_text
from stitch_lsp.reports.verdict_hints import verdict_hints
from stitch_lsp.reports.verdict_report import verdict_report
from stitch_lsp.verdict import ClockNotes, Timing, TimingStats, Verdict, VerdictStatus
from stitch_lsp.verify.format import format_verdict


def verdict(**timing) -> Verdict:
    t = Timing(status="measured", eager=TimingStats(0.311), compiled=TimingStats(0.068), candidate=TimingStats(0.173),
               candidate_latency=TimingStats(0.2), eager_latency=TimingStats(0.33), compiled_latency=TimingStats(0.15),
               speedup_vs_eager=1.80, speedup_vs_eager_ci=[1.785, 1.815], speedup_vs_compile=0.41,
               speedup_vs_compile_ci=[0.40, 0.42], latency_vs_eager=1.65, latency_vs_eager_ci=[1.6, 1.7],
               rounds=37, converged=True, launch="queued behind a blocking kernel")
    for k, v in timing.items():
        setattr(t, k, v)
    return Verdict(status=VerdictStatus.CORRECT, summary="correct", timing=t, measured_at="2026-11-28 10:42:05 UTC")


def test_the_issue_s_format_everywhere():
    v = verdict()
    line = "1.80× ±0.02 eager · 0.41× ±0.01 torch.compile"
    assert speed_label(v) == line
    [badge, speed] = verdict_hints("k.cu", Position(0, 0), "k", v)
    assert speed.label == line and "ratios of GPU time" in speed.tooltip and "Call latency" in speed.tooltip
    hover = "\n".join(verdict_section(v))
    assert line in hover and "GPU time" in hover and "call latency" in hover and "mode default" in hover
    text = format_verdict(v)
    assert f"speedup: {line} (GPU time)" in text and "by call latency (host included): 1.65× ±0.05 eager" in text
    assert line in verdict_report("k", v)


def test_an_interval_holding_one_reads_same():
    v = verdict(speedup_vs_compile=1.004, speedup_vs_compile_ci=[0.99, 1.02])
    assert speed_label(v) == "1.80× ±0.02 eager · same as torch.compile (within noise)"
    assert ratio_text(0.995, [0.98, 1.0], "eager") == "same as eager (within noise)"
    assert ratio_text(1.2, None, "eager") == "1.20× eager"  # an older verdict without an interval


def test_the_compile_mode_and_the_clock_notes_are_named():
    v = verdict(compile_mode="max-autotune-no-cudagraphs",
                clocks=ClockNotes(source="NVML", sm_mhz=[1980, 1410], mem_mhz=[3201, 3201], flagged=True,
                                  notes=["SM clock moved during timing: 1410–1980 MHz"]))
    assert speed_label(v).endswith("0.41× ±0.01 torch.compile (max-autotune-no-cudagraphs)")
    text = format_verdict(v)
    assert "mode max-autotune-no-cudagraphs" in text and "SM clock moved" in text
    assert "SM clock moved" in "\n".join(verdict_section(v))


def test_a_cached_verdict_says_so_and_from_when():
    v = verdict()
    v.from_cache = True
    assert "(cached, measured 2026-11-28 10:42:05 UTC)" in format_verdict(v).splitlines()[0]
    assert "(cached, measured 2026-11-28 10:42:05 UTC)" in verdict_section(v)[0]
    [badge, speed] = verdict_hints("k.cu", Position(0, 0), "k", v)
    assert speed.label.endswith("(cached)") and "measured 2026-11-28 10:42:05 UTC" in badge.tooltip
    assert "answered from the cache" in verdict_report("k", v)


def test_fast_p_counts_a_task_only_when_its_interval_lies_above_p():
    def task(name, value, ci):
        return TaskResult(name=name, status="correct", speedup_vs_eager=value, speedup_vs_eager_ci=ci)

    results = [task("clear", 1.6, [1.55, 1.65]), task("noisy", 1.1, [0.95, 1.25]), task("old", 1.1, None)]
    assert fast_p(results, 3, 1.0, "eager") == 2 / 3  # noisy's interval holds 1.0: not faster
    assert fast_p(results, 3, 1.5, "eager") == 1 / 3
    assert fast_p(results, 3, 1.56, "eager") == 0.0  # clear's median is above 1.56 but its interval is not
    rows = render_rows(results, None)
    assert "1.60x ±0.05" in rows and "same as eager (within noise)" in rows
