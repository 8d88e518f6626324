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
    run = _Run(tasks, listener, cancel, budget_s, clock)
    threads = [threading.Thread(target=run.serve, args=(w,), name=f"bench-{w.slot}", daemon=True) for w in workers]
    for thread in threads:
        thread.start()
    try:
        _wait_for(threads, listener, run.lock)
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
    return run.outcome_of(tasks)


def _wait_for(threads: list[threading.Thread], listener: Listener, lock: threading.Lock) -> None:
    """Wait in short joins, so that Ctrl-C lands in this thread, ticking the listener meanwhile."""
    tick = getattr(listener, "tick", None)
    while any(t.is_alive() for t in threads):
        for thread in threads:
            thread.join(0.1)
        if tick is not None:
            with lock:
                tick()


class _Run:
    """What the worker threads share: the queue, the tasks in flight and the outcome. ``lock`` guards them
    all, and every listener call is made with it held."""

    def __init__(self, tasks: Sequence[BenchTask], listener: Listener, cancel: CancelToken,
                 budget_s: float | None, clock: Callable[[], float]) -> None:
        self.pending: queue.Queue[BenchTask] = queue.Queue()
        for task in tasks:
            self.pending.put(task)
        self.listener, self.cancel, self.clock = listener, cancel, clock
        self.outcome = Outcome()
        self.lock = threading.Lock()
        # Workers wait for an empty queue to refill while tasks run elsewhere: a lost task comes back.
        self.changed = threading.Condition(self.lock)
        self.in_flight = 0
        self.drained = CancelToken()  # set once no task is queued or running: a worker still reviving can stop
        self.deadline = clock() + budget_s if budget_s is not None else None

    def serve(self, worker: Worker) -> None:
        """One worker's thread: run tasks from the queue until none is left, or the worker breaks."""
        listener, lock, cancel = self.listener, self.lock, self.cancel
        while not cancel.cancelled:
            task = self.take()
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
                if not self.lost(worker, task, exc):
                    return
                continue
            except Exception as exc:  # the worker itself broke: stop using it, keep the task
                with lock:
                    self.outcome.errors.append(f"worker {worker.slot}: {type(exc).__name__}: {exc}")
                    self.done_with(task, requeue=True)
                return
            if result.status == INTERRUPTED or cancel.cancelled:
                with lock:
                    self.outcome.not_run.append(task.name)
                    self.done_with(task)
                return
            self.finish(worker, task, result, detail)

    def take(self) -> BenchTask | None:
        with self.changed:
            while not self.cancel.cancelled:
                if self.deadline is not None and self.clock() >= self.deadline:
                    self.outcome.stopped_by_budget = True
                    return None
                try:
                    task = self.pending.get_nowait()
                except queue.Empty:
                    if self.in_flight == 0:
                        return None
                    self.changed.wait(0.2)
                    continue
                self.in_flight += 1
                return task
        return None

    def done_with(self, task: BenchTask, *, requeue: bool = False) -> None:  # called with the lock held
        if requeue:
            self.pending.put(task)
        self.in_flight -= 1
        self.changed.notify_all()
        if self.in_flight == 0 and self.pending.empty():
            self.drained.cancel("no task left")

    def finish(self, worker: Worker, task: BenchTask, result: TaskResult, detail: TaskDetail | None) -> None:
        with self.lock:
            result.retried = list(self.outcome.retried.get(task.name, []))
            self.outcome.finished.append(task.name)
            self.listener.finished(worker.slot, task, result, detail)
            self.done_with(task)

    def lost(self, worker: Worker, task: BenchTask, exc: Exception) -> bool:
        """The task goes back in the queue (or ends, lost too often); True when the worker goes on."""
        with self.lock:
            if self.cancel.cancelled:
                self.outcome.not_run.append(task.name)
                self.done_with(task)
                return False
            history = self.outcome.retried.setdefault(task.name, [])
            history.append(f"gpu {worker.slot}: {exc}")
            again = len(history) < MAX_ATTEMPTS
            if again:
                getattr(self.listener, "lost", lambda *_: None)(worker.slot, task, str(exc))
                self.done_with(task, requeue=True)
        if not again:  # recorded, never queued again
            self.finish(worker, task, failed_result(task, SHARD_CRASHED, f"its worker was lost {MAX_ATTEMPTS} times: "
                                                    f"{exc}", coder="", gpu=worker.slot), None)
        return self.revived(worker, exc)

    def revived(self, worker: Worker, exc: Exception) -> bool:
        """Ask a lost worker to replace what was lost; True when it is ready for the next task."""
        revive = getattr(worker, "revive", None)
        stop = CancelToken()  # whichever comes first: Ctrl-C, or nothing left to run
        self.cancel.on_cancel(stop.cancel)
        self.drained.on_cancel(stop.cancel)
        try:
            if revive is not None and revive(stop):
                return True
            why = str(exc)
        except Exception as revive_exc:
            why = f"{exc}; no replacement: {revive_exc}"
        if self.drained.cancelled and not self.cancel.cancelled:
            return False  # the others finished the run meanwhile: nothing lost that matters
        with self.lock:
            self.outcome.errors.append(f"worker {worker.slot} lost: {why}")
        return False

    def outcome_of(self, tasks: Sequence[BenchTask]) -> Outcome:
        """The outcome once every thread has stopped: what is still queued was not run, in the tasks' order."""
        outcome = self.outcome
        outcome.interrupted = self.cancel.cancelled
        while True:
            try:
                outcome.not_run.append(self.pending.get_nowait().name)
            except queue.Empty:
                break
        order = {t.name: i for i, t in enumerate(tasks)}
        outcome.not_run.sort(key=lambda name: order.get(name, 0))
        return outcome
