"""From a verdict to the row a user reads, and the rendered table."""

from __future__ import annotations

import math

from stitch_lsp.benchsuite.outcome import to_result
from stitch_lsp.benchsuite.results import BenchReport, GpuInfo, RunInfo, TaskResult
from stitch_lsp.benchsuite.stats import summarise
from stitch_lsp.benchsuite.table import render, render_rows
from stitch_lsp.benchsuite.tasks import BenchTask
from stitch_lsp.findings import Finding, Position, Range, Severity
from stitch_lsp.pipeline import Candidate, FusionGroup, Plan
from stitch_lsp.verdict import (
    CompileResult, Correctness, HackFlag, KernelProfile, Profile, Timing, TimingStats, Trial, Verdict, VerdictStatus,
)

TASK = BenchTask(name="norm_rmsnorm_fp32", path="x.py", level=1, tags=["norm", "fp32", "memory-bound"],
                 dtype="float32", min_bytes=268_000_000, expected_bound="memory")
CAND = Candidate(module_source="class ModelNew: pass", coder="template", cuda_sources={"k.cu": "__global__ void k() {}"})
CAND_WITH_KERNEL = CAND


def timed_verdict(**kw) -> Verdict:
    return Verdict(
        status=kw.pop("status", VerdictStatus.CORRECT), summary=kw.pop("summary", "correct, 2.0x eager"),
        compile=CompileResult(ok=True, backend="nvrtc"),
        timing=Timing(status="measured", eager=TimingStats(median_ms=0.2), compiled=TimingStats(median_ms=0.12),
                      candidate=TimingStats(median_ms=0.1), speedup_vs_eager=2.0, speedup_vs_compile=1.2),
        **kw,
    )


def test_correct_verdict_with_profile():
    verdict = timed_verdict(profile=Profile(status="profiled", kernels=[
        KernelProfile(name="small", duration_us=3.0, bound="compute", sm_throughput_pct=20.0),
        KernelProfile(name="rmsnorm_kernel", duration_us=95.0, bound="memory", dram_throughput_pct=91.5),
        KernelProfile(name="ref", role="reference", duration_us=500.0, bound="memory", dram_throughput_pct=50.0),
    ]))
    result = to_result(TASK, coder="template", plan=None, candidate=CAND, verdict=verdict)
    assert result.correct and result.compiled
    assert result.speedup_vs_eager == 2.0 and result.speedup_vs_compile == 1.2
    assert result.bound == "memory" and result.bound_source == "profile"
    assert result.pct_of_peak == 91.5  # the longest candidate kernel, not the reference's
    assert result.kernels == 2
    assert math.isclose(result.achieved_gbs, 268_000_000 / 0.1e-3 / 1e9)


def test_failures_say_why():
    incorrect = timed_verdict(status=VerdictStatus.INCORRECT, correctness=Correctness(status="failed", trials=[
        Trial(name="seed-1", passed=True),
        Trial(name="odd-shape", passed=False, max_abs_err=0.75, detail="rows not a multiple of 256"),
        Trial(name="adversarial-nan", passed=False)]))
    result = to_result(TASK, coder="template", plan=None, candidate=CAND, verdict=incorrect)
    assert result.status == "incorrect"
    assert "odd-shape" in result.reason and "0.75" in result.reason and "+1 more" in result.reason

    diag = Finding(path="k.cu", range=Range(Position(3, 0), Position(3, 4)), severity=Severity.ERROR,
                   code="nvcc", message="identifier \"blockDim\" is undefined")
    broken = Verdict(status=VerdictStatus.COMPILE_ERROR, summary="compile error",
                     compile=CompileResult(ok=False, diagnostics=[diag]))
    result = to_result(TASK, coder="template", plan=None, candidate=CAND, verdict=broken)
    assert result.status == "compile_error" and result.compiled is False
    assert "blockDim" in result.reason

    flagged = timed_verdict(status=VerdictStatus.HACKING, hack_flags=[HackFlag(code="HACK003", message="side stream")])
    result = to_result(TASK, coder="template", plan=None, candidate=CAND, verdict=flagged)
    assert not result.correct and "HACK003" in result.reason and result.hack_flags == ["HACK003"]


def test_without_a_verdict_the_status_says_which_stage_stopped():
    plan = Plan(task_key="k", groups=[FusionGroup(ops=["aten.mm"], bytes_moved=1000), FusionGroup(ops=["x"], bytes_moved=24)])
    task = BenchTask(name="red_sum_middle_dim_fp32", path="x.py", expected_bound="memory")
    nothing = Candidate(module_source="", coder="template", uncovered_ops=["aten.sum.dim_IntList (middle dimension)"])
    result = to_result(task, coder="template", plan=plan, candidate=nothing, verdict=None,
                       message="Nothing to fuse: aten.sum.dim_IntList (reductions over a middle dimension are not lowered yet)")
    assert result.status == "not_covered" and "middle dimension" in result.reason
    assert result.min_bytes == 1024 and result.bound == "memory" and result.bound_source == "task"
    result = to_result(task, coder="llm", plan=plan, candidate=None, verdict=None, message="no API key: set ANTHROPIC_API_KEY")
    assert result.status == "coder_error" and "API key" in result.reason
    # A task the tracer cannot follow is not covered, with the tracer's reason; one that does not import is broken.
    result = to_result(task, coder="template", plan=None, candidate=None, verdict=None,
                       message="Could not trace the selection: tracing Model.forward failed: boom")
    assert result.status == "not_covered" and "trace" in result.reason
    result = to_result(task, coder="template", plan=None, candidate=None, verdict=None,
                       message="Could not trace the selection: the task does not import: SyntaxError")
    assert result.status == "error" and "import" in result.reason
    result = to_result(task, coder="template", plan=plan, candidate=CAND_WITH_KERNEL, verdict=None, message="not verified")
    assert result.status == "error"
    no_gpu = Verdict(status=VerdictStatus.NO_GPU, summary="no CUDA device")
    result = to_result(task, coder="template", plan=plan, candidate=None, verdict=no_gpu)
    assert result.status == "no_gpu" and "no CUDA device" in result.reason


