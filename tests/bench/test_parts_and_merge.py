"""Splitting a suite over runs and combining their reports; the order a budget-cut run takes."""

from __future__ import annotations

import pytest

from stitch_lsp.benchsuite.merge import main as merge_main
from stitch_lsp.benchsuite.merge import merge
from stitch_lsp.benchsuite.results import BenchReport, GpuInfo, RunInfo, TaskResult
from stitch_lsp.benchsuite.stats import summarise
from stitch_lsp.benchsuite.tasks import BenchTask, interleave, part
from stitch_lsp.serde import from_json, to_json

NAMES = ["gemm_a", "gemm_b", "gemm_c", "norm_a", "pw_a", "pw_b", "red_a"]


def bt(names):
    return [BenchTask(name=n, path=f"{n}.py") for n in names]


def test_parts_cover_the_suite_once():
    tasks = bt(NAMES)
    parts = [part(tasks, i, 3) for i in (1, 2, 3)]
    assert sorted(t.name for p in parts for t in p) == NAMES
    assert all(parts)
    with pytest.raises(ValueError):
        part(tasks, 0, 2)


def test_interleave_round_robins_categories():
    order = [t.name for t in interleave(bt(NAMES))]
    assert order[:4] == ["gemm_a", "norm_a", "pw_a", "red_a"]
    assert sorted(order) == NAMES


def report(run_id, results, not_run, bw, finished):
    run = RunInfo(run_id=run_id, tasks_dir="bench/tasks", command=f"stitch bench --part {run_id}", coder="template",
                  started=finished, finished=finished, gpus=[GpuInfo(slot="0", copy_bandwidth_gbs=bw)])
    return BenchReport(run=run, summary=summarise(results, len(results) + len(not_run), bw), results=results,
                       not_run=not_run)


def test_merge_recomputes_over_all_parts(tmp_path):
    a = report("1", [TaskResult(name="pw_a", status="correct", speedup_vs_eager=2.0),
                     TaskResult(name="red_a", status="incorrect")], ["gemm_a"], 2900.0, "2026-01-01T00:00")
    b = report("2", [TaskResult(name="norm_a", status="correct", speedup_vs_eager=8.0),
                     TaskResult(name="gemm_a", status="correct", speedup_vs_eager=0.9)], [], 3000.0,
               "2026-01-01T01:00")
    merged = merge([a, b])
    assert [r.name for r in merged.results] == ["gemm_a", "norm_a", "pw_a", "red_a"]
    assert merged.not_run == []  # gemm_a ran in the second part
    assert merged.summary.tasks == 4 and merged.summary.correct == 3
    assert merged.summary.geomean_vs_eager == pytest.approx((2.0 * 8.0 * 0.9) ** (1 / 3))
    assert merged.summary.copy_bandwidth_gbs == pytest.approx(2950.0)

    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(to_json(a))
    pb.write_text(to_json(b))
    assert merge_main([str(pa), str(pb), "--out", str(tmp_path / "suite.v1")]) == 0
    saved = from_json((tmp_path / "suite.v1.json").read_text(), BenchReport)
    assert saved.summary.correct == 3
    assert "norm_a" in (tmp_path / "suite.v1.txt").read_text()
    assert merge_main([str(tmp_path / "missing.json")]) == 2


def test_compare_two_runs(tmp_path):
    from stitch_lsp.benchsuite.compare import compare
    from stitch_lsp.benchsuite.compare import main as compare_main

    before = report("before", [TaskResult(name="pw_a", status="correct", speedup_vs_eager=2.0),
                               TaskResult(name="red_a", status="incorrect"),
                               TaskResult(name="norm_a", status="correct", speedup_vs_eager=3.0)], [], 3000.0, "t0")
    after = report("after", [TaskResult(name="pw_a", status="correct", speedup_vs_eager=3.0),
                             TaskResult(name="red_a", status="correct", speedup_vs_eager=1.5),
                             TaskResult(name="norm_a", status="crashed")], ["gemm_a"], 3000.0, "t1")
    text = compare(before, after)
    rows = {line.split()[0]: line for line in text.splitlines() if line[:1].isalpha()}
    assert "1.50x faster" in rows["pw_a"]
    assert "now correct" in rows["red_a"]
    assert "now FAILS" in rows["norm_a"] and "crashed" in rows["norm_a"]
    assert "not run" in rows["gemm_a"]
    assert "geomean vs eager" in text
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(to_json(before))
    pb.write_text(to_json(after))
    assert compare_main([str(pa), str(pb)]) == 0
    assert compare_main([str(pa), str(tmp_path / "nope.json")]) == 2


def test_merge_refreshes_kernel_figures_from_kept_verdicts(tmp_path):
    """Reports written before the kernel-time bandwidth existed get it from their run's details/."""
    from stitch_lsp.benchsuite.results import TaskDetail
    from stitch_lsp.verdict import KernelProfile, Profile, Verdict, VerdictStatus

    old = report("1", [TaskResult(name="pw_a", status="correct", speedup_vs_eager=2.0, bound="memory",
                                  min_bytes=300_000_000, achieved_gbs=1500.0)], [], 3000.0, "2026-01-01T00:00")
    run = tmp_path / "run"
    (run / "details").mkdir(parents=True)
    verdict = Verdict(status=VerdictStatus.CORRECT, summary="",
                      profile=Profile(kernels=[KernelProfile(name="k", role="candidate", duration_us=125.0)]))
    (run / "details" / "pw_a.json").write_text(to_json(TaskDetail(name="pw_a", verdict=verdict)))
    (tmp_path / "old.json").write_text(to_json(old))
    assert merge_main([str(tmp_path / "old.json"), "--details", str(run), "--out", str(tmp_path / "new")]) == 0
    merged = from_json((tmp_path / "new.json").read_text(), BenchReport)
    assert merged.results[0].kernel_us == pytest.approx(125.0)
    assert merged.results[0].kernel_gbs == pytest.approx(2400.0)
    assert merged.summary.memory_bound_at_80pct == 1  # 2400 of 3000 GB/s; the call's 1500 would be 50 %
