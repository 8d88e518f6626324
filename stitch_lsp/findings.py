"""What the analysis, the compiler and the Verifier tell the editor, in editor terms.

Plain data only: no LSP types here (``lsp/convert.py`` turns these into lsprotocol
objects). Lines and characters are 0-based; characters count Unicode code points
of the line (the LSP layer converts to the client's position encoding).
"""

from __future__ import annotations

import enum

from attrs import field, frozen


class Severity(enum.IntEnum):
    ERROR = 1
    WARNING = 2
    INFO = 3
    HINT = 4


@frozen(order=True)
class Position:
    line: int
    character: int


@frozen(order=True)
class Range:
    start: Position
    end: Position

    @classmethod
    def of(cls, line: int, char: int, end_line: int, end_char: int) -> "Range":
        return cls(Position(line, char), Position(end_line, end_char))

    @classmethod
    def line_span(cls, line: int, start: int = 0, end: int = 10_000) -> "Range":
        return cls(Position(line, start), Position(line, end))

    def contains(self, pos: Position) -> bool:
        return self.start <= pos <= self.end


@frozen
class TextEdit:
    range: Range
    new_text: str


@frozen
class Fix:
    """A quick fix offered with a finding: edits to the finding's own file."""

    title: str
    edits: tuple[TextEdit, ...] = ()


@frozen
class Finding:
    """One diagnostic: a rule hit, a compiler message, a Verifier result."""

    path: str
    range: Range
    severity: Severity
    code: str
    message: str
    source: str = "stitch"
    doc_url: str | None = None
    fix: Fix | None = None
    # Extra lines shown with the message (e.g. nvcc's notes, a failing trial).
    related: tuple[str, ...] = field(default=())


@frozen
class Hint:
    """An inlay hint: a short label at a position, with an optional tooltip (Markdown)."""

    path: str
    position: Position
    label: str
    tooltip: str | None = None
    # "resources" (ptxas figures), "verdict" (correctness / speedup), "profile", "status"
    kind: str = "resources"
