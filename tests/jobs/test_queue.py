"""The job queue: what a user notices — order, exclusivity, one run per question,
cancellation that really kills, timeouts with a clear message."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from stitch_lsp.cancellation import Cancelled, CancelToken, ProgressEvent
from stitch_lsp.jobs import (
    JobCancelled,
    JobListener,
    JobQueue,
    JobSpec,
    JobState,
    JobTimedOut,
    Priority,
    QueueClosed,
)
from stitch_lsp.jobs.process import run_cancellable


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); read its state.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return False


class Recorder(JobListener):
    def __init__(self):
        self.events: list[tuple[str, str, object]] = []
        self.lock = threading.Lock()

    def job_queued(self, job):
        with self.lock:
            self.events.append(("queued", job.title, None))

    def job_started(self, job):
        with self.lock:
            self.events.append(("started", job.title, None))

    def job_progress(self, job, event):
        with self.lock:
            self.events.append(("progress", job.title, event))

    def job_ended(self, job):
        with self.lock:
            self.events.append(("ended", job.title, job.state))


def blocker(gate: threading.Event, log: list[str] | None = None, name: str = ""):
    def run(token: CancelToken, report):
        if log is not None:
            log.append(name)
        while not gate.wait(0.01):
            token.raise_if_cancelled()
        return name
    return run


def test_result_and_events_in_order():
    q = JobQueue()
    rec = Recorder()
    q.add_listener(rec)

    def run(token, report):
        report(ProgressEvent("compiling", "nvcc", 10))
        report(ProgressEvent("timing", "eager vs candidate", 80))
        return 42

    job = q.submit(JobSpec(key="k", title="Verify k", run=run))
    assert job.result(5) == 42
    assert _wait(lambda: len(rec.events) == 5)
    kinds = [e[0] for e in rec.events]
    assert kinds == ["queued", "started", "progress", "progress", "ended"]
    assert rec.events[2][2].percent == 10
    assert rec.events[-1][2] is JobState.DONE
    q.shutdown()


def test_user_requests_run_before_on_save_before_background():
    q = JobQueue(max_parallel=1)
    gate = threading.Event()
    order: list[str] = []
    first = q.submit(JobSpec(key="busy", title="busy", run=blocker(gate, order, "busy")))
    assert _wait(lambda: first.state is JobState.RUNNING)
    jobs = [
        q.submit(JobSpec(key=n, title=n, priority=p, run=blocker(gate, order, n)))
        for n, p in [("bg", Priority.BACKGROUND), ("save", Priority.ON_SAVE), ("user", Priority.USER)]
    ]
    gate.set()
    for j in jobs:
        j.result(5)
    assert order == ["busy", "user", "save", "bg"]
    q.shutdown()


def test_gpu_jobs_hold_their_gpu_exclusively_while_cpu_jobs_run_alongside():
    q = JobQueue(max_parallel=4)
    running = {"gpu0": 0, "max_gpu0": 0}
    lock = threading.Lock()
    gate = threading.Event()

    def gpu_run(token, report):
        with lock:
            running["gpu0"] += 1
            running["max_gpu0"] = max(running["max_gpu0"], running["gpu0"])
        gate.wait(2)
        time.sleep(0.05)
        with lock:
            running["gpu0"] -= 1

    g = [q.submit(JobSpec(key=f"g{i}", title=f"g{i}", gpu=True, run=gpu_run)) for i in range(3)]
    other_gpu = q.submit(JobSpec(key="g1dev", title="gpu1", gpu=True, gpu_index=1, run=lambda t, r: "gpu1"))
    cpu = q.submit(JobSpec(key="cpu", title="compile", run=lambda t, r: "compiled"))
    # The CPU job and the job for another GPU finish while GPU 0 is busy.
    assert cpu.result(2) == "compiled"
    assert other_gpu.result(2) == "gpu1"
    assert [j.state for j in g].count(JobState.RUNNING) == 1
    gate.set()
    for j in g:
        j.result(5)
    assert running["max_gpu0"] == 1
    q.shutdown()


def test_same_key_while_active_coalesces_into_one_job():
    q = JobQueue()
    gate = threading.Event()
    calls: list[str] = []
    a = q.submit(JobSpec(key="same", title="a", run=blocker(gate, calls, "a")))
    b = q.submit(JobSpec(key="same", title="b", run=blocker(gate, calls, "b")))
    assert a is b
    gate.set()
    assert a.result(5) == "a"
    assert calls == ["a"]
    # Once finished, the same key runs again (the cache, not the queue, answers repeats).
    c = q.submit(JobSpec(key="same", title="c", run=lambda t, r: "c"))
    assert c is not a and c.result(5) == "c"
    q.shutdown()


def test_a_higher_priority_duplicate_lifts_the_queued_job():
    q = JobQueue(max_parallel=1)
    gate = threading.Event()
    order: list[str] = []
    q.submit(JobSpec(key="busy", title="busy", run=blocker(gate, order, "busy")))
    bg = q.submit(JobSpec(key="x", title="x", priority=Priority.BACKGROUND, run=blocker(gate, order, "x")))
    save = q.submit(JobSpec(key="y", title="y", priority=Priority.ON_SAVE, run=blocker(gate, order, "y")))
    again = q.submit(JobSpec(key="x", title="x", priority=Priority.USER, run=blocker(gate, order, "x2")))
    assert again is bg
    gate.set()
    bg.result(5), save.result(5)
    assert order == ["busy", "x", "y"]
    q.shutdown()


def test_cancel_kills_the_worker_process_tree_and_ends_cancelled():
    q = JobQueue()
    rec = Recorder()
    q.add_listener(rec)
    pids: list[int] = []
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )

    def run(token, report):
        import subprocess

        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True)
        from stitch_lsp.jobs.process import kill_tree

        token.on_cancel(lambda: kill_tree(proc))
        pids.extend([proc.pid, int(proc.stdout.readline())])
        report(ProgressEvent("checking", "running"))
        proc.wait()
        token.raise_if_cancelled()

    job = q.submit(JobSpec(key="k", title="Verify", run=run))
    assert _wait(lambda: len(pids) == 2, 10)
    assert all(_pid_alive(p) for p in pids)
    assert q.cancel(job.id, "cancelled from the progress UI")
    with pytest.raises(JobCancelled, match="progress UI"):
        job.result(1)
    assert job.state is JobState.CANCELLED
    assert _wait(lambda: not any(_pid_alive(p) for p in pids), 5), "worker and its child must be gone"
    ended = [e for e in rec.events if e[0] == "ended"]
    assert len(ended) == 1 and ended[0][2] is JobState.CANCELLED
    q.shutdown()


def test_timeout_kills_and_says_so():
    q = JobQueue()
    job = q.submit(
        JobSpec(key="slow", title="slow", timeout_s=0.3,
                run=lambda t, r: run_cancellable([sys.executable, "-c", "import time; time.sleep(30)"], t))
    )
    t0 = time.monotonic()
    with pytest.raises(JobTimedOut, match="timed out after 0.3 s"):
        job.result(5)
    assert time.monotonic() - t0 < 3
    assert job.state is JobState.TIMED_OUT
    q.shutdown()


def test_document_change_cancels_its_jobs_only():
    q = JobQueue()
    gate = threading.Event()
    mine = q.submit(JobSpec(key="a", title="a", document_uri="file:///a.cu", run=blocker(gate)))
    keep = q.submit(JobSpec(key="b", title="b", document_uri="file:///a.cu", cancel_on_change=False, run=blocker(gate)))
    other = q.submit(JobSpec(key="c", title="c", document_uri="file:///b.cu", run=blocker(gate)))
    cancelled = q.cancel_document("file:///a.cu")
    assert cancelled == [mine]
    assert mine.state is JobState.CANCELLED and "document changed" in mine.message
    # Closing the document takes the rest of its jobs.
    assert q.cancel_document("file:///a.cu", "the document was closed", change=False) == [keep]
    gate.set()
    assert other.result(5) == ""
    q.shutdown()


def test_supersedes_cancels_the_previous_run_of_its_group():
    q = JobQueue()
    gate = threading.Event()
    first = q.submit(JobSpec(key="v1", title="v1", supersedes="verify:a.cu:k", run=blocker(gate)))
    second = q.submit(JobSpec(key="v2", title="v2", supersedes="verify:a.cu:k", run=lambda t, r: "new"))
    assert second.result(5) == "new"
    with pytest.raises(JobCancelled, match="superseded"):
        first.result(1)
    gate.set()
    q.shutdown()


def test_failure_is_the_job_result_and_the_queue_goes_on():
    q = JobQueue(max_parallel=1)

    def boom(t, r):
        raise ValueError("reference does not import")

    bad = q.submit(JobSpec(key="bad", title="bad", run=boom))
    good = q.submit(JobSpec(key="good", title="good", run=lambda t, r: 1))
    with pytest.raises(ValueError):
        bad.result(5)
    assert bad.state is JobState.FAILED and "reference does not import" in bad.message
    assert good.result(5) == 1
    q.shutdown()


def test_a_run_that_ignores_its_token_frees_the_gpu_after_the_grace_period():
    q = JobQueue(kill_grace_s=0.2)
    stuck = threading.Event()
    hog = q.submit(JobSpec(key="hog", title="hog", gpu=True, run=lambda t, r: stuck.wait(10)))
    nxt = q.submit(JobSpec(key="next", title="next", gpu=True, run=lambda t, r: "ran"))
    assert _wait(lambda: hog.state is JobState.RUNNING)
    q.cancel(hog.id)
    assert nxt.result(3) == "ran"
    stuck.set()
    q.shutdown()


def test_shutdown_cancels_everything_and_refuses_new_jobs():
    q = JobQueue(max_parallel=1)
    gate = threading.Event()
    a = q.submit(JobSpec(key="a", title="a", run=blocker(gate)))
    b = q.submit(JobSpec(key="b", title="b", run=blocker(gate)))
    q.shutdown(wait_s=2)
    for j in (a, b):
        with pytest.raises(JobCancelled, match="shutting down"):
            j.result(1)
    with pytest.raises(QueueClosed):
        q.submit(JobSpec(key="c", title="c", run=lambda t, r: None))
    assert q.active() == []


def test_run_cancellable_raises_cancelled_and_kills():
    token = CancelToken()
    threading.Timer(0.2, token.cancel, args=("stop",)).start()
    t0 = time.monotonic()
    with pytest.raises(Cancelled):
        run_cancellable([sys.executable, "-c", "import time; time.sleep(30)"], token)
    assert time.monotonic() - t0 < 5
