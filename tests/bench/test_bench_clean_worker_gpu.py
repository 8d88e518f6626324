"""``stitch bench`` on a GPU: a task that runs the GPU out of memory costs its own verdict and
nothing more; the next task runs in a worker with no allocations left over."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from stitch_lsp.benchsuite.suite import BenchOptions, run_bench
from stitch_lsp.settings import Settings

TASKS = Path(__file__).resolve().parent / "clean_worker_tasks"


@pytest.mark.gpu
def test_out_of_memory_in_task_1_then_task_2_is_correct(tmp_path):
    options = BenchOptions(tasks_dir=TASKS, run_dir=tmp_path / "run", coder="template", gpus=1,
                           task_timeout_s=280, command="pytest", profile="none", measure_bandwidth=False)
    out = io.StringIO()
    report = run_bench(options, Settings(trusted=True), out=out)
    print(out.getvalue())
    results = {r.name: r for r in report.results}
    assert list(results) == ["a_reference_hoards_memory", "b_gelu_scale"], out.getvalue()
    hoard, after = results["a_reference_hoards_memory"], results["b_gelu_scale"]
    assert hoard.status == "out_of_memory", (hoard.status, hoard.reason)
    assert after.status == "correct", (after.status, after.reason, out.getvalue())
    assert after.speedup_vs_eager and after.candidate_ms
