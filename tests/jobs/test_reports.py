"""Hover cards, verdict hints and Markdown reports show the figures a user needs.

The profile figures are the ones Nsight Compute printed for `fused_gelu_scale` on
the H100 (tests/fixtures/h100/ncu_text.txt)."""

from __future__ import annotations

from stitch_lsp.findings import Finding, Position, Range, Severity
from stitch_lsp.reports.kernel_card import advice, bound_of, kernel_card, peak_label
from stitch_lsp.reports.verdict_hints import verdict_hints
from stitch_lsp.reports.verdict_report import report_path, verdict_report
from stitch_lsp.verdict import (
    Correctness,
    DeviceInfo,
    HackFlag,
    KernelProfile,
    KernelResources,
    NcuRule,
    Profile,
    Timing,
    TimingStats,
    Trial,
    Verdict,
    VerdictStatus,
)

H100 = DeviceInfo(name="NVIDIA H100 80GB HBM3", compute_capability="9.0", sm_count=132, driver="580.159.04", cuda="13.0", torch="2.11.0+cu130")


def fused_gelu_profile() -> KernelProfile:
    return KernelProfile(
        name="fused_gelu_scale",
        duration_us=63.65,
        sm_throughput_pct=53.10,
        memory_throughput_pct=55.49,
        dram_throughput_pct=55.49,
        dram_bandwidth_gbs=1864.0,
        achieved_occupancy_pct=74.59,
        theoretical_occupancy_pct=100.0,
        occupancy_limiter="warps",
        registers=16,
        spill_bytes=0,
        grid="(65536, 1, 1)",
        block="(256, 1, 1)",
        arithmetic_intensity=1.2,
        ridge_point=20.0,
        rules=[
            NcuRule("AchievedOccupancy", "The difference between calculated theoretical (100.0%) and measured achieved occupancy (74.6%) can be the result of warp scheduling overheads.", "OPT", 25.41),
            NcuRule("SOLBottleneck", "This workload exhibits low compute throughput and memory bandwidth utilization relative to the peak performance of this device.", "OPT", None),
            NcuRule("FP32/64 Ratio", "The ratio of peak float (FP32) to double (FP64) performance on this device is 2:1.", "INF", None),
        ],
    )


def verdict(status=VerdictStatus.CORRECT, profile=True) -> Verdict:
    trials = [Trial(f"seed-{i}", True) for i in range(5)] + [Trial("adversarial-nan", True, kind="adversarial")]
    if status is VerdictStatus.INCORRECT:
        trials.append(Trial("odd-shape", False, kind="shape", max_abs_err=0.75, detail="1023x1001: 512 elements differ"))
    return Verdict(
        status=status,
        summary="correct on 6 checks; 2.31x over eager, 1.05x over torch.compile",
        device=H100,
        correctness=Correctness(status="passed" if status is VerdictStatus.CORRECT else "failed", trials=trials, dtype="float32", atol=1e-5, rtol=1e-5),
        timing=Timing(
            status="measured",
            eager=TimingStats(median_ms=0.147, p10_ms=0.145, p90_ms=0.150, samples=100),
            compiled=TimingStats(median_ms=0.0668, p10_ms=0.066, p90_ms=0.068, samples=100),
            candidate=TimingStats(median_ms=0.0636, p10_ms=0.063, p90_ms=0.064, samples=100),
            speedup_vs_eager=2.31,
            speedup_vs_compile=1.05,
            method="CUDA events, L2 flushed, interleaved",
        ),
        profile=Profile(status="profiled", kernels=[fused_gelu_profile()]) if profile else Profile(),
        seconds=12.5,
        cache_key="ab" * 32,
    )


def test_card_with_profile_has_the_nsight_figures_and_advice():
    md = kernel_card("fused_gelu_scale", verdict=verdict())
    assert "Nsight Compute" in md.splitlines()[0]
    for text in ("63.6 µs", "53.1 %", "55.5 %", "1.86 TB/s", "**latency-bound**", "74.6 % achieved of 100.0 % theoretical",
                 "limited by warps", "16 / thread", "no spills", "1.2 FLOP/B vs ridge 20 FLOP/B: memory side",
                 "AchievedOccupancy", "est. +25 %", "Try next", "2.31× eager", "1.05× torch.compile", "NVIDIA H100 80GB HBM3"):
        assert text in md, text
    # Informational rules are not "guidance"; guidance is sorted by estimated gain.
    assert "FP32/64" not in md
    assert md.index("AchievedOccupancy") < md.index("SOLBottleneck")
    # A card, not a wall of text.
    assert len(md.splitlines()) < 45


