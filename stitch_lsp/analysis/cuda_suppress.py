"""``// stitch: ignore STC003`` comments: silence a rule on that line or the line below.

A comment naming no code (``// stitch: ignore``) silences every rule there.
"""

from __future__ import annotations

import re

from stitch_lsp.findings import Finding

_IGNORE = re.compile(rb"(?://|/\*)[ \t]*stitch:[ \t]*ignore\b([^\n]*)")
_CODE = re.compile(rb"STC\d{3}")


def ignore_comments(src: bytes) -> dict[int, frozenset[str] | None]:
    """Line -> codes it silences (None: all) for every ignore comment in the file."""
    out: dict[int, frozenset[str] | None] = {}
    if b"stitch:" not in src:
        return out
    line, pos = 0, 0
    for m in _IGNORE.finditer(src):
        line += src.count(b"\n", pos, m.start())
        pos = m.start()
        codes = frozenset(c.decode() for c in _CODE.findall(m.group(1)))
        previous = out.get(line, frozenset())
        out[line] = None if not codes or previous is None else previous | codes
    return out


def is_ignored(finding: Finding, comments: dict[int, frozenset[str] | None]) -> bool:
    line = finding.range.start.line
    for at in (line, line - 1):
        if at in comments:
            codes = comments[at]
            if codes is None or finding.code in codes:
                return True
    return False


def split_ignored(findings, comments) -> tuple[tuple[Finding, ...], tuple[Finding, ...]]:
    if not comments:
        return tuple(findings), ()
    kept, dropped = [], []
    for f in findings:
        (dropped if is_ignored(f, comments) else kept).append(f)
    return tuple(kept), tuple(dropped)
