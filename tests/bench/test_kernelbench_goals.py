"""bench/kernelbench_goals.py: the issue's goals read off a bench report and the dry run's coverage."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from stitch_lsp.benchsuite.results import BenchReport, GpuInfo, RunInfo, TaskResult
from stitch_lsp.benchsuite.stats import summarise
from stitch_lsp.serde import to_json

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "kernelbench_goals.py"


def _load():
    spec = importlib.util.spec_from_file_location("kernelbench_goals", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _report() -> BenchReport:
    def ok(name, level, eager, compile_, **kw):
        return TaskResult(name=name, status="correct", level=level, compiled=True, speedup_vs_eager=eager,
                          speedup_vs_compile=compile_, seconds=30.0, **kw)

    results = [
        # GEMM-bound: out of the speedup goals, and of the bandwidth goal though its profile reads "memory"
        ok("1_Gemm_tail", 1, 1.0, 0.9, bound="memory", kernel_gbs=150.0),
        ok("2_Softmax", 1, 2.0, 1.5, bound="memory", kernel_gbs=2700.0),
        ok("3_Norm", 1, 1.5, 0.9, reason="two passes over a 2M-element row"),
        TaskResult(name="4_Scan", status="error", level=1, reason="the Verifier failed", seconds=1.0),
        TaskResult(name="5_Odd", status="not_covered", level=1, seconds=1.0),
        TaskResult(name="6_Wrong", status="incorrect", level=2, compiled=True, seconds=10.0,
                   steps={"checking: trial": 6.0, "timing: interleaved rounds": 4.0}),
        TaskResult(name="8_Faulted", status="crashed", level=2, reason="the kernel faulted", seconds=2.0,
                   steps={"checking: trial": 2.0}),
        TaskResult(name="9_Constant", status="unverifiable", level=2, compiled=True, seconds=0.0,
                   reason="unverifiable: the reference's output is the same for every seed"),
    ]
    run = RunInfo(run_id="r", tasks_dir="kb/level1", command="stitch bench", coder="template", started="t0",
                  gpus=[GpuInfo(slot="0", copy_bandwidth_gbs=3000.0)])
    return BenchReport(run=run, summary=summarise(results, 9, copy_gbs=3000.0), results=results,
                       not_run=["7_Late"])


COVERAGE = [
    {"task": "1_Gemm_tail", "level": 1, "library": [], "groups": ["gemm: Triton GEMM 64x64x64", "pointwise: 2 ops"]},
    {"task": "2_Softmax", "level": 1, "library": [], "groups": ["row_reduction: 5 ops"]},
    {"task": "3_Norm", "level": 1, "library": [], "groups": ["row_reduction: 12 ops"]},
    {"task": "7_Late", "level": 2, "library": ["aten.convolution.default (cuDNN)"], "groups": []},
]


def test_goals_per_level_leave_out_gemm_bound_tasks_and_name_the_misses():
    goals = _load()
    figures = goals.goals(goals.merge([_report()]), {f"{r['level']}/{r['task']}": r for r in COVERAGE})
    one, two, every = (figures["levels"][k] for k in ("1", "2", "all"))
    assert one["errors"] == ["4_Scan (error: the Verifier failed)"] and one["tasks"] == 5 and one["covered"] == 3
    # The geometric means skip the GEMM-bound task: sqrt(2.0 * 1.5) and sqrt(1.5 * 0.9).
    assert one["speedup_tasks"] == 2
    assert abs(one["geomean_vs_eager"] - (2.0 * 1.5) ** 0.5) < 1e-9
    assert abs(one["geomean_vs_compile"] - (1.5 * 0.9) ** 0.5) < 1e-9
    # Below 0.97x torch.compile, with the reason recorded; the GEMM-bound one too (the floor is for every task).
    assert [s.split(" ")[0] for s in one["below_floor_vs_compile"]] == ["1_Gemm_tail", "3_Norm"]
    assert "two passes" in one["below_floor_vs_compile"][1]
    assert (one["memory_bound_profiled"], one["memory_bound_at_85pct"]) == (1, 1)  # 2700 of 3000 GB/s
    assert one["memory_bound_short"] == []
    # A crash is none of the five endings a task may have: it counts as an error, named with its reason.
    assert two["errors"] == ["8_Faulted (crashed: the kernel faulted)"]
    assert two["not_run"] == 1 and two["covered_not_correct"] == ["6_Wrong", "8_Faulted"] and two["tasks"] == 4
    # Unverifiable is one of the five endings: listed with its reason, not counted as a wrong kernel.
    assert [u.split(" ")[0] for u in two["unverifiable"]] == ["9_Constant"] and "every seed" in two["unverifiable"][0]
    assert every["tasks"] == 9 and every["bench_seconds"] == 30.0 * 3 + 1 + 1 + 10 + 2
    assert every["steps_seconds"] == {"checking: trial": 8.0, "timing: interleaved rounds": 4.0}


def test_command_line_writes_the_table(tmp_path):
    report, coverage = tmp_path / "report.json", tmp_path / "coverage.json"
    report.write_text(to_json(_report()))
    coverage.write_text(json.dumps(COVERAGE))
    out = subprocess.run([sys.executable, str(SCRIPT), str(report), "--coverage", str(coverage),
                          "--out", str(tmp_path / "goals")], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    table = (tmp_path / "goals.md").read_text()
    assert "| 1 | 5 | 0 | 1 | 3 (60%) | 0 | 0 | 1.73x | 1.16x | 2 | 2 | 1 of 1 |" in table
    assert "| 2 | 4 | 1 | 1 | 3 (75%) | 2 | 1 |" in table
    assert "- 4_Scan" in table and json.loads((tmp_path / "goals.json").read_text())["copy_gbs"] == 3000.0


def test_each_tasks_share_of_the_copy_is_taken_against_its_own_runs_copy(tmp_path):
    """A task re-run on another machine: 2560 GB/s against the 3000 GB/s copy of its own run is 85.3%; against
    the median of both runs' copies (3050) it would read 83.9%."""
    first = _report()
    rerun = BenchReport(run=RunInfo(run_id="r2", tasks_dir="kb/level1", command="stitch bench", coder="template",
                                    started="t1", gpus=[GpuInfo(slot="0", copy_bandwidth_gbs=3100.0)]),
                        summary=summarise([], 0, copy_gbs=3100.0), results=[], not_run=[])
    first.results[1].kernel_gbs = 2560.0
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, report in zip(paths, (rerun, first)):
        path.write_text(to_json(report))
    (tmp_path / "coverage.json").write_text(json.dumps(COVERAGE))
    out = subprocess.run([sys.executable, str(SCRIPT), *map(str, paths), "--coverage", str(tmp_path / "coverage.json"),
                          "--out", str(tmp_path / "goals")], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    figures = json.loads((tmp_path / "goals.json").read_text())
    assert figures["copy_gbs"] == 3050.0
    assert figures["levels"]["1"]["memory_bound_at_85pct"] == 1 and figures["levels"]["1"]["memory_bound_short"] == []
