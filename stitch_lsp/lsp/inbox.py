"""Messages read but not yet handled, and which of them may go first.

The framing reads every frame that has arrived before it handles the next one, so
a request that comes in behind a burst of other traffic (an editor replaying
edits, a tool opening many files, a client gone wrong) is seen at once. A request
that only reads (hover, inlay hints, code actions, pulled diagnostics, ...) goes
ahead of the queued messages when none of them can change its answer: none is
about its document (open, change, save, close) and none changes what every answer
depends on (settings, trust, commands, the client's answers to the server's own
requests, anything unknown). The LSP allows this: a server "may decide to use a
parallel execution strategy and may wish to return responses in a different order
than the requests were received ... as long as this reordering doesn't affect the
correctness of the responses". Every other message keeps its order.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from typing import Any
from urllib.parse import unquote

from attrs import define

# Requests that only read the server's state. Anything else is ordered as it came.
READS = frozenset({
    "textDocument/hover", "textDocument/inlayHint", "textDocument/codeAction", "textDocument/diagnostic",
    "textDocument/codeLens", "textDocument/documentSymbol", "textDocument/completion",
    "textDocument/signatureHelp", "textDocument/definition", "textDocument/references",
    "textDocument/documentHighlight", "textDocument/foldingRange", "stitch/serverInfo", "stitch/llmStatus",
})
# Notifications that change one document; a read about another document may pass them.
DOCUMENT_CHANGES = frozenset({
    "textDocument/didOpen", "textDocument/didChange", "textDocument/didSave", "textDocument/didClose",
    "textDocument/willSave",
})
# Notifications that change no answer.
NEUTRAL = frozenset({"$/cancelRequest", "$/setTrace"})

# Messages read ahead of the one being handled, at most: beyond this the reading waits
# (the pipe then holds the client back, as it would without reading ahead).
LIMIT = 4096


@define(slots=True)
class Queued:
    raw: dict[str, Any]
    read_at: float  # time.monotonic() when its bytes reached the event loop
    kind: str  # "read" | "document" | "neutral" | "global"
    document: str | None
    ahead: bool = False  # queued ahead of messages that came before it


def _document(raw: dict[str, Any]) -> str | None:
    params = raw.get("params")
    text_document = params.get("textDocument") if isinstance(params, dict) else None
    uri = text_document.get("uri") if isinstance(text_document, dict) else None
    return unquote(uri) if isinstance(uri, str) else None  # pygls keys documents by the unquoted URI


def classify(raw: dict[str, Any]) -> tuple[str, str | None]:
    """(kind, document) of a message: what it may pass, and what may pass it."""
    method = raw.get("method")
    if not isinstance(method, str):
        return "global", None  # the client's answer to one of our requests (settings, ...)
    if "id" in raw:
        return ("read", _document(raw)) if method in READS else ("global", None)
    if method in NEUTRAL:
        return "neutral", None
    if method in DOCUMENT_CHANGES:
        document = _document(raw)
        return ("document", document) if document is not None else ("global", None)
    return "global", None


class Inbox:
    def __init__(self, limit: int = LIMIT) -> None:
        self._ahead: deque[Queued] = deque()  # reads that nothing queued can affect
        self._in_order: deque[Queued] = deque()
        self._document_changes: Counter[str] = Counter()  # queued in _in_order, per document
        self._global_changes = 0
        self._limit = limit
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()

    def __len__(self) -> int:
        return len(self._ahead) + len(self._in_order)

    def put(self, raw: dict[str, Any], read_at: float) -> None:
        kind, document = classify(raw)
        item = Queued(raw, read_at, kind, document)
        if (kind == "read" and self._in_order and not self._global_changes
                and (document is None or not self._document_changes[document])):
            item.ahead = True
            self._ahead.append(item)
        else:
            self._in_order.append(item)
            if kind == "document":
                self._document_changes[document] += 1  # type: ignore[index]
            elif kind == "global":
                self._global_changes += 1
        self._arrived.set()

    def take(self) -> Queued | None:
        """The next message to handle, or None when none is queued."""
        if self._ahead:
            item = self._ahead.popleft()
        elif self._in_order:
            item = self._in_order.popleft()
            if item.kind == "document":
                left = self._document_changes[item.document] - 1  # type: ignore[index]
                if left:
                    self._document_changes[item.document] = left  # type: ignore[index]
                else:
                    del self._document_changes[item.document]  # type: ignore[arg-type]
            elif item.kind == "global":
                self._global_changes -= 1
        else:
            return None
        self._room.set()
        return item

    async def arrival(self) -> None:
        """Return once a message is queued (at once if one is), or ``wake`` was called."""
        if not len(self):
            self._arrived.clear()
            await self._arrived.wait()

    def wake(self) -> None:
        """Wake ``arrival`` without a message (the reading ended)."""
        self._arrived.set()

    async def room(self) -> None:
        """Return once fewer than ``limit`` messages are queued."""
        while len(self) >= self._limit:
            self._room.clear()
            await self._room.wait()
