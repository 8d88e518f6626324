"""Silencing rules from the source.

* ``// stitch: ignore STC003`` silences the named rules on that line and on the line
  below it (so it can sit above the offending line); several codes may follow.
* ``// stitch: ignore`` with no code silences every rule there.
* ``// stitch: ignore-file STC008`` anywhere in the file silences the named rules
  (or, with no code, every rule) in the whole file.

Block comments (``/* stitch: ignore STC001 */``) work the same way.
"""

from __future__ import annotations

import re

from attrs import frozen

from stitch_lsp.findings import Finding, Position, Range, TextEdit

_IGNORE = re.compile(rb"(?://|/\*)[ \t]*stitch:[ \t]*ignore(-file)?(?![\w-])([^\n]*)")
_CODE = re.compile(rb"STC\d{3}")
ALL = None  # in a table: every rule


@frozen
class IgnoreComments:
    lines: dict[int, frozenset[str] | None]
    file: frozenset[str] | None = frozenset()  # ALL (None) or the codes silenced everywhere

    def silences(self, finding: Finding) -> bool:
        if self.file is ALL or finding.code in self.file:
            return True
        line = finding.range.start.line
        for at in (line, line - 1):
            if at in self.lines:
                codes = self.lines[at]
                if codes is ALL or finding.code in codes:
                    return True
        return False


def ignore_comments(src: bytes) -> IgnoreComments:
    lines: dict[int, frozenset[str] | None] = {}
    whole: frozenset[str] | None = frozenset()
    if b"stitch:" not in src:
        return IgnoreComments(lines)
    line, pos = 0, 0
    for m in _IGNORE.finditer(src):
        line += src.count(b"\n", pos, m.start())
        pos = m.start()
        codes = frozenset(c.decode() for c in _CODE.findall(m.group(2)))
        if m.group(1):
            whole = ALL if not codes or whole is ALL else whole | codes
        else:
            previous = lines.get(line, frozenset())
            lines[line] = ALL if not codes or previous is ALL else previous | codes
    return IgnoreComments(lines, whole)


def split_ignored(findings, comments: IgnoreComments) -> tuple[tuple[Finding, ...], tuple[Finding, ...]]:
    if not comments.lines and comments.file == frozenset():
        return tuple(findings), ()
    kept, dropped = [], []
    for f in findings:
        (dropped if comments.silences(f) else kept).append(f)
    return tuple(kept), tuple(dropped)


_LINE_IGNORE = re.compile(r"//[ \t]*stitch:[ \t]*ignore(?![\w-])(?P<codes>[^\n]*)$")


def ignore_edit(finding: Finding, line_text: str) -> TextEdit:
    """The edit that silences ``finding`` on its line: an ignore comment at the end of the
    line, or its code added to the one already there. ``line_text`` is that line's text."""
    line = finding.range.start.line
    text = line_text.rstrip("\r\n")
    m = _LINE_IGNORE.search(text)
    if m is not None:
        codes = m.group("codes").split()
        if not codes or finding.code in codes:
            return TextEdit(Range(Position(line, len(text)), Position(line, len(text))), "")
        at = Position(line, m.end("codes"))
        return TextEdit(Range(at, at), f" {finding.code}")
    end = Position(line, len(text))
    spacer = "" if not text or text.endswith((" ", "\t")) else "  "
    return TextEdit(Range(end, end), f"{spacer}// stitch: ignore {finding.code}")
