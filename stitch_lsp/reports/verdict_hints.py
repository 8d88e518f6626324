"""Inlay hints for a kernel's verdict: correctness badge, speedups, % of peak; and status hints
(running, not trusted, pairing broken) that say why there is no verdict."""

from __future__ import annotations

from stitch_lsp.findings import Hint, Position
from stitch_lsp.reports.kernel_card import badge, candidate_profile, peak_label, speed_label
from stitch_lsp.reports.ratios import cache_note, latency_text, measure_note
from stitch_lsp.verdict import Verdict, VerdictStatus


def verdict_hints(path: str, position: Position, kernel: str, verdict: Verdict, *, cached: bool = False) -> list[Hint]:
    if verdict.status is VerdictStatus.CANCELLED:
        return []
    tooltip = verdict.summary or badge(verdict)
    when = cache_note(verdict, cached)
    if when:
        tooltip += f"\n\n*{when}: from the result cache (same kernel, reference, GPU and toolchain)*"
    hints = [Hint(path=path, position=position, label=badge(verdict), tooltip=tooltip, kind="verdict")]
    speed = speed_label(verdict)
    if speed and verdict.status in (VerdictStatus.CORRECT, VerdictStatus.HACKING):
        t = verdict.timing
        lines = [f"Median speedup, {measure_note(t)}."]
        latency = latency_text(t)
        if latency:
            lines.append(f"Call latency (host included): {latency}.")
        if t.method:
            lines.append(t.method)
        if when:
            lines.append(when)
        hints.append(Hint(path=path, position=position, label=speed + (" (cached)" if when else ""),
                          tooltip="\n\n".join(lines), kind="verdict"))
    profile = candidate_profile(verdict, kernel)
    if profile is not None:
        label = peak_label(profile)
        if label:
            hints.append(Hint(path=path, position=position, label=label, tooltip="Nsight Compute: hover the kernel's name for the full analysis.", kind="profile"))
    return hints


def status_hint(path: str, position: Position, label: str, tooltip: str) -> Hint:
    return Hint(path=path, position=position, label=label, tooltip=tooltip, kind="status")


def floor_hint(path: str, position: Position, floor_us: float, verdict: Verdict) -> Hint | None:
    """Predicted (the plan's floor) against measured (the candidate's median)."""
    t = verdict.timing
    if not floor_us or t is None or t.candidate is None or not t.candidate.median_ms:
        return None
    measured = t.candidate.median_ms * 1000.0
    return Hint(path=path, position=position, label=f"floor {floor_us:.0f} µs · {floor_us / measured:.0%}",
                tooltip=(f"Predicted floor {floor_us:.1f} µs, measured {measured:.1f} µs ({floor_us / measured:.0%} of "
                         "the floor's speed). The floor: every byte once at the measured copy bandwidth, every "
                         "GEMM FLOP at its unit's peak (tensor cores: 3xTF32 at a third of the TF32 rate)."),
                kind="verdict")


def generated_module_hints(path: str, text: str, func_name: str, verdict: Verdict,
                           floor_us: float | None = None) -> list[Hint]:
    """The verdict on the fused function a Stitch edit writes into the workspace.

    The kernels' CUDA sits inside the module's data, so the hints go at the end of the
    ``def`` line the user's code calls; the profile figures are the module's busiest kernel's.
    ``floor_us``: the plan's predicted floor, shown against the measured time.
    """
    prefix = f"def {func_name}("
    for number, line in enumerate(text.splitlines()):
        if line.startswith(prefix):
            profiles = [k for k in verdict.profile.kernels if k.role == "candidate"]
            kernel = max(profiles, key=lambda k: k.duration_us or 0.0).name if profiles else ""
            hints = verdict_hints(path, Position(number, len(line)), kernel, verdict)
            floor = floor_hint(path, Position(number, len(line)), floor_us or 0.0, verdict)
            return hints + ([floor] if floor is not None and verdict.status is VerdictStatus.CORRECT else [])
    return []
