"""A stand-in for ``stitch_lsp.benchsuite.runner`` that needs no GPU, Coder or Verifier.

What a task does is read from its name: ``slow`` sleeps, ``hang`` never returns,
``crash`` kills the process, ``raise`` raises, ``wrong`` is incorrect; every other
task is correct with a speedup derived from its name. Each run appends the task's
name to the file named by ``$FAKE_BENCH_LOG`` so tests can count executions.
"""

from __future__ import annotations

import os
import time
import zlib

from stitch_lsp.benchsuite.results import GpuInfo, TaskDetail, TaskResult
from stitch_lsp.cancellation import ProgressEvent
from stitch_lsp.verdict import DeviceInfo


def _log(name: str) -> None:
    path = os.environ.get("FAKE_BENCH_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{name} {os.environ.get('CUDA_VISIBLE_DEVICES', '-')} {os.getpid()}\n")


def run_task(task, settings, coder, cancel, report):
    _log(task.name)
    report(ProgressEvent(stage="checking", message=task.name))
    if "slow" in task.name:
        time.sleep(float(os.environ.get("FAKE_BENCH_SLOW_S", "1.0")))
    if "hang" in task.name:
        while True:
            time.sleep(1)
    if "crash" in task.name:
        os._exit(7)
    if "raise" in task.name:
        raise ValueError("stand-in failure")
    speedup = 0.5 + (zlib.crc32(task.name.encode()) % 300) / 100
    correct = "wrong" not in task.name
    result = TaskResult(
        name=task.name, status="correct" if correct else "incorrect",
        reason="" if correct else "failed seed-1 max abs err 0.5",
        level=task.level, tags=list(task.tags), dtype=task.dtype, coder=coder, compiled=True,
        speedup_vs_eager=speedup, speedup_vs_compile=speedup / 1.5,
        eager_ms=1.0, compile_ms=0.8, candidate_ms=1.0 / speedup,
        bound=task.expected_bound or "memory", bound_source="task",
        min_bytes=2_000_000_000, achieved_gbs=2_000_000_000 / (1e-3 / speedup) / 1e9,
    )
    return result, TaskDetail(name=task.name, message=f"cvd={os.environ.get('CUDA_VISIBLE_DEVICES', '-')}")


def measure_gpu(settings, slot, cancel):
    return GpuInfo(slot=slot, device=DeviceInfo(name="Fake GPU", driver="1.0", cuda="13.0", torch="2.x"),
                   copy_bandwidth_gbs=3000.0, copy_method="fake")
