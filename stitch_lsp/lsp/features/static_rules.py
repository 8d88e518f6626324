"""Static rubric rules on open and change, debounced, off the event loop.

A keystroke restarts a short quiet period (``diagnosticsDebounceMs``); then the
document's text is analysed in a worker thread (``CudaDocuments.settle``: the one
analysis of that text, shared with hover and code actions) and the findings are
published only if the document has not changed meanwhile (stale results are dropped).
"""

from __future__ import annotations

import asyncio
import logging
import time

from lsprotocol import types as lsp

from stitch_lsp.lsp.cuda_documents import unfit_reason
from stitch_lsp.lsp.server import StitchServer
from stitch_lsp.verify.cuda_check import parse_notice

log = logging.getLogger(__name__)

SOURCE = "rules"


class StaticRules:
    def __init__(self, server: StitchServer) -> None:
        self.server = server
        self._tasks: dict[str, asyncio.Task] = {}

    def schedule(self, uri: str) -> None:
        server = self.server
        if not server.is_cuda(uri):
            return
        if not server.settings.on_save.rules:
            server.diagnostics.clear(uri, SOURCE)
            return
        doc = server.document(uri)
        if doc is None:
            return
        previous = self._tasks.pop(uri, None)
        if previous is not None and not previous.done():
            previous.cancel()
        task = server.spawn(self._run(uri, doc.version), name=f"rules {uri}")
        self._tasks[uri] = task
        server.diagnostics.track(uri, task)

    async def _run(self, uri: str, version: int | None) -> None:
        server = self.server
        await server.wait_ready()
        delay = max(0, server.settings.diagnostics_debounce_ms) / 1000.0
        if delay:
            await asyncio.sleep(delay)
        doc = server.document(uri)
        if doc is None or doc.version != version:
            return
        text = doc.source
        reason = unfit_reason(text)
        if reason is not None:
            server.show_message_once(
                f"unfit:{uri}",
                f"Stitch does not analyse {doc.filename}: {reason}.",
                lsp.MessageType.Info,
            )
            server.diagnostics.set(uri, SOURCE, [])
            return
        path = server.path_of(uri)
        started = time.perf_counter()
        # The same analysis hover and code actions await: computed once per text, off the loop.
        entry = await server.cuda.settle(uri, exact=True)
        doc = server.document(uri)
        if entry is None or doc is None or doc.version != version or entry.text is not doc.source:
            return  # the text changed while we analysed (a newer run is on its way), or it failed (logged)
        analysis = entry.analysis
        if analysis is None:
            server.diagnostics.set(uri, SOURCE, [])
            return
        findings = list(analysis.findings)
        if not analysis.parse_ok:
            findings += parse_notice(path, tuple(analysis.syntax_errors))
        analysed = time.perf_counter()
        server.diagnostics.set(uri, SOURCE, findings)
        published = time.perf_counter()
        server.emit("analysis", uri, analysis)
        # Read by bench/lsp_latency.py to split latency into the server's work and the rest.
        log.debug(
            "static rules: %s v%s analysed in %.1f ms, published in %.1f ms, hooks %.1f ms",
            doc.filename, version, (analysed - started) * 1e3, (published - analysed) * 1e3,
            (time.perf_counter() - published) * 1e3,
        )

    def close(self, uri: str) -> None:
        task = self._tasks.pop(uri, None)
        if task is not None:
            task.cancel()
        self.server.cuda.forget(uri)
        try:
            from stitch_lsp.analysis.cuda_analysis import forget

            forget(self.server.path_of(uri))  # the incremental parse state of a closed file
        except ImportError:
            pass

    def rerun_all(self, _settings: object = None) -> None:
        for uri in list(self.server.workspace.text_documents):
            self.schedule(uri)


def register(server: StitchServer) -> None:
    rules = StaticRules(server)
    server.on_open(rules.schedule)
    server.on_change(rules.schedule)
    server.on_close(rules.close)
    server.on_settings_changed(rules.rerun_all)
