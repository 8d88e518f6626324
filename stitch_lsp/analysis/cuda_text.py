"""Turning tree-sitter byte positions into editor positions (0-based, code points)."""

from __future__ import annotations

from tree_sitter import Node

from stitch_lsp.findings import Position, Range


def encode_source(text: str) -> bytes:
    # surrogatepass keeps lone surrogates (from a badly decoded file) countable.
    return text.encode("utf-8", "surrogatepass")


def _count_chars(seg: bytes) -> int:
    try:
        return len(seg.decode("utf-8", "surrogatepass"))
    except UnicodeDecodeError:  # a position inside a multi-byte character
        return len(seg.decode("utf-8", "ignore"))


class Columns:
    """Byte columns to code-point columns. Free for ASCII text; a prefix decode otherwise."""

    __slots__ = ("src", "ascii")

    def __init__(self, src: bytes):
        self.src = src
        self.ascii = src.isascii()

    def position(self, byte: int, row: int, column: int) -> Position:
        if self.ascii or column == 0:
            return Position(row, column)
        seg = self.src[byte - column:byte]
        if seg.isascii():
            return Position(row, column)
        return Position(row, _count_chars(seg))

    def start(self, node: Node) -> Position:
        p = node.start_point
        return self.position(node.start_byte, p.row, p.column)

    def end(self, node: Node) -> Position:
        p = node.end_point
        return self.position(node.end_byte, p.row, p.column)

    def range(self, node: Node) -> Range:
        return Range(self.start(node), self.end(node))

    def span(self, first: Node, last: Node) -> Range:
        return Range(self.start(first), self.end(last))

    def at_byte(self, byte: int) -> Position:
        line_start = self.src.rfind(b"\n", 0, byte) + 1
        row = self.src.count(b"\n", 0, byte)
        return self.position(byte, row, byte - line_start)


def node_text(src: bytes, node: Node) -> str:
    return src[node.start_byte:node.end_byte].decode("utf-8", "replace")


def squash(text: str) -> str:
    """Whitespace-normalised text, for comparing expressions as written."""
    return " ".join(text.split())


def operands(node: Node) -> list[Node]:
    """Named children without comments (a comment can sit anywhere, even in `<<<...>>>`)."""
    return [c for c in node.named_children if c.type != "comment"]
