"""The one place where Stitch's plain data becomes lsprotocol types and back.

Findings, Hints and Ranges count characters in Unicode code points; the client
counts in the negotiated position encoding (UTF-16 unless it asked for another).
Every conversion takes the document's lines so that a line with non-ASCII text
still gets its columns right.
"""

from __future__ import annotations

from typing import Sequence

from lsprotocol import types as lsp
from pygls.workspace.position_codec import PositionCodec

from stitch_lsp.lsp.plain_text import plain
from stitch_lsp.findings import Finding, Hint, Position, Range, Severity, TextEdit

_SEVERITY = {
    Severity.ERROR: lsp.DiagnosticSeverity.Error,
    Severity.WARNING: lsp.DiagnosticSeverity.Warning,
    Severity.INFO: lsp.DiagnosticSeverity.Information,
    Severity.HINT: lsp.DiagnosticSeverity.Hint,
}

UTF16 = PositionCodec(lsp.PositionEncodingKind.Utf16)


class Converter:
    """Converts positions for one document snapshot (its lines) in one encoding."""

    def __init__(self, lines: Sequence[str] | None, codec: PositionCodec = UTF16) -> None:
        self.lines = lines
        self.codec = codec
        self._identity = lines is None or codec.encoding == lsp.PositionEncodingKind.Utf32

    # -- to the client --------------------------------------------------------------
    def position(self, pos: Position) -> lsp.Position:
        line = max(0, pos.line)
        char = max(0, pos.character)
        if self._identity:
            return lsp.Position(line=line, character=char)
        lines = self.lines
        if line >= len(lines):
            # Past the end (a stale finding): clamp to the end of the document.
            if not lines:
                return lsp.Position(line=0, character=0)
            last = lines[-1].rstrip("\r\n")
            return lsp.Position(line=len(lines) - 1, character=self.codec.client_num_units(last))
        text = lines[line].rstrip("\r\n")
        char = min(char, len(text))
        if text.isascii():
            return lsp.Position(line=line, character=char)
        return lsp.Position(line=line, character=self.codec.client_num_units(text[:char]))

    def range(self, rng: Range) -> lsp.Range:
        return lsp.Range(start=self.position(rng.start), end=self.position(rng.end))

    def diagnostic(self, finding: Finding, uri: str | None = None) -> lsp.Diagnostic:
        message = finding.message
        related = None
        if finding.related:
            if uri is not None:
                # Extra lines ride along as related information pinned to the finding itself,
                # and in the message for clients that do not show related information.
                related = [
                    lsp.DiagnosticRelatedInformation(
                        location=lsp.Location(uri=uri, range=self.range(finding.range)), message=plain(line)
                    )
                    for line in finding.related
                ]
            message = message + "\n" + "\n".join(finding.related)
        return lsp.Diagnostic(
            range=self.range(finding.range),
            message=plain(message),
            severity=_SEVERITY.get(finding.severity, lsp.DiagnosticSeverity.Warning),
            code=finding.code or None,
            code_description=lsp.CodeDescription(href=finding.doc_url) if finding.doc_url else None,
            source=finding.source or "stitch",
            related_information=related,
        )

    def inlay_hint(self, hint: Hint) -> lsp.InlayHint:
        tooltip = None
        if hint.tooltip:
            tooltip = lsp.MarkupContent(kind=lsp.MarkupKind.Markdown, value=hint.tooltip)
        return lsp.InlayHint(
            position=self.position(hint.position),
            label=hint.label,
            tooltip=tooltip,
            padding_left=True,
        )

    def text_edit(self, edit: TextEdit) -> lsp.TextEdit:
        return lsp.TextEdit(range=self.range(edit.range), new_text=edit.new_text)

    # -- from the client ------------------------------------------------------------
    def from_position(self, pos: lsp.Position) -> Position:
        if self._identity:
            return Position(pos.line, pos.character)
        lines = self.lines
        if pos.line >= len(lines):
            return Position(pos.line, pos.character)
        text = lines[pos.line].rstrip("\r\n")
        if text.isascii():
            return Position(pos.line, min(pos.character, len(text)))
        units = 0
        for index, ch in enumerate(text):
            if units >= pos.character:
                return Position(pos.line, index)
            units += self.codec.client_num_units(ch)
        return Position(pos.line, len(text))

    def from_range(self, rng: lsp.Range) -> Range:
        return Range(self.from_position(rng.start), self.from_position(rng.end))

