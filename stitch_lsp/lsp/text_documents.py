"""Open documents that stay fast when they are big.

pygls' TextDocument rebuilds the whole text line by line on every incremental
change and splits it again on every ``lines`` access; on a 10,000-line file that
is a large share of a keystroke's budget. This subclass applies a change by
offsets (one slice) and splits the text once per version. Lines end where the LSP
says they do (``\\n``, ``\\r\\n``, ``\\r``), not at Python's other separators
(form feed, ``\\u2028``, ...), so positions agree with the editor's.
"""

from __future__ import annotations

import re
import logging
from typing import Sequence
from urllib.parse import unquote

from lsprotocol import types
from pygls.workspace import TextDocument, Workspace

log = logging.getLogger(__name__)

_LSP_LINE_END = re.compile(r"\r\n|\r|\n")
_OTHER_SEPARATORS = re.compile("[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def split_lines(text: str) -> list[str]:
    """Lines with their endings kept, split at LSP line endings only."""
    if not _OTHER_SEPARATORS.search(text):
        return text.splitlines(True)
    out, start = [], 0
    for m in _LSP_LINE_END.finditer(text):
        out.append(text[start : m.end()])
        start = m.end()
    if start < len(text):
        out.append(text[start:])
    return out


class StitchTextDocument(TextDocument):
    _split: tuple[str, list[str]] | None = None

    @property
    def lines(self) -> Sequence[str]:
        source = self.source
        cached = self._split
        if cached is not None and cached[0] is source:
            return cached[1]
        lines = split_lines(source)
        self._split = (source, lines)
        return lines

    def _offset(self, lines: Sequence[str], line: int, character: int) -> int:
        if line >= len(lines):
            return sum(map(len, lines))
        return sum(map(len, lines[:line])) + character

    def _apply_incremental_change(self, change: types.TextDocumentContentChangePartial) -> None:
        source = self.source
        lines = self.lines
        rng = self.position_codec.range_from_client_units(lines, change.range)
        start = self._offset(lines, rng.start.line, rng.start.character)
        end = self._offset(lines, rng.end.line, rng.end.character)
        if end < start:
            start, end = end, start
        self._source = source[:start] + change.text + source[end:]


def use_fast_documents(workspace: Workspace) -> None:
    """Make ``workspace`` create StitchTextDocuments for documents opened from now on."""

    def create(doc_uri, source=None, version=None, language_id=None):
        return StitchTextDocument(
            doc_uri,
            source=source,
            version=version,
            language_id=language_id,
            sync_kind=workspace._sync_kind,
            position_codec=workspace._position_codec,
        )

    workspace._create_text_document = create
    update = workspace.update_text_document

    def update_if_open(text_doc, change):
        # A change to a document that is not open (a client bug, or a race with didClose)
        # has nothing to apply to; it is not an error of the server's.
        if unquote(text_doc.uri) not in workspace._text_documents:
            log.warning("didChange for a document that is not open: %s", text_doc.uri)
            return
        update(text_doc, change)

    workspace.update_text_document = update_if_open
