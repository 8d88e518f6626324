"""Diagnostics from every source, merged per document, pushed or pulled.

Each feature owns a *source* ("rules", "nvcc", "verify", "fuse", ...) and replaces
its own findings with ``DiagnosticStore.set``; the store keeps them apart and
shows their union. Clients with pull diagnostics (``textDocument/diagnostic``) ask;
the others get ``publishDiagnostics``. Pull clients are told to ask again
(``workspace/diagnostic/refresh``) when a source changes outside a request.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from stitch_lsp.findings import Finding

if TYPE_CHECKING:
    from stitch_lsp.lsp.server import StitchServer

log = logging.getLogger(__name__)

# A pull request waits at most this long for static analysis already under way.
PULL_WAIT_S = 2.0


class DiagnosticStore:
    def __init__(self, server: "StitchServer") -> None:
        self._server = server
        self._by_uri: dict[str, dict[str, list[Finding]]] = {}
        self._result_ids: dict[str, int] = {}
        self._counter = 0
        self._pending: dict[str, set[asyncio.Future]] = {}
        self._refresh_scheduled = False

    # -- what features call -------------------------------------------------------------
    def set(self, uri: str, source: str, findings: list[Finding] | tuple[Finding, ...]) -> None:
        """Replace ``source``'s findings for ``uri`` and show the merged set."""
        sources = self._by_uri.setdefault(uri, {})
        findings = list(findings)
        if not findings and not sources.get(source):
            sources.pop(source, None)
            return  # nothing was shown, nothing to clear
        if findings:
            sources[source] = findings
        else:
            sources.pop(source, None)
        self._counter += 1
        self._result_ids[uri] = self._counter
        self._changed(uri)

    def clear(self, uri: str, source: str | None = None) -> None:
        if source is None:
            had = bool(self._by_uri.pop(uri, None))
            self._result_ids.pop(uri, None)
            if had:
                self._changed(uri)
        else:
            self.set(uri, source, [])

    def get(self, uri: str, source: str | None = None) -> list[Finding]:
        sources = self._by_uri.get(uri, {})
        if source is not None:
            return list(sources.get(source, ()))
        out: list[Finding] = []
        for findings in sources.values():
            out.extend(findings)
        return out

    def sources(self, uri: str) -> list[str]:
        return list(self._by_uri.get(uri, {}))

    def track(self, uri: str, future: asyncio.Future) -> None:
        """Register work under way that will ``set`` findings for ``uri``: pulls wait for it."""
        pending = self._pending.setdefault(uri, set())
        pending.add(future)
        future.add_done_callback(lambda f: pending.discard(f))

    # -- protocol ------------------------------------------------------------------------
    @property
    def pull_mode(self) -> bool:
        return self._server.client_supports("text_document.diagnostic")

    def _changed(self, uri: str) -> None:
        if self.pull_mode:
            self._schedule_refresh()
        else:
            self.publish(uri)

    def publish(self, uri: str) -> None:
        server = self._server
        doc = server.document(uri)
        convert = server.converter(uri)
        diagnostics = [convert.diagnostic(f, uri) for f in self.get(uri)]
        server.text_document_publish_diagnostics(
            lsp.PublishDiagnosticsParams(
                uri=uri, diagnostics=diagnostics, version=doc.version if doc is not None else None
            )
        )

    def _schedule_refresh(self) -> None:
        if not self._server.client_supports("workspace.diagnostics.refresh_support"):
            return
        if self._refresh_scheduled:
            return
        self._refresh_scheduled = True

        def send() -> None:
            self._refresh_scheduled = False
            try:
                self._server.workspace_diagnostic_refresh(None)
            except Exception:
                log.exception("workspace/diagnostic/refresh failed")

        # Coalesce a burst of sets (several sources at once) into one refresh.
        self._server.call_soon(send, delay=0.02)

    async def pull(self, params: lsp.DocumentDiagnosticParams) -> lsp.DocumentDiagnosticReport:
        uri = params.text_document.uri
        # Work under way may be replaced (a newer edit, new settings): wait for whatever is
        # pending now, until nothing is or the time is up.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PULL_WAIT_S
        while pending := [f for f in self._pending.get(uri, ()) if not f.done()]:
            left = deadline - loop.time()
            if left <= 0:
                break
            await asyncio.wait(pending, timeout=left)
        result_id = str(self._result_ids.get(uri, 0))
        if params.previous_result_id is not None and params.previous_result_id == result_id:
            return lsp.RelatedUnchangedDocumentDiagnosticReport(result_id=result_id)
        convert = self._server.converter(uri)
        items = [convert.diagnostic(f, uri) for f in self.get(uri)]
        return lsp.RelatedFullDocumentDiagnosticReport(items=items, result_id=result_id)
