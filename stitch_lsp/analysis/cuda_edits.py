"""What changed between two versions of a document, in the terms tree-sitter's
incremental parse needs (bytes and points), and which lines it made dirty."""

from __future__ import annotations

from attrs import frozen
from tree_sitter import Point


@frozen
class Edit:
    """The bytes an edit replaced, and the regions (whole lines, new coordinates) it made dirty."""

    start: int
    old_end: int
    new_end: int
    row_delta: int
    dirty: tuple[tuple[int, int], ...]



def common_prefix(a: bytes, b: bytes) -> int:
    n, i, step = min(len(a), len(b)), 0, 4096
    while i + step <= n and a[i:i + step] == b[i:i + step]:
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


def common_suffix(a: bytes, b: bytes, limit: int) -> int:
    la, lb = len(a), len(b)
    n, k, step = min(la, lb, limit), 0, 4096
    while k + step <= n and a[la - k - step:la - k] == b[lb - k - step:lb - k]:
        k += step
    while k < n and a[la - 1 - k] == b[lb - 1 - k]:
        k += 1
    return k


def line_end(buf: bytes, offset: int) -> int:
    end = buf.find(b"\n", offset)
    return len(buf) if end < 0 else end


def point_at(buf: bytes, offset: int) -> Point:
    return Point(buf.count(b"\n", 0, offset), offset - (buf.rfind(b"\n", 0, offset) + 1))
