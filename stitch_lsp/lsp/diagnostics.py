"""Diagnostics from every source, merged per document, pushed or pulled.

Each feature owns a *source* ("rules", "nvcc", "verify", "fuse", ...) and replaces
its own findings with ``DiagnosticStore.set``; the store keeps them apart and
shows their union. Clients with pull diagnostics (``textDocument/diagnostic``) ask;
the others get ``publishDiagnostics``. Pull clients are told to ask again
(``workspace/diagnostic/refresh``) when a source changes outside a request.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from stitch_lsp.findings import Finding
from stitch_lsp.lsp.refresh import CoalescedRefresh

if TYPE_CHECKING:
    from stitch_lsp.lsp.server import StitchServer

log = logging.getLogger(__name__)

# A pull request waits at most this long for static analysis already under way.
PULL_WAIT_S = 2.0


def _line(lines, n: int) -> str | None:
    if lines is None or n >= len(lines):
        return None
    return lines[n]


class DiagnosticStore:
    def __init__(self, server: "StitchServer") -> None:
        self._server = server
        self._by_uri: dict[str, dict[str, list[Finding]]] = {}
        self._result_ids: dict[str, int] = {}
        self._counter = 0
        self._pending: dict[str, set[asyncio.Future]] = {}
        self._refresh = CoalescedRefresh(
            server, "workspace.diagnostics.refresh_support", lambda: server.workspace_diagnostic_refresh(None), "workspace/diagnostic/refresh"
        )
        self._cache: dict[str, dict[int, tuple[Finding, str | None, lsp.Diagnostic, str]]] = {}
        self._published: dict[str, list[str]] = {}

    # -- what features call -------------------------------------------------------------
    def set(self, uri: str, source: str, findings: list[Finding] | tuple[Finding, ...]) -> None:
        """Replace ``source``'s findings for ``uri`` and show the merged set (from any thread)."""
        if self._server.off_loop():
            findings = list(findings)
            self._server.call_soon(lambda: self.set(uri, source, findings))
            return
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
            self._cache.pop(uri, None)
            self._published.pop(uri, None)
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
            self._refresh.schedule()
        else:
            self.publish(uri)

    def _converted(self, uri: str, findings: list[Finding]) -> list[tuple[lsp.Diagnostic, str]]:
        """Each finding as an lsp.Diagnostic and its JSON, reusing last time's for unchanged ones.

        A keystroke re-analyses the file, but the analysis hands back the very same
        Finding objects for functions the edit did not touch: converting and serialising
        them again would be most of the latency on a big file. Entries are keyed by
        identity (hashing a thousand nested Findings costs more than converting a few)
        and checked against the text of the finding's line, which the column conversion
        depends on (non-ASCII lines in UTF-16).
        """
        convert = self._server.converter(uri)
        lines = convert.lines
        previous = self._cache.get(uri, {})
        current: dict[int, tuple[Finding, str | None, lsp.Diagnostic, str]] = {}
        out = []
        unstructure = self._server.protocol._converter.unstructure
        for f in findings:
            line_text = _line(lines, f.range.start.line)
            hit = previous.get(id(f))
            if hit is None or hit[0] is not f or hit[1] != line_text:
                diagnostic = convert.diagnostic(f, uri)
                hit = (f, line_text, diagnostic, json.dumps(unstructure(diagnostic), separators=(",", ":")))
            current[id(f)] = hit
            out.append((hit[2], hit[3]))
        self._cache[uri] = current
        return out

    def publish(self, uri: str) -> None:
        server = self._server
        doc = server.document(uri)
        version = doc.version if doc is not None else None
        converted = self._converted(uri, self.get(uri))
        last = self._published.get(uri)
        if last is not None and len(last) == len(converted) and all(a is b for a, (_, b) in zip(last, converted)):
            return  # the editor already shows exactly these (an edit that moved no finding)
        self._published[uri] = [j for _, j in converted]
        writer = getattr(server.protocol, "writer", None)
        if writer is not None:
            # The message is assembled from each diagnostic's cached JSON: serialising a
            # thousand diagnostics again on every keystroke would dominate the latency.
            head = json.dumps({"jsonrpc": "2.0", "method": lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS})[:-1]
            params = json.dumps({"uri": uri, "version": version})[:-1]
            body = f'{head},"params":{params},"diagnostics":[{",".join(j for _, j in converted)}]}}}}'
            data = body.encode("utf-8")
            if getattr(server.protocol, "_include_headers", True):
                data = (
                    f"Content-Length: {len(data)}\r\n"
                    f"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n".encode("ascii") + data
                )
            try:
                result = writer.write(data)
                if inspect.isawaitable(result):
                    asyncio.ensure_future(result)
                return
            except Exception:
                log.exception("publishing diagnostics as raw JSON failed; sending them typed")
        server.text_document_publish_diagnostics(
            lsp.PublishDiagnosticsParams(uri=uri, diagnostics=[d for d, _ in converted], version=version)
        )

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
        items = [d for d, _ in self._converted(uri, self.get(uri))]
        return lsp.RelatedFullDocumentDiagnosticReport(items=items, result_id=result_id)
