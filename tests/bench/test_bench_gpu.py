"""The real pipeline on a GPU, two small-to-run tasks: every row ends with a verdict
(never an internal error) and the copy bandwidth is measured in the same run."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from stitch_lsp.benchsuite.suite import BenchOptions, run_bench
from stitch_lsp.benchsuite.tasks import TaskFilter
from stitch_lsp.settings import Settings

SUITE = Path(__file__).resolve().parents[2] / "bench" / "tasks"


@pytest.mark.gpu
def test_two_tasks_end_to_end(tmp_path):
    options = BenchOptions(tasks_dir=SUITE, run_dir=tmp_path / "run", coder="template", gpus=1,
                           filter=TaskFilter(globs=["pw_gelu_scale_fp32", "norm_rmsnorm_bf16"]),
                           task_timeout_s=280, command="pytest")
    out = io.StringIO()
    report = run_bench(options, Settings(trusted=True), out=out)
    assert [r.name for r in report.results] == ["norm_rmsnorm_bf16", "pw_gelu_scale_fp32"], out.getvalue()
    gpu = report.run.gpus[0]
    assert gpu.copy_bandwidth_gbs and gpu.copy_bandwidth_gbs > 1000, gpu.message
    assert gpu.device is not None and gpu.device.name
    for result in report.results:
        assert result.status not in ("error", "crashed", "timeout"), (result.name, result.reason, out.getvalue())
        if result.correct:
            assert result.speedup_vs_eager and result.speedup_vs_compile and result.candidate_ms
            assert result.achieved_gbs and result.achieved_gbs > 0
