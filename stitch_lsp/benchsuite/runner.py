"""The real per-task work, run inside a shard: the fuse pipeline (plan → Coder →
Verifier) on one task file, turned into a TaskResult. Also ``measure_gpu``.

This is the default ``--backend`` of ``stitch_lsp.benchsuite.shard``.
"""

from __future__ import annotations

from pathlib import Path

from stitch_lsp.benchsuite.bandwidth import measure_gpu  # noqa: F401  (the shard's second entry point)
from stitch_lsp.benchsuite.outcome import to_detail, to_result
from stitch_lsp.benchsuite.results import TaskDetail, TaskResult
from stitch_lsp.benchsuite.tasks import BenchTask
from stitch_lsp.cancellation import CancelToken, Reporter
from stitch_lsp.pipeline import Task
from stitch_lsp.settings import Settings


def pipeline_task(task: BenchTask) -> Task:
    return Task(
        name=task.name,
        source=Path(task.path).read_text(encoding="utf-8"),
        origin_path=task.path,
        shape_source="get_inputs",
    )


def run_task(task: BenchTask, settings: Settings, coder: str, cancel: CancelToken,
             report: Reporter) -> tuple[TaskResult, TaskDetail]:
    try:
        from stitch_lsp.agents.fuse_service import fuse_task
    except ImportError as exc:
        raise RuntimeError(f"the fuse service is not available in this build ({exc})") from exc
    outcome = fuse_task(pipeline_task(task), settings, coder=coder, cancel=cancel, report=report)
    result = to_result(
        task,
        coder=coder,
        plan=getattr(outcome, "plan", None),
        candidate=getattr(outcome, "candidate", None),
        verdict=getattr(outcome, "verdict", None),
        message=str(getattr(outcome, "message", "") or ""),
    )
    return result, to_detail(task, outcome)