def test_advice_follows_the_bottleneck():
    p = fused_gelu_profile()
    assert bound_of(p) == "latency"
    tips = advice(p)
    assert any("Latency-bound" in t for t in tips)
    assert any("Achieved occupancy is far below" in t for t in tips)
    mem = KernelProfile(name="k", sm_throughput_pct=20, memory_throughput_pct=92, dram_throughput_pct=90, spill_bytes=64,
                        theoretical_occupancy_pct=37.5, occupancy_limiter="registers", registers=128)
    tips = advice(mem)
    assert tips[0].startswith("Registers spill")
    assert any("capped by registers (128" in t for t in tips)
    assert any("DRAM roof" in t for t in tips)
    assert peak_label(mem) == "DRAM 90 % of peak"
    comp = KernelProfile(name="k", sm_throughput_pct=85, memory_throughput_pct=30, dram_throughput_pct=10)
    assert bound_of(comp) == "compute" and peak_label(comp) == "SM 85 % of peak"


def test_card_before_a_profile_shows_ptxas_figures_rules_and_how_to_profile():
    res = KernelResources(name="softmax_kernel", registers=40, shared_bytes=1024, spill_stores=8, spill_loads=8)
    rule = Finding("a.cu", Range.of(11, 4, 11, 20), Severity.WARNING, "STX003", "uncoalesced global access: threadIdx.x strides rows")
    md = kernel_card("softmax_kernel", resources=res, findings=[rule])
    for text in ("40 / thread", "1.02 KB static", "8 B stores", "`STX003` line 12", "Not profiled yet", "stitch.profileKernel"):
        assert text in md, text
    unpaired = kernel_card("softmax_kernel", paired=False)
    assert "// stitch: reference=path/to/ref.py" in unpaired
    untrusted = kernel_card("softmax_kernel", trusted=False)
    assert "not trusted" in untrusted


def test_verdict_hints_badge_speed_and_peak():
    pos = Position(3, 80)
    labels = [h.label for h in verdict_hints("a.cu", pos, "fused_gelu_scale", verdict())]
    assert labels == ["✓ correct (6/6 checks)", "2.31× eager · 1.05× torch.compile", "DRAM 55 % of peak"]
    bad = verdict_hints("a.cu", pos, "fused_gelu_scale", verdict(VerdictStatus.INCORRECT, profile=False))
    assert [h.label for h in bad] == ["✗ 1/7 checks failed"]  # a wrong kernel's speed is not a win
    hack = verdict(VerdictStatus.HACKING, profile=False)
    hack.hack_flags = [HackFlag("HACK003", "side stream")]
    assert verdict_hints("a.cu", pos, "k", hack)[0].label == "⚠ rejected (HACK003)"
    assert verdict_hints("a.cu", pos, "k", verdict(VerdictStatus.CANCELLED)) == []


def test_report_has_every_section(tmp_path):
    v = verdict(VerdictStatus.INCORRECT)
    md = verdict_report("fused_gelu_scale", v, source="kernels/gelu.cu", reference="ref/gelu.py")
    for text in ("# `fused_gelu_scale` — ✗ 1/7 checks failed", "## Correctness", "`odd-shape`", "512 elements differ",
                 "## Timing", "147 µs", "## Nsight Compute", "## compute-sanitizer", "NVIDIA H100 80GB HBM3"):
        assert text in md, text
    # Failing checks come first in the table.
    assert md.index("`odd-shape`") < md.index("`seed-0`")
    path = report_path(tmp_path, "ns::fused<gelu>", when=0)
    assert path.parent == tmp_path / ".stitch" / "reports" and path.name.startswith("ns_fused_gelu_-")


def test_card_from_real_nsight_output_of_the_h100():
    """The Verifier's parse of a real ncu run (tests/fixtures/h100/ncu_details.csv) renders as a card."""
    from pathlib import Path

    from stitch_lsp.verify.ncu_report import parse_details_csv

    csv = Path(__file__).resolve().parents[1] / "fixtures" / "h100" / "ncu_details.csv"
    [profile] = parse_details_csv(csv.read_text())
    v = Verdict(status=VerdictStatus.CORRECT, summary="correct", device=H100, profile=Profile(status="profiled", kernels=[profile]))
    md = kernel_card("fused_gelu_scale", verdict=v)
    for text in ("64.1 µs", "52.8 %", "1.85 TB/s", "latency-bound", "73.9 % achieved of 100.0 % theoretical",
                 "3.14 FLOP/B vs ridge 16 FLOP/B", "AchievedOccupancy", "est. +26 %"):
        assert text in md, text
    assert [h.label for h in verdict_hints("a.cu", Position(0, 0), "fused_gelu_scale", v)][-1] == "DRAM 55 % of peak"
