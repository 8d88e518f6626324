"""The verdict shows on the fused function a Stitch edit writes into the workspace."""

from __future__ import annotations

from stitch_lsp.findings import Position
from stitch_lsp.reports.verdict_hints import generated_module_hints
from stitch_lsp.verdict import (Correctness, KernelProfile, Profile, Timing, TimingStats, Trial, Verdict,
                                VerdictStatus)

MODULE = '''"""Fused by Stitch from model.py."""
import json

import torch
from ._stitch_loader import load_kernel

_BAKED = json.loads("{}")

def fused_block_1a2b3c4d(*tensors):
    return _run(_program_for(tensors), tensors)
'''


def verdict() -> Verdict:
    return Verdict(
        status=VerdictStatus.CORRECT,
        summary="correct",
        correctness=Correctness(status="passed", trials=[Trial(name=f"seed-{i}", passed=True) for i in range(5)]),
        timing=Timing(status="measured", eager=TimingStats(median_ms=0.30), compiled=TimingStats(median_ms=0.20),
                      candidate=TimingStats(median_ms=0.10), speedup_vs_eager=3.0, speedup_vs_compile=2.0),
        profile=Profile(status="profiled", kernels=[
            KernelProfile(name="stitch_fused_0", duration_us=80.0, dram_throughput_pct=91.0, bound="memory")]),
    )


def test_hints_sit_at_the_end_of_the_fused_function_definition():
    hints = generated_module_hints("/ws/stitch_kernels/f.py", MODULE, "fused_block_1a2b3c4d", verdict())
    line = MODULE.splitlines().index("def fused_block_1a2b3c4d(*tensors):")
    assert hints and {h.position for h in hints} == {Position(line, len("def fused_block_1a2b3c4d(*tensors):"))}
    labels = " ".join(h.label for h in hints)
    assert "3.00" in labels or "3.0" in labels, labels
    assert "2.00" in labels or "2.0" in labels, labels


def test_no_definition_no_hints():
    assert generated_module_hints("/ws/f.py", MODULE, "some_other_function", verdict()) == []


def test_the_plans_floor_shows_against_the_measured_time():
    hints = generated_module_hints("/ws/f.py", MODULE, "fused_block_1a2b3c4d", verdict(), floor_us=60.0)
    (floor,) = [h for h in hints if h.label.startswith("floor")]
    assert floor.label == "floor 60 µs · 60%"  # 60 µs predicted, 100 µs measured
    assert "Predicted floor 60.0 µs, measured 100.0 µs" in floor.tooltip
    assert not [h for h in generated_module_hints("/ws/f.py", MODULE, "fused_block_1a2b3c4d", verdict())
                if h.label.startswith("floor")]
