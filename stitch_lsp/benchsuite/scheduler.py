"""Handing tasks to workers, one per GPU, until done, interrupted or out of time.

A worker is anything with ``slot``, ``run(task, cancel, on_progress)`` and
``close()`` (``shard.ShardWorker`` for real; the tests use in-process stand-ins).
Each worker runs in its own thread and takes the next task from one shared queue,
so a slow task on one GPU never holds the others up. The calling thread only
waits, so Ctrl-C lands there: it cancels, which kills what the workers run.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Callable, Protocol, Sequence

from stitch_lsp.benchsuite.results import INTERRUPTED, TaskDetail, TaskResult
from stitch_lsp.benchsuite.tasks import BenchTask
from stitch_lsp.cancellation import CancelToken


class Worker(Protocol):
    slot: str

    def run(self, task: BenchTask, cancel: CancelToken,
            on_progress: Callable[[str], None] = ...) -> tuple[TaskResult, TaskDetail | None]: ...

    def close(self) -> None: ...


class Listener(Protocol):
    def started(self, slot: str, task: BenchTask) -> None: ...

    def progress(self, slot: str, task: BenchTask, message: str) -> None: ...

    def finished(self, slot: str, task: BenchTask, result: TaskResult, detail: TaskDetail | None) -> None: ...

    # Optional: ``tick()``, called from the waiting thread a few times a second (heartbeats).


class Outcome:
    def __init__(self) -> None:
        self.finished: list[str] = []
        self.not_run: list[str] = []  # never started, or interrupted while running
        self.interrupted = False
        self.stopped_by_budget = False
        self.errors: list[str] = []  # worker threads that failed outright


def run_tasks(
    tasks: Sequence[BenchTask],
    workers: Sequence[Worker],
    listener: Listener,
    cancel: CancelToken,
    *,
    budget_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Outcome:
    """Run every task on some worker. ``listener`` calls are serialised by a lock.

    ``budget_s``: no task is started after this many seconds (those running finish).
    """
    if not workers:
        raise ValueError("no workers to run the tasks on")
    pending: queue.Queue[BenchTask] = queue.Queue()
    for task in tasks:
        pending.put(task)
    outcome = Outcome()
    lock = threading.Lock()
    deadline = clock() + budget_s if budget_s is not None else None

    def loop(worker: Worker) -> None:
        while not cancel.cancelled:
            if deadline is not None and clock() >= deadline:
                with lock:
                    outcome.stopped_by_budget = True
                return
            try:
                task = pending.get_nowait()
            except queue.Empty:
                return
            with lock:
                listener.started(worker.slot, task)

            def progress(message: str, task: BenchTask = task) -> None:
                with lock:
                    listener.progress(worker.slot, task, message)

            try:
                result, detail = worker.run(task, cancel, progress)
            except Exception as exc:  # the worker itself broke: stop using it, keep the task
                pending.put(task)
                with lock:
                    outcome.errors.append(f"worker {worker.slot}: {type(exc).__name__}: {exc}")
                return
            if result.status == INTERRUPTED or cancel.cancelled:
                with lock:
                    outcome.not_run.append(task.name)
                return
            with lock:
                outcome.finished.append(task.name)
                listener.finished(worker.slot, task, result, detail)

    threads = [threading.Thread(target=loop, args=(w,), name=f"bench-{w.slot}", daemon=True) for w in workers]
    for thread in threads:
        thread.start()
    tick = getattr(listener, "tick", None)
    try:
        while any(t.is_alive() for t in threads):
            for thread in threads:
                thread.join(0.1)
            if tick is not None:
                with lock:
                    tick()
    except KeyboardInterrupt:
        cancel.cancel("interrupted")
        for thread in threads:
            thread.join(30)
    finally:
        for worker in workers:
            try:
                worker.close()
            except Exception:
                pass
    outcome.interrupted = cancel.cancelled
    while True:
        try:
            outcome.not_run.append(pending.get_nowait().name)
        except queue.Empty:
            break
    order = {t.name: i for i, t in enumerate(tasks)}
    outcome.not_run.sort(key=lambda name: order.get(name, 0))
    return outcome
