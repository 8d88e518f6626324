"""Jobs → LSP work-done progress, and the progress UI's cancel button → the job.

``job_queue(server)`` is the server's one ``JobQueue`` (created on first use, so
features can ask for it in any order). Every job gets a progress token
``stitch/<job id>``: ``begin`` with its title when it starts, ``report`` with
"stage: message" and a percentage where one is known, ``end`` with how it ended
("done", "cancelled: the document changed", "timed out after 300 s ...").
``window/workDoneProgress/cancel`` on that token cancels the job, which kills
its worker process tree. Edits and closes of a job's document, and shutdown,
cancel its jobs too.

Job events arrive on worker threads; everything sent to the client is posted to
the server's loop.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Callable

from lsprotocol import types as lsp

from stitch_lsp.cancellation import ProgressEvent
from stitch_lsp.jobs import Job, JobListener, JobQueue, JobState

if TYPE_CHECKING:
    from stitch_lsp.lsp.server import StitchServer

log = logging.getLogger(__name__)

CANCELLED_FROM_UI = "cancelled from the progress UI"


def end_message(job: Job) -> str:
    if job.state is JobState.DONE:
        return "done"
    if job.state is JobState.CANCELLED:
        return f"cancelled: {job.message}" if job.message and job.message != "cancelled" else "cancelled"
    if job.state is JobState.TIMED_OUT:
        return job.message or "timed out"
    return f"failed: {job.message}" if job.message else "failed"


def event_message(event: ProgressEvent) -> str:
    if event.message and event.stage:
        return f"{event.stage}: {event.message}"
    return event.message or event.stage


class _Token:
    """One job's progress token and what has been sent on it."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.token = f"stitch/{job.id}"
        self.created = False
        self.began = False
        self.ended = False
        self.pending: list[Callable[[], None]] = []  # sends waiting for create's answer
        self.percent = 0


class ProgressBridge(JobListener):
    def __init__(self, server: "StitchServer", queue: JobQueue) -> None:
        self.server = server
        self.queue = queue
        self._tokens: dict[str, _Token] = {}  # job id -> token (touched on the loop only)

    # -- job events (any thread) ---------------------------------------------------------
    def job_started(self, job: Job) -> None:
        self.server.call_soon(lambda: self._start(job))

    def job_progress(self, job: Job, event: ProgressEvent) -> None:
        self.server.call_soon(lambda: self._report(job, event))

    def job_ended(self, job: Job) -> None:
        self.server.call_soon(lambda: self._end(job))

    # -- on the loop ---------------------------------------------------------------------
    def _supported(self) -> bool:
        return self.server.client_supports("window.work_done_progress")

    def _start(self, job: Job) -> None:
        if job.id in self._tokens or not self._supported():
            return
        tok = _Token(job)
        self._tokens[job.id] = tok
        progress = self.server.work_done_progress

        def created(_: Any = None) -> None:
            tok.created = True
            future = progress.tokens.get(tok.token)
            if future is not None:
                future.add_done_callback(lambda f: self._cancelled_by_client(tok, f))
            # The client may answer create only after the job moved on, or ended: the stages
            # it missed are replayed in order, and the end comes last.
            pending, tok.pending = tok.pending, []
            self._send_begin(tok, replaying=bool(pending))
            for send in pending:
                send()
            if tok.job.done:
                self._send_end(tok)

        try:
            future = progress.create(tok.token)
        except Exception:
            log.exception("window/workDoneProgress/create failed")
            return

        def on_answer(f: Any) -> None:
            # The pygls callback runs only on success; an error answer means no progress UI.
            if f.cancelled() or f.exception() is not None:
                log.info("client refused progress token %s", tok.token)
                self._tokens.pop(job.id, None)
                return
            self.server.call_soon(created)

        future.add_done_callback(on_answer)

    def _send_begin(self, tok: _Token, replaying: bool = False) -> None:
        job = tok.job
        event = None if replaying else job.last_event
        self.server.work_done_progress.begin(
            tok.token,
            lsp.WorkDoneProgressBegin(
                title=job.title,
                cancellable=job.spec.cancellable,
                message=event_message(event) if event else "started",
                percentage=0,
            ),
        )
        tok.began = True

    def _report(self, job: Job, event: ProgressEvent) -> None:
        tok = self._tokens.get(job.id)
        if tok is None or tok.ended:
            return
        if not tok.created:
            tok.pending.append(lambda: self._report(job, event))
            return
        if event.percent is not None:
            # Percentages never go backwards in the UI.
            tok.percent = max(tok.percent, min(100, max(0, int(event.percent))))
        self.server.work_done_progress.report(
            tok.token,
            lsp.WorkDoneProgressReport(
                message=event_message(event),
                percentage=tok.percent,
                cancellable=job.spec.cancellable,
            ),
        )

    def _end(self, job: Job) -> None:
        tok = self._tokens.get(job.id)
        if tok is None:
            return
        if not tok.created:
            tok.pending.append(lambda: self._end(job))
            return
        self._send_end(tok)

    def _send_end(self, tok: _Token) -> None:
        if tok.ended or not tok.began:
            return
        tok.ended = True
        self.server.work_done_progress.end(tok.token, lsp.WorkDoneProgressEnd(message=end_message(tok.job)))
        self._tokens.pop(tok.job.id, None)
        # pygls keeps a future per token forever; this one is finished.
        self.server.work_done_progress.tokens.pop(tok.token, None)

    def _cancelled_by_client(self, tok: _Token, future: Any) -> None:
        if future.cancelled() and not tok.ended:
            log.info("progress UI cancelled %s (%s)", tok.job.id, tok.job.title)
            self.queue.cancel(tok.job.id, CANCELLED_FROM_UI)


def job_queue(server: "StitchServer") -> JobQueue:
    """The server's job queue; the first call creates it and wires progress,
    document edits / closes and shutdown to it."""
    queue = getattr(server, "_stitch_job_queue", None)
    if queue is not None:
        return queue
    queue = JobQueue(max_parallel=max(2, min(8, (os.cpu_count() or 2))))
    server._stitch_job_queue = queue  # type: ignore[attr-defined]
    queue.add_listener(ProgressBridge(server, queue))
    server.on_change(lambda uri: queue.cancel_document(uri, "the document changed"))
    server.on_close(lambda uri: queue.cancel_document(uri, "the document was closed", change=False))
    server.on_shutdown(lambda: queue.shutdown(wait_s=3.0))
    return queue
