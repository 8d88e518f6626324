"""The job queue: priorities, one GPU job per GPU, coalescing, cancellation, timeouts.

Plain Python (threads and ``concurrent.futures``); it knows nothing of LSP. The
editor layer listens to job events and turns them into work-done progress.

- Order: ``Priority.USER`` (the user just asked) > ``ON_SAVE`` > ``BACKGROUND``,
  first come first served within a priority.
- A job with ``gpu=True`` holds its GPU exclusively while it runs (timing and
  profiling must not share the device); other jobs (compiles, plans) run in
  parallel up to ``max_parallel``.
- Submitting a spec whose ``key`` equals a queued or running job's returns that
  job (the same question is asked once); a higher priority lifts the queued one.
- ``supersedes``: submitting cancels the older active jobs of the same group
  ("saving again cancels the previous run").
- Cancelling (by id, by document, all, at shutdown, on timeout) cancels the job's
  ``CancelToken`` — whatever the job runs has registered a callback that kills its
  process tree — and resolves the job at once; its slot (and GPU) is freed when
  the run returns, or after ``kill_grace_s`` if it ignores the token.
"""

from __future__ import annotations

import concurrent.futures
import enum
import heapq
import itertools
import logging
import threading
import time
from typing import Any, Callable, Generic, TypeVar

from attrs import define, field

from stitch_lsp.cancellation import Cancelled, CancelToken, ProgressEvent, Reporter

log = logging.getLogger(__name__)

T = TypeVar("T")


class Priority(enum.IntEnum):
    USER = 0  # the user asked for it just now (a command, a code action)
    ON_SAVE = 1  # a save triggered it
    BACKGROUND = 2  # speculative work nobody waits for


