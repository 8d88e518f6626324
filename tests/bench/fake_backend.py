"""A stand-in for ``stitch_lsp.benchsuite.runner`` that needs no GPU, Coder or Verifier.

What a task does is read from its name: ``slow`` sleeps, ``hang`` never returns,
``crash`` kills the process, ``raise`` raises, ``wrong`` is incorrect, ``die``
kills the process that started the shard (a cluster worker's actor) the first
time it runs under ``$STITCH_FAKE_BENCH_DIE_ONCE`` (a marker file); every other task is
correct with a speedup derived from its name. Each run appends the task's name to
the file named by ``$STITCH_FAKE_BENCH_LOG`` so tests can count executions.

Slow tasks numbered 2 and up also wait while ``$STITCH_FAKE_BENCH_HOLD`` (a file) exists.

``verify`` reads what to answer from the candidate's module source: a line
``# fake: compile_error`` / ``incorrect`` / ``correct 2.5`` (the speedup); it
sleeps ``$STITCH_FAKE_BENCH_VERIFY_S`` first, so tests can see candidates verified at once.
"""

from __future__ import annotations

import os
import re
import signal
import time
import zlib

from stitch_lsp.benchsuite.results import GpuInfo, TaskDetail, TaskResult
from stitch_lsp.cancellation import ProgressEvent
from stitch_lsp.verdict import (
    CompileResult, Correctness, DeviceInfo, Timing, TimingStats, Trial, Verdict, VerdictStatus,
)


def _log(name: str, *extra: object) -> None:
    path = os.environ.get("STITCH_FAKE_BENCH_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(" ".join(map(str, [name, os.environ.get("CUDA_VISIBLE_DEVICES", "-"), os.getpid(), *extra])) + "\n")


def _die_once() -> None:
    marker = os.environ.get("STITCH_FAKE_BENCH_DIE_ONCE")
    if marker and not os.path.exists(marker):
        with open(marker, "w", encoding="utf-8") as fh:
            fh.write(str(os.getppid()))
        os.kill(os.getppid(), signal.SIGKILL)  # the actor holding this shard: as if its node went down
        os._exit(9)  # and this shard with it


def _hold(name: str) -> None:
    """Slow tasks numbered 2 and up wait while the file ``$STITCH_FAKE_BENCH_HOLD`` exists (two minutes at most): a
    test that interrupts a run after two tasks then knows the others have not finished, however loaded the
    machine."""
    hold = os.environ.get("STITCH_FAKE_BENCH_HOLD")
    number = re.search(r"(\d+)", name)
    if not hold or number is None or int(number.group(1)) < 2:
        return
    deadline = time.monotonic() + 120
    while os.path.exists(hold) and time.monotonic() < deadline:
        time.sleep(0.05)


def configure(no_cache: bool = False, **_options) -> None:
    """The shard's run choices; a run told to measure afresh logs "configure" (``$STITCH_FAKE_BENCH_LOG``)."""
    if no_cache:
        _log("configure", "no_cache=True")


def run_task(task, settings, coder, cancel, report):
    _log(task.name)
    print(f"stand-in running {task.name}")  # the shard's log (stdout is redirected there)
    report(ProgressEvent(stage="checking", message=task.name))
    if "slow" in task.name:
        time.sleep(float(os.environ.get("STITCH_FAKE_BENCH_SLOW_S", "1.0")))
        _hold(task.name)
    if "die" in task.name:
        _die_once()
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


def verify(settings, reference_source, candidate, options, cancel, report):
    started = time.time()
    report(ProgressEvent(stage="checking", message="fake verify"))
    time.sleep(float(os.environ.get("STITCH_FAKE_BENCH_VERIFY_S", "0")))
    _log("verify", started, time.time())
    match = re.search(r"# fake: (\w+)(?: ([\d.]+))?", candidate.module_source)
    kind, value = (match.group(1), match.group(2)) if match else ("correct", "1.0")
    device = DeviceInfo(name=f"Fake GPU {os.environ.get('CUDA_VISIBLE_DEVICES', '-')}")
    if kind == "compile_error":
        return Verdict(VerdictStatus.COMPILE_ERROR, summary="compile error", device=device,
                       compile=CompileResult(ok=False, backend="fake", log="kernel.cu(3): error: fake"))
    trials = [Trial(f"seed-{i}", passed=kind == "correct", kind="random") for i in range(1, 6)]
    if kind != "correct":
        return Verdict(VerdictStatus.INCORRECT, summary="5 of 5 trials failed", device=device,
                       compile=CompileResult(ok=True, backend="fake"),
                       correctness=Correctness(status="failed", trials=trials))
    speedup = float(value or 1.0)
    return Verdict(VerdictStatus.CORRECT, summary=f"correct, {speedup:.2f}x over eager", device=device,
                   compile=CompileResult(ok=True, backend="fake"),
                   correctness=Correctness(status="passed", trials=trials),
                   timing=Timing(status="measured", eager=TimingStats(0.03), candidate=TimingStats(0.03 / speedup),
                                 speedup_vs_eager=speedup, speedup_vs_compile=speedup / 1.1))


def measure_gpu(settings, slot, cancel):
    return GpuInfo(slot=slot, device=DeviceInfo(name="Fake GPU", driver="1.0", cuda="13.0", torch="2.x"),
                   copy_bandwidth_gbs=3000.0, copy_method="fake")
