"""fast_p, geometric means and rates: the figures the suite is judged by."""

from __future__ import annotations

import math

import pytest

from stitch_lsp.benchsuite.results import TaskResult
from stitch_lsp.benchsuite.stats import fast_p, geomean, pct_of_copy, summarise


def r(name, status="correct", eager=None, compile_=None, compiled=True, bound="memory", gbs=None):
    return TaskResult(name=name, status=status, compiled=compiled, speedup_vs_eager=eager,
                      speedup_vs_compile=compile_, bound=bound, achieved_gbs=gbs)


def test_fast_p_counts_all_tasks_in_the_denominator():
    results = [r("a", eager=2.5), r("b", eager=1.2), r("c", status="incorrect", eager=9.0)]
    # 4 tasks selected: one did not run at all.
    assert fast_p(results, 4, 0.0, "eager") == pytest.approx(2 / 4)
    assert fast_p(results, 4, 1.0, "eager") == pytest.approx(2 / 4)
    assert fast_p(results, 4, 1.5, "eager") == pytest.approx(1 / 4)
    assert fast_p(results, 4, 2.5, "eager") == 0.0  # strictly faster than p


def test_fast_p_ignores_incorrect_and_non_finite_speedups():
    results = [r("a", eager=math.inf), r("b", eager=math.nan), r("c", eager=None), r("d", eager=-1.0),
               r("e", status="hacking", eager=50.0), r("f", eager=1.01)]
    assert fast_p(results, 6, 1.0, "eager") == pytest.approx(1 / 6)
    assert fast_p(results, 6, 0.0, "eager") == pytest.approx(1 / 6)


def test_fast_p_baselines_are_separate():
    results = [r("a", eager=3.0, compile_=0.9)]
    assert fast_p(results, 1, 1.0, "eager") == 1.0
    assert fast_p(results, 1, 1.0, "compile") == 0.0


def test_no_tasks_and_no_correct_tasks():
    assert fast_p([], 0, 1.0, "eager") is None
    summary = summarise([r("a", status="incorrect", eager=2.0), r("b", status="compile_error", compiled=False)], 2)
    assert summary.correct == 0 and summary.correct_rate == 0.0
    assert summary.compile_rate == pytest.approx(0.5)
    assert summary.geomean_vs_eager is None and summary.geomean_vs_compile is None
    assert summary.geomean_count == 0
    assert all(f.vs_eager == 0.0 and f.vs_compile == 0.0 for f in summary.fast_p)
    empty = summarise([], 0)
    assert empty.compile_rate is None and empty.correct_rate is None
    assert all(f.vs_eager is None for f in empty.fast_p)


def test_geomean_over_correct_tasks_only_and_skips_bad_values():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert geomean([2.0, math.inf, math.nan, None, 0.0, 8.0]) == pytest.approx(4.0)
    assert geomean([]) is None
    summary = summarise([r("a", eager=2.0, compile_=1.0), r("b", eager=8.0, compile_=4.0),
                         r("c", status="incorrect", eager=100.0, compile_=100.0)], 3)
    assert summary.geomean_vs_eager == pytest.approx(4.0)
    assert summary.geomean_vs_compile == pytest.approx(2.0)
    assert summary.geomean_count == 2
    assert [f.p for f in summary.fast_p] == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert summary.statuses == {"correct": 2, "incorrect": 1}


def test_copy_bandwidth_share_of_memory_bound_kernels():
    results = [r("a", eager=1.0, gbs=2700.0), r("b", eager=1.0, gbs=1500.0),
               r("c", eager=1.0, bound="compute", gbs=100.0), r("d", status="incorrect", gbs=2900.0)]
    summary = summarise(results, 4, copy_gbs=3000.0)
    assert summary.memory_bound == 2
    assert summary.memory_bound_at_80pct == 1
    assert pct_of_copy(results[0], 3000.0) == pytest.approx(90.0)
    assert pct_of_copy(results[0], None) is None
    assert summarise(results, 4).memory_bound == 0


def test_compile_geomean_counts_its_own_tasks():
    from stitch_lsp.benchsuite.table import render_summary

    summary = summarise([r("a", eager=2.0, compile_=1.2), r("b", eager=4.0, compile_=None)], 2)
    assert summary.geomean_count == 2 and summary.geomean_compile_count == 1
    assert summary.geomean_vs_compile == pytest.approx(1.2)
    text = render_summary(summary)
    assert "2.83x vs eager; 1.20x vs torch.compile (over 1: torch.compile failed" in text


def test_copy_share_uses_the_kernels_own_time_when_profiled():
    """Launch and host costs are not the kernel's: a profiled kernel time wins over the call's."""
    from stitch_lsp.benchsuite.table import render_rows

    called = r("called", eager=1.0, gbs=1500.0)
    profiled = r("profiled", eager=1.0, gbs=1500.0)
    profiled.kernel_gbs = 2700.0
    assert pct_of_copy(called, 3000.0) == pytest.approx(50.0)
    assert pct_of_copy(profiled, 3000.0) == pytest.approx(90.0)
    summary = summarise([called, profiled], 2, copy_gbs=3000.0)
    assert summary.memory_bound_at_80pct == 1
    table = render_rows([called, profiled], 3000.0)
    assert "~50%" in table and "90%" in table and "~90%" not in table


def test_kernel_figures_sum_the_candidate_kernels():
    from stitch_lsp.benchsuite.outcome import kernel_figures
    from stitch_lsp.verdict import KernelProfile, Profile, Verdict, VerdictStatus

    verdict = Verdict(status=VerdictStatus.CORRECT, summary="", profile=Profile(kernels=[
        KernelProfile(name="a", role="candidate", duration_us=60.0),
        KernelProfile(name="b", role="candidate", duration_us=40.0),
        KernelProfile(name="ref", role="reference", duration_us=500.0)]))
    us, gbs = kernel_figures(verdict, 300_000_000)
    assert us == pytest.approx(100.0) and gbs == pytest.approx(3000.0)
    assert kernel_figures(Verdict(status=VerdictStatus.CORRECT, summary=""), 300_000_000) == (None, None)
