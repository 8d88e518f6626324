"""Handing tasks to workers, one per GPU, until done, interrupted or out of time.

A worker is anything with ``slot``, ``run(task, cancel, on_progress)`` and
``close()`` (``shard.ShardWorker`` locally, ``ray_executor.RayGpuWorker`` on a Ray
cluster; the tests use in-process stand-ins). Each worker runs in its own thread
and takes the next task from one shared queue, so a slow task on one GPU never
holds the others up. The calling thread only waits, so Ctrl-C lands there: it
cancels, which kills what the workers run.

A worker that raises ``WorkerLost`` lost the task through no fault of the task (a
cluster node went down, its actor was killed): the task goes back in the queue for
another worker, marked as retried, and the worker may ``revive()`` itself (a fresh
actor) or leave the run.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Callable, Protocol, Sequence

from stitch_lsp.benchsuite.results import INTERRUPTED, SHARD_CRASHED, TaskDetail, TaskResult, failed_result
from stitch_lsp.benchsuite.tasks import BenchTask
from stitch_lsp.cancellation import CancelToken

MAX_ATTEMPTS = 3  # a task whose worker is lost this many times ends as crashed, not queued again


class WorkerLost(Exception):
    """The worker died under the task (node down, actor killed): not the task's fault, run it elsewhere."""


class Worker(Protocol):
    slot: str

    def run(self, task: BenchTask, cancel: CancelToken,
            on_progress: Callable[[str], None] = ...) -> tuple[TaskResult, TaskDetail | None]: ...

    def close(self) -> None: ...

    # Optional: ``revive(cancel) -> bool`` after a WorkerLost: replace what was lost, True when ready again.


class Listener(Protocol):
    def started(self, slot: str, task: BenchTask) -> None: ...

    def progress(self, slot: str, task: BenchTask, message: str) -> None: ...

    def finished(self, slot: str, task: BenchTask, result: TaskResult, detail: TaskDetail | None) -> None: ...

    # Optional: ``tick()``, called from the waiting thread a few times a second (heartbeats);
    # ``lost(slot, task, reason)``, when a worker is lost under a task that goes back in the queue.


class Outcome:
    def __init__(self) -> None:
        self.finished: list[str] = []
        self.not_run: list[str] = []  # never started, or interrupted while running
        self.interrupted = False
        self.stopped_by_budget = False
        self.errors: list[str] = []  # worker threads that failed outright
        self.retried: dict[str, list[str]] = {}  # task -> why each earlier attempt was lost


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
    # Workers wait for an empty queue to refill while tasks run elsewhere: a lost task comes back.
    changed = threading.Condition(lock)
    in_flight = [0]
    drained = CancelToken()  # set once no task is queued or running: a worker still reviving can stop
    deadline = clock() + budget_s if budget_s is not None else None

    def take() -> BenchTask | None:
        with changed:
            while not cancel.cancelled:
                if deadline is not None and clock() >= deadline:
                    outcome.stopped_by_budget = True
                    return None
                try:
                    task = pending.get_nowait()
                except queue.Empty:
                    if in_flight[0] == 0:
                        return None
                    changed.wait(0.2)
                    continue
                in_flight[0] += 1
                return task
        return None

    def done_with(task: BenchTask, *, requeue: bool = False) -> None:  # called with the lock held
        if requeue:
            pending.put(task)
        in_flight[0] -= 1
        changed.notify_all()
        if in_flight[0] == 0 and pending.empty():
            drained.cancel("no task left")

    def loop(worker: Worker) -> None:
        while not cancel.cancelled:
            task = take()
            if task is None:
                return
            with lock:
                listener.started(worker.slot, task)

            def progress(message: str, task: BenchTask = task) -> None:
                with lock:
                    listener.progress(worker.slot, task, message)

            try:
                result, detail = worker.run(task, cancel, progress)
            except WorkerLost as exc:
                if not lost(worker, task, exc):
                    return
                continue
            except Exception as exc:  # the worker itself broke: stop using it, keep the task
                with lock:
                    outcome.errors.append(f"worker {worker.slot}: {type(exc).__name__}: {exc}")
                    done_with(task, requeue=True)
                return
            if result.status == INTERRUPTED or cancel.cancelled:
                with lock:
                    outcome.not_run.append(task.name)
                    done_with(task)
                return
            finish(worker, task, result, detail)

    def finish(worker: Worker, task: BenchTask, result: TaskResult, detail: TaskDetail | None) -> None:
        with lock:
            result.retried = list(outcome.retried.get(task.name, []))
            outcome.finished.append(task.name)
            listener.finished(worker.slot, task, result, detail)
            done_with(task)

    def lost(worker: Worker, task: BenchTask, exc: Exception) -> bool:
        """The task goes back in the queue (or ends, lost too often); True when the worker goes on."""
        with lock:
            if cancel.cancelled:
                outcome.not_run.append(task.name)
                done_with(task)
                return False
            history = outcome.retried.setdefault(task.name, [])
            history.append(f"gpu {worker.slot}: {exc}")
            again = len(history) < MAX_ATTEMPTS
            if again:
                getattr(listener, "lost", lambda *_: None)(worker.slot, task, str(exc))
                done_with(task, requeue=True)
        if not again:  # recorded, never queued again
            finish(worker, task, failed_result(task, SHARD_CRASHED, f"its worker was lost {MAX_ATTEMPTS} times: "
                                               f"{exc}", coder="", gpu=worker.slot), None)
        revive = getattr(worker, "revive", None)
        stop = CancelToken()  # whichever comes first: Ctrl-C, or nothing left to run
        cancel.on_cancel(stop.cancel)
        drained.on_cancel(stop.cancel)
        try:
            if revive is not None and revive(stop):
                return True
            why = str(exc)
        except Exception as revive_exc:
            why = f"{exc}; no replacement: {revive_exc}"
        if drained.cancelled and not cancel.cancelled:
            return False  # the others finished the run meanwhile: nothing lost that matters
        with lock:
            outcome.errors.append(f"worker {worker.slot} lost: {why}")
        return False

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