def _report(results, copy=3000.0):
    summary = summarise(results, len(results) + 1, copy_gbs=copy)
    run = RunInfo(run_id="r1", tasks_dir="bench/tasks", command="stitch bench bench/tasks", coder="template",
                  started="now", gpus=[GpuInfo(slot="0", copy_bandwidth_gbs=copy)])
    return BenchReport(run=run, summary=summary, results=results, not_run=["red_never_ran_fp32"])


def test_table_rows_and_summary():
    results = [
        TaskResult(name="pw_gelu_scale_fp32", status="correct", compiled=True, speedup_vs_eager=2.5,
                   speedup_vs_compile=1.1, eager_ms=0.25, compile_ms=0.11, candidate_ms=0.1, bound="memory",
                   bound_source="profile", pct_of_peak=88.0, achieved_gbs=2680.0),
        TaskResult(name="gemm_linear_bias_gelu_fp32", status="incorrect", compiled=True,
                   reason="failed seed-1 max abs err 0.02", bound="compute", bound_source="task"),
        TaskResult(name="red_logsumexp_fp32", status="correct", speedup_vs_eager=math.inf, bound="memory"),
    ]
    text = render(_report(results))
    rows = render_rows(results, 3000.0).splitlines()
    assert rows[0].split()[:2] == ["task", "result"]
    gelu = next(line for line in rows if line.startswith("pw_gelu_scale_fp32"))
    assert "2.50x" in gelu and "1.10x" in gelu and "88%" in gelu and "89%" in gelu and "100µs" in gelu
    gemm = next(line for line in rows if line.startswith("gemm_linear"))
    assert "incorrect: failed seed-1" in gemm and "compute?" in gemm
    lse = next(line for line in rows if line.startswith("red_logsumexp"))
    assert "inf" not in lse and "—" in lse
    assert "fast_p" in text and "vs eager" in text and "vs compile" in text
    assert "copy bandwidth 3000 GB/s" in text and "1 of 1" in text
    assert "not run" in text and "red_never_ran_fp32" in text
    assert "correct 2 (50.0%)" in text  # 2 of the 4 selected tasks


def test_table_without_bandwidth_says_so():
    text = render(_report([TaskResult(name="a", status="crashed", reason="the process running the task died")], copy=None))
    assert "copy bandwidth not measured" in text
    assert "crashed: the process running the task died" in text


def test_profile_note_names_the_bottleneck_and_the_top_rule():
    from stitch_lsp.verdict import NcuRule

    kernel = KernelProfile(name="fused_softmax", duration_us=400.0, bound="memory", dram_throughput_pct=58.0,
                           sm_throughput_pct=31.0, achieved_occupancy_pct=42.0, theoretical_occupancy_pct=50.0,
                           occupancy_limiter="registers", registers=96,
                           rules=[NcuRule(name="Occupancy", message="info only", rule_type="INF"),
                                  NcuRule(name="UncoalescedGlobalAccess", message="uncoalesced loads",
                                          rule_type="OPT", estimated_speedup_pct=37.0),
                                  NcuRule(name="TailEffect", message="tail", rule_type="OPT", estimated_speedup_pct=4.0)])
    verdict = timed_verdict(profile=Profile(status="profiled", kernels=[kernel]))
    result = to_result(TASK, coder="template", plan=None, candidate=CAND, verdict=verdict)
    note = result.profile_note
    assert "fused_softmax: memory-bound" in note and "DRAM 58%" in note
    assert "occupancy 42% of 50% (limited by registers)" in note
    assert "UncoalescedGlobalAccess: uncoalesced loads (est. 37% faster)" in note

    failed = timed_verdict(profile=Profile(status="error", message="ncu was refused access (ERR_NVGPUCTRPERM)"))
    assert "ERR_NVGPUCTRPERM" in to_result(TASK, coder="t", plan=None, candidate=CAND, verdict=failed).profile_note


def test_goals_and_why_the_misses_miss():
    results = [
        TaskResult(name="pw_fast", status="correct", compiled=True, speedup_vs_eager=3.0, speedup_vs_compile=1.3,
                   bound="memory", achieved_gbs=2700.0),
        TaskResult(name="norm_slow", status="correct", compiled=True, speedup_vs_eager=1.2, speedup_vs_compile=0.9,
                   bound="memory", achieved_gbs=1500.0, profile_note="k: memory-bound; DRAM 50% of peak"),
        TaskResult(name="red_wrong", status="incorrect", compiled=True, reason="failed odd-shape"),
        TaskResult(name="red_middle", status="not_covered", reason="middle-dim reductions are not lowered"),
    ]
    text = render(_report(results))
    assert "why the misses miss:" in text
    line = next(l for l in text.splitlines() if l.strip().startswith("norm_slow:"))
    assert "< 1.5x eager" in line and "< 1.1x torch.compile" in line and "50% of copy bandwidth" in line
    assert "DRAM 50% of peak" in line
    assert not any(l.strip().startswith("pw_fast:") for l in text.splitlines())
    assert "correct on every task it covers: 2 of 3 covered tasks (not covered: 1, not run: 1) — NOT met" in text
    assert "geometric mean >= 1.5x eager: 1.90x — met" in text
    assert "geometric mean >= 1.1x torch.compile: 1.08x — NOT met" in text
    assert "copy bandwidth: 1 of 2 — NOT met" in text
