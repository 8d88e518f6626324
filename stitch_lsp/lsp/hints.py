"""Inlay hints from every source, merged per document.

Features replace their own hints with ``HintStore.set(uri, source, hints)``; the
``textDocument/inlayHint`` handler answers with every source's hints in the asked
range. Clients that support it are told to ask again when a source changes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lsprotocol import types as lsp

from stitch_lsp.findings import Hint
from stitch_lsp.lsp.refresh import CoalescedRefresh

if TYPE_CHECKING:
    from stitch_lsp.lsp.server import StitchServer

log = logging.getLogger(__name__)


class HintStore:
    def __init__(self, server: "StitchServer") -> None:
        self._server = server
        self._by_uri: dict[str, dict[str, list[Hint]]] = {}
        self._refresh = CoalescedRefresh(
            server, "workspace.inlay_hint.refresh_support", lambda: server.workspace_inlay_hint_refresh(None), "workspace/inlayHint/refresh"
        )

    def set(self, uri: str, source: str, hints: list[Hint] | tuple[Hint, ...]) -> None:
        """Replace ``source``'s hints for ``uri`` (from any thread)."""
        if self._server.off_loop():
            hints = list(hints)
            self._server.call_soon(lambda: self.set(uri, source, hints))
            return
        sources = self._by_uri.setdefault(uri, {})
        hints = list(hints)
        if not hints and not sources.get(source):
            return
        if hints:
            sources[source] = hints
        else:
            sources.pop(source, None)
        self._refresh.schedule()

    def clear(self, uri: str, source: str | None = None) -> None:
        if source is None:
            if self._by_uri.pop(uri, None):
                self._refresh.schedule()
        else:
            self.set(uri, source, [])

    def get(self, uri: str, source: str | None = None) -> list[Hint]:
        sources = self._by_uri.get(uri, {})
        if source is not None:
            return list(sources.get(source, ()))
        out: list[Hint] = []
        for hints in sources.values():
            out.extend(hints)
        return out

    def answer(self, params: lsp.InlayHintParams) -> list[lsp.InlayHint]:
        uri = params.text_document.uri
        hints = self.get(uri)
        if not hints:
            return []
        convert = self._server.converter(uri)
        first, last = params.range.start.line, params.range.end.line
        out = []
        for hint in sorted(hints, key=lambda h: (h.position.line, h.position.character)):
            if first <= hint.position.line <= last:
                out.append(convert.inlay_hint(hint))
        return out
