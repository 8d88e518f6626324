"""The CUDA analysis of each open document: derived once per text, off the event loop.

The analysis of a document's text is computed at most once, in the analysis
threads, however many ask for it: the static-rules pass, hover, code actions and
commands all await the same future (``settle``). A newer text supersedes an
older one: an analysis that has not started by then is skipped, and whoever was
waiting for it waits for the newer text's instead. A request is thus answered
from the analysis of the text it was sent against or a newer one, never dropped,
and the event loop keeps reading and answering other messages meanwhile.

``get`` is the synchronous view for code already on the loop: the last completed
analysis, which may be a few keystrokes old. Text that is not worth analysing
(binary, enormous) gives None.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import TYPE_CHECKING, Any

from attrs import define

if TYPE_CHECKING:
    from stitch_lsp.lsp.server import StitchServer

log = logging.getLogger(__name__)

# Above this size a request does not wait for the current text's analysis: it answers
# from the last one (a few keystrokes old at most, none yet for a file just opened)
# while the new one runs.
WAIT_MAX_CHARS = 300_000

# Beyond this a document is not parsed (a generated or data file opened by mistake);
# a 100,000-line kernel file is about 4 MB and is still analysed.
MAX_ANALYSIS_CHARS = 16_000_000

# Seconds the static rules may spend on one function before it gets a hint instead of findings
# (analysis.budget): no expression holds an analysis thread, or the GIL, for long.
ANALYSIS_BUDGET_S = 3.0

# How many superseded texts one request follows before it settles for the last
# completed analysis (a client that never stops typing must still get an answer).
MAX_FOLLOW = 4


def unfit_reason(text: str) -> str | None:
    """Why ``text`` is not analysed, or None when it is."""
    if "\x00" in text:
        return "it looks like a binary file"
    if len(text) > MAX_ANALYSIS_CHARS:
        return f"it is larger than {MAX_ANALYSIS_CHARS // 1_000_000} MB"
    return None


def analyze_text(text: str, path: str) -> Any:
    """``analyze_cuda(text, path)``, or None when the text is not fit for analysis."""
    if unfit_reason(text) is not None:
        return None
    try:
        from stitch_lsp.analysis.cuda_analysis import analyze_cuda
    except ModuleNotFoundError as exc:
        if exc.name != "stitch_lsp.analysis.cuda_analysis":
            raise
        log.warning("CUDA analysis is not installed; static rules are off")
        return None
    return analyze_cuda(text, path, budget_s=ANALYSIS_BUDGET_S)


class Superseded(Exception):
    """The text changed before its analysis started; the analysis was skipped."""


@define(eq=False)
class Analysed:
    """One text of a document and its analysis (None: not fit for analysis)."""

    text: str
    version: int | None
    analysis: Any
    serial: int  # order in which analyses were started: a later one is of a newer text


@define(eq=False)
class _Running:
    text: str
    version: int | None
    serial: int
    future: "asyncio.Future[Analysed]"


class CudaDocuments:
    def __init__(self, server: "StitchServer") -> None:
        self._server = server
        self._done: dict[str, Analysed] = {}
        self._running: dict[str, _Running] = {}
        self._serials = itertools.count(1)

    # -- the synchronous view --------------------------------------------------------------------
    def cached(self, uri: str, version: int | None) -> tuple[bool, Any]:
        """(True, analysis) when the last completed analysis is of ``version``."""
        entry = self._done.get(uri)
        if entry is not None and entry.version == version:
            return True, entry.analysis
        return False, None

    def get(self, uri: str) -> Any:
        """The last completed analysis of the open document (None if not open / not fit / none yet).

        Never analyses: it runs on the event loop. Callers that need the current text's
        analysis ``await settle(uri)`` (or ``current(uri)``) first.
        """
        if self._server.document(uri) is None or not self._server.is_cuda(uri):
            return None
        entry = self._done.get(uri)
        return entry.analysis if entry is not None else None

    def forget(self, uri: str) -> None:
        self._done.pop(uri, None)
        running = self._running.pop(uri, None)
        if running is not None:
            running.future.cancel()  # only if it has not started; else it finishes and is dropped

    # -- the current text ------------------------------------------------------------------------
    async def current(self, uri: str) -> Any:
        """The analysis for a request on the document (see ``settle``), or None."""
        entry = await self.settle(uri)
        return entry.analysis if entry is not None else None

    async def settle(self, uri: str, *, exact: bool = False) -> Analysed | None:
        """The analysis of the document's text as it is now, computed off the loop if needed.

        If a newer text arrives before that analysis starts, the newer text's is awaited
        instead. Unless ``exact``, a big document (over ``WAIT_MAX_CHARS``) answers at once
        with its last analysis (None before the first) while the current one runs. None
        when the document is not an open CUDA file.
        """
        server = self._server
        for _ in range(MAX_FOLLOW):
            doc = server.document(uri)
            if doc is None or not server.is_cuda(uri):
                return None
            text = doc.source
            done = self._done.get(uri)
            if done is not None and done.text is text:
                return done
            running = self._start(uri, text, doc.version)
            if not exact and len(text) > WAIT_MAX_CHARS:
                return done  # possibly None: the first analysis of a huge file takes seconds
            try:
                # Shielded: a request cancelled by its client must not cancel work others await.
                return await asyncio.shield(running.future)
            except Superseded:
                continue
            except asyncio.CancelledError:
                if running.future.cancelled() and not _being_cancelled():
                    continue  # the document was closed or reopened meanwhile
                raise
            except Exception:
                log.exception("CUDA analysis of %s failed", uri)
                break
        return self._done.get(uri)

    def _start(self, uri: str, text: str, version: int | None) -> _Running:
        running = self._running.get(uri)
        if running is not None and running.text is text:
            return running
        loop = asyncio.get_running_loop()
        running = _Running(text, version, next(self._serials), loop.create_future())
        self._running[uri] = running
        running.future.add_done_callback(lambda f: self._finished(uri, running))
        # Handed to a thread on the loop's next turn: the edits of one burst of messages are
        # analysed once, for the last of them.
        loop.call_soon(self._submit, uri, running)
        return running

    def _submit(self, uri: str, running: _Running) -> None:
        future = running.future
        if future.done():
            return  # the document was closed
        if self._running.get(uri) is not running:
            future.set_exception(Superseded(uri))
            return
        path = self._server.path_of(uri)

        def job() -> Analysed:
            # In an analysis thread. A text superseded before its turn came is not analysed.
            if self._running.get(uri) is not running:
                raise Superseded(uri)
            return Analysed(running.text, running.version, analyze_text(running.text, path), running.serial)

        def relay(inner: "asyncio.Future[Analysed]") -> None:
            if future.done():
                return
            if inner.cancelled():
                future.cancel()
            elif inner.exception() is not None:
                future.set_exception(inner.exception())  # type: ignore[arg-type]
            else:
                future.set_result(inner.result())

        try:
            inner = asyncio.get_running_loop().run_in_executor(self._server.analysis_pool, job)
        except RuntimeError as exc:  # the pool is shut down: the server is going away
            future.set_exception(exc)
            return
        inner.add_done_callback(relay)

    def _finished(self, uri: str, running: _Running) -> None:
        if self._running.get(uri) is running:
            del self._running[uri]
        future = running.future
        if future.cancelled() or future.exception() is not None:
            return
        entry = future.result()
        done = self._done.get(uri)
        # Keep the newest text's analysis; a document closed meanwhile keeps nothing.
        if self._server.document(uri) is not None and (done is None or done.serial < entry.serial):
            self._done[uri] = entry


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