class JobState(str, enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"

    @property
    def finished(self) -> bool:
        return self not in (JobState.QUEUED, JobState.RUNNING)


class JobCancelled(Exception):
    """``Job.result()`` of a job that was cancelled (the message says why)."""


class JobTimedOut(JobCancelled):
    """``Job.result()`` of a job killed for outliving its timeout."""


class QueueClosed(RuntimeError):
    """Submitting after ``shutdown()``."""


@define(kw_only=True)
class JobSpec(Generic[T]):
    """What to run. ``run(token, report)`` must honour ``token`` (kill its children on cancel)."""

    key: str  # identity of the question: equal keys coalesce while one is active
    title: str  # shown in the progress UI: "Verify softmax_kernel"
    run: Callable[[CancelToken, Reporter], T]
    priority: Priority = Priority.USER
    document_uri: str | None = None  # edits / close of this document cancel the job
    gpu: bool = False  # holds GPU ``gpu_index`` exclusively while running
    gpu_index: int = 0
    timeout_s: float | None = None  # wall clock from start; None = no limit
    supersedes: str | None = None  # group: a new job cancels older active ones of its group
    cancel_on_change: bool = True  # an edit of ``document_uri`` cancels it (close always does)
    cancellable: bool = True  # offered as cancellable in the progress UI


@define(eq=False)
class Job(Generic[T]):
    id: str
    spec: JobSpec[T]
    token: CancelToken = field(factory=CancelToken)
    future: concurrent.futures.Future = field(factory=concurrent.futures.Future)
    state: JobState = JobState.QUEUED
    message: str = ""  # why it ended, when not plainly done
    last_event: ProgressEvent | None = None
    submitted_at: float = field(factory=time.monotonic)
    started_at: float | None = None
    ended_at: float | None = None
    _seq: int = 0
    _lock: threading.Lock = field(factory=threading.Lock, repr=False)

    @property
    def title(self) -> str:
        return self.spec.title

    @property
    def key(self) -> str:
        return self.spec.key

    @property
    def done(self) -> bool:
        return self.state.finished

    def result(self, timeout: float | None = None) -> T:
        """The run's return value; raises ``JobCancelled`` / ``JobTimedOut`` / the run's exception."""
        return self.future.result(timeout)

    def elapsed(self) -> float:
        if self.started_at is None:
            return 0.0
        return (self.ended_at or time.monotonic()) - self.started_at


class JobListener:
    """Receives job events, on whatever thread they happen (marshal as needed)."""

    def job_queued(self, job: Job) -> None: ...

    def job_started(self, job: Job) -> None: ...

    def job_progress(self, job: Job, event: ProgressEvent) -> None: ...

    def job_ended(self, job: Job) -> None: ...


class JobQueue:
    def __init__(self, *, max_parallel: int = 4, kill_grace_s: float = 5.0) -> None:
        self.max_parallel = max(1, max_parallel)
        self.kill_grace_s = kill_grace_s
        self._lock = threading.RLock()
        self._heap: list[tuple[int, int, Job]] = []
        self._jobs: dict[str, Job] = {}  # queued or running (or freshly resolved, slot still held)
        self._by_key: dict[str, Job] = {}
        self._slots_held: set[str] = set()  # job ids whose run thread still holds a slot
        self._gpus_held: dict[int, str] = {}  # gpu index -> job id
        self._ids = itertools.count(1)
        self._seq = itertools.count()
        self._listeners: list[JobListener] = []
        self._closed = False

    # -- listeners -----------------------------------------------------------------
    def add_listener(self, listener: JobListener) -> Callable[[], None]:
        with self._lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return remove

    def _emit(self, method: str, *args: Any) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                getattr(listener, method)(*args)
            except Exception:  # a broken listener must not break the queue
                log.exception("job listener %s.%s failed", type(listener).__name__, method)

    # -- submitting -----------------------------------------------------------------
    def submit(self, spec: JobSpec[T]) -> Job[T]:
        superseded: list[Job] = []
        with self._lock:
            if self._closed:
                raise QueueClosed("the job queue is shut down")
            existing = self._by_key.get(spec.key)
            if existing is not None and not existing.done:
                if spec.priority < existing.spec.priority and existing.state is JobState.QUEUED:
                    existing.spec.priority = spec.priority
                    heapq.heappush(self._heap, (int(spec.priority), existing._seq, existing))
                return existing
            if spec.supersedes is not None:
                superseded = [
                    j for j in self._jobs.values()
                    if j.spec.supersedes == spec.supersedes and not j.done
                ]
            job: Job[T] = Job(id=f"job-{next(self._ids)}", spec=spec)
            job._seq = next(self._seq)
            self._jobs[job.id] = job
            self._by_key[spec.key] = job
            heapq.heappush(self._heap, (int(spec.priority), job._seq, job))
        for old in superseded:
            self._cancel(old, "superseded by a newer run", JobState.CANCELLED)
        self._emit("job_queued", job)
        self._pump()
        return job

    # -- cancelling -----------------------------------------------------------------
    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def active(self) -> list[Job]:
        """Queued and running jobs, in submission order."""
        with self._lock:
            return sorted((j for j in self._jobs.values() if not j.done), key=lambda j: j._seq)

    def counts(self) -> tuple[int, int]:
        """(running, queued)."""
        jobs = self.active()
        running = sum(1 for j in jobs if j.state is JobState.RUNNING)
        return running, len(jobs) - running

    def cancel(self, job_id: str, reason: str = "cancelled") -> bool:
        job = self.get(job_id)
        if job is None or job.done:
            return False
        return self._cancel(job, reason, JobState.CANCELLED)

    def cancel_document(self, uri: str, reason: str = "the document changed", *, change: bool = True) -> list[Job]:
        """Cancel the active jobs of ``uri``. ``change=True``: an edit (jobs with
        ``cancel_on_change=False`` survive); ``change=False``: a close (all go)."""
        jobs = [
            j for j in self.active()
            if j.spec.document_uri == uri and (not change or j.spec.cancel_on_change)
        ]
        return [j for j in jobs if self._cancel(j, reason, JobState.CANCELLED)]

    def cancel_all(self, reason: str = "cancelled") -> list[Job]:
        return [j for j in self.active() if self._cancel(j, reason, JobState.CANCELLED)]

    def shutdown(self, wait_s: float = 5.0) -> None:
        """Refuse new jobs, cancel every active one, wait a little for their runs to return."""
        with self._lock:
            self._closed = True
        self.cancel_all("the server is shutting down")
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            with self._lock:
                if not self._slots_held:
                    return
            time.sleep(0.02)

    def _cancel(self, job: Job, reason: str, state: JobState) -> bool:
        with job._lock:
            if job.state.finished:
                return False
            was_running = job.state is JobState.RUNNING
            job.state = state
            job.message = reason
            job.ended_at = time.monotonic()
        # Kill first (the token's callbacks end the worker's process tree), then resolve.
        job.token.cancel(reason)
        exc = JobTimedOut(reason) if state is JobState.TIMED_OUT else JobCancelled(reason)
        if not job.future.done():
            job.future.set_exception(exc)
        with self._lock:
            if self._by_key.get(job.key) is job:
                del self._by_key[job.key]
            if not was_running:
                self._jobs.pop(job.id, None)
        if was_running:
            # The run thread frees its slot when it returns; a run that ignores its
            # token must not hold the GPU forever.
            timer = threading.Timer(self.kill_grace_s, self._release, args=(job, True))
            timer.daemon = True
            timer.start()
        self._emit("job_ended", job)
        self._pump()
        return True

    # -- running --------------------------------------------------------------------
    def _pump(self) -> None:
        to_start: list[Job] = []
        with self._lock:
            skipped: list[tuple[int, int, Job]] = []
            while self._heap and len(self._slots_held) + len(to_start) < self.max_parallel:
                prio, seq, job = heapq.heappop(self._heap)
                if job.state is not JobState.QUEUED or prio != int(job.spec.priority):
                    continue  # cancelled, or a stale entry left by a priority lift
                if job.spec.gpu and job.spec.gpu_index in self._gpus_held:
                    skipped.append((prio, seq, job))
                    continue
                if job.spec.gpu:
                    self._gpus_held[job.spec.gpu_index] = job.id
                self._slots_held.add(job.id)
                job.state = JobState.RUNNING
                job.started_at = time.monotonic()
                to_start.append(job)
            for entry in skipped:
                heapq.heappush(self._heap, entry)
        for job in to_start:
            thread = threading.Thread(target=self._run, args=(job,), name=f"stitch-{job.id}", daemon=True)
            thread.start()

    def _run(self, job: Job) -> None:
        self._emit("job_started", job)
        timer: threading.Timer | None = None
        if job.spec.timeout_s is not None:
            limit = job.spec.timeout_s
            timer = threading.Timer(
                limit, self._cancel, args=(job, f"timed out after {_seconds(limit)} and was stopped", JobState.TIMED_OUT)
            )
            timer.daemon = True
            timer.start()

        def report(event: ProgressEvent) -> None:
            if job.state is not JobState.RUNNING:
                return
            job.last_event = event
            self._emit("job_progress", job, event)

        try:
            value = job.spec.run(job.token, report)
        except Cancelled as exc:
            self._cancel(job, str(exc) or job.token.reason or "cancelled", JobState.CANCELLED)
        except BaseException as exc:  # noqa: BLE001 - a job's failure is its result
            with job._lock:
                mine = not job.state.finished
                if mine:
                    job.state = JobState.FAILED
                    job.message = f"{type(exc).__name__}: {exc}"
                    job.ended_at = time.monotonic()
            if mine:
                log.error("job %s (%s) failed", job.id, job.title, exc_info=exc)
                job.future.set_exception(exc)
                self._forget(job)
                self._emit("job_ended", job)
        else:
            with job._lock:
                mine = not job.state.finished
                if mine:
                    job.state = JobState.DONE
                    job.ended_at = time.monotonic()
            if mine:
                job.future.set_result(value)
                self._forget(job)
                self._emit("job_ended", job)
        finally:
            if timer is not None:
                timer.cancel()
            self._release(job, False)

    def _forget(self, job: Job) -> None:
        with self._lock:
            if self._by_key.get(job.key) is job:
                del self._by_key[job.key]

    def _release(self, job: Job, forced: bool) -> None:
        with self._lock:
            if job.id not in self._slots_held:
                return
            if forced:
                log.warning("job %s (%s) ignored its cancellation; freeing its slot", job.id, job.title)
            self._slots_held.discard(job.id)
            if self._gpus_held.get(job.spec.gpu_index) == job.id:
                del self._gpus_held[job.spec.gpu_index]
            if job.state.finished:
                self._jobs.pop(job.id, None)
        self._pump()


def _seconds(value: float) -> str:
    return f"{value:g} s"
