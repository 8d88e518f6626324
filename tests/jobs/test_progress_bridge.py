"""The job → work-done progress bridge, against a recording stand-in for the
server's progress API (the end-to-end tests drive the real server)."""

from __future__ import annotations

import concurrent.futures
import threading
import time

from stitch_lsp.cancellation import ProgressEvent
from stitch_lsp.jobs import JobCancelled, JobQueue, JobSpec
from stitch_lsp.lsp.progress import CANCELLED_FROM_UI, ProgressBridge


class RecordingProgress:
    def __init__(self):
        self.tokens: dict = {}
        self.sent: list[tuple[str, str, object]] = []
        self.lock = threading.Lock()

    def create(self, token):
        fut = concurrent.futures.Future()
        self.tokens[token] = concurrent.futures.Future()
        fut.set_result(None)
        return fut

    def begin(self, token, value):
        with self.lock:
            self.sent.append(("begin", token, value))

    def report(self, token, value):
        with self.lock:
            self.sent.append(("report", token, value))

    def end(self, token, value):
        with self.lock:
            self.sent.append(("end", token, value))


class RecordingServer:
    def __init__(self):
        self.work_done_progress = RecordingProgress()
        self.lock = threading.RLock()

    def call_soon(self, fn, delay=0.0):
        with self.lock:  # one "loop": calls never interleave
            fn()

    def client_supports(self, dotted):
        return dotted == "window.work_done_progress"


def _wait(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return False


def test_begin_report_end_with_stages_and_percentages():
    server = RecordingServer()
    q = JobQueue()
    q.add_listener(ProgressBridge(server, q))
    go = threading.Event()

    def run(token, report):
        go.wait(2)
        report(ProgressEvent("compiling", "nvcc softmax.cu", 20))
        report(ProgressEvent("checking", "trial 3 of 5", 10))  # never shown going backwards
        report(ProgressEvent("timing", "", 70))
        return "ok"

    job = q.submit(JobSpec(key="k", title="Verify softmax_kernel", run=run))
    go.set()
    job.result(5)
    sent = server.work_done_progress.sent
    assert _wait(lambda: any(s[0] == "end" for s in sent))
    kinds = [s[0] for s in sent]
    assert kinds == ["begin", "report", "report", "report", "end"]
    assert sent[0][2].title == "Verify softmax_kernel" and sent[0][2].cancellable
    assert [s[2].percentage for s in sent[1:4]] == [20, 20, 70]
    assert sent[1][2].message == "compiling: nvcc softmax.cu"
    assert sent[3][2].message == "timing"
    assert sent[-1][2].message == "done"
    assert {s[1] for s in sent} == {f"stitch/{job.id}"}
    q.shutdown()


def test_cancel_from_the_progress_ui_cancels_the_job_and_ends_cancelled():
    server = RecordingServer()
    q = JobQueue()
    q.add_listener(ProgressBridge(server, q))

    def run(token, report):
        report(ProgressEvent("timing", "", 50))
        token.wait(10)
        token.raise_if_cancelled()

    job = q.submit(JobSpec(key="k", title="Profile", run=run))
    progress = server.work_done_progress
    assert _wait(lambda: any(s[0] == "report" for s in progress.sent))
    progress.tokens[f"stitch/{job.id}"].cancel()  # what pygls does on window/workDoneProgress/cancel
    try:
        job.result(5)
    except JobCancelled as exc:
        assert CANCELLED_FROM_UI in str(exc)
    else:
        raise AssertionError("job was not cancelled")
    assert _wait(lambda: progress.sent[-1][0] == "end")
    assert progress.sent[-1][2].message == f"cancelled: {CANCELLED_FROM_UI}"
    assert f"stitch/{job.id}" not in progress.tokens
    q.shutdown()


class LateAnsweringProgress(RecordingProgress):
    """A client that answers window/workDoneProgress/create only when told to."""

    def __init__(self):
        super().__init__()
        self.answers: list[concurrent.futures.Future] = []

    def create(self, token):
        fut = concurrent.futures.Future()
        self.tokens[token] = concurrent.futures.Future()
        self.answers.append(fut)
        return fut


def test_stages_reported_before_the_client_answers_create_are_shown_in_order():
    server = RecordingServer()
    server.work_done_progress = LateAnsweringProgress()
    q = JobQueue()
    q.add_listener(ProgressBridge(server, q))

    def run(token, report):
        report(ProgressEvent("planning", "tracing the selection", 5))
        report(ProgressEvent("compiling", "starting the worker", 40))
        return "ok"

    job = q.submit(JobSpec(key="k", title="Fuse 3 ops", run=run))
    job.result(5)
    progress = server.work_done_progress
    assert _wait(lambda: progress.answers)
    time.sleep(0.1)  # the job's end reaches the bridge before the client's answer does
    assert progress.sent == []
    progress.answers[0].set_result(None)
    sent = progress.sent
    assert [s[0] for s in sent] == ["begin", "report", "report", "end"]
    assert [s[2].message for s in sent] == ["started", "planning: tracing the selection",
                                            "compiling: starting the worker", "done"]
