"""Selected Python statements → a Region: what a fused kernel would take, give back and need.

Pure and fast (tree-sitter-python, no torch, nothing run): the editor lists the
fuse code action from this on every cursor move. A Region says, in the user's
terms, why a selection cannot be fused when it cannot (``problems``).
"""

from __future__ import annotations

from stitch_lsp.analysis.region.contents import data_flow, describe, find_ops
from stitch_lsp.analysis.region.data import Region
from stitch_lsp.analysis.region.locate import locate
from stitch_lsp.analysis.region.recreate import recreated_needs
from stitch_lsp.analysis.region.refusals import CONTENT, LOCATION, refuse
from stitch_lsp.analysis.region.syntax import node_text
from stitch_lsp.findings import Range


def extract_region(source: str, start_line: int, end_line: int, path: str = "") -> Region:
    """The Region of lines ``start_line``..``end_line`` (0-based, inclusive) of ``source``."""
    lines = source.splitlines()
    # Trim blank / comment-only lines at the edges of the selection.
    while start_line < end_line and start_line < len(lines) and (lines[start_line].strip().startswith("#") or not lines[start_line].strip()):
        start_line += 1
    while end_line > start_line and end_line < len(lines) and (not lines[end_line].strip() or lines[end_line].strip().startswith("#")):
        end_line -= 1
    region = Region(path=path, range=Range.of(start_line, 0, end_line, len(lines[end_line]) if end_line < len(lines) else 0))
    sel = locate(source, start_line, end_line)
    if sel.func is not None:
        region.function = node_text(sel.src, sel.func.child_by_field_name("name"))
        region.class_name = node_text(sel.src, sel.cls.child_by_field_name("name")) if sel.cls is not None else None
    if refuse(LOCATION, sel, region):
        return region
    describe(sel, region)
    data_flow(sel, region)
    find_ops(sel, region)
    recreated_needs(sel, region)
    refuse(CONTENT, sel, region)
    return region


def shape_comment_line(region: Region) -> int:
    """The 0-based line where a ``# stitch:`` shape comment for this region sits (just above it)."""
    return region.range.start.line
