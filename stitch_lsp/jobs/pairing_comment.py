"""The ``// stitch:`` pairing comment: its ``key=value`` grammar, the comment block directly above a
kernel, and pairing comments that sit above no kernel. Pure text: nothing is read or run."""

from __future__ import annotations

import difflib
import re
from typing import Iterable, Sequence

from attrs import frozen

from stitch_lsp.findings import Finding, Range, Severity

SOURCE = "stitch"
KEYS = ("reference", "grid", "block", "shared", "out", "args", "binding")

_DIRECTIVE = re.compile(r"^(\s*)//\s*stitch:(.*)$")
_KEY = re.compile(r"([A-Za-z_][\w-]*)=(?!=)")


@frozen
class Directive:
    """One ``key=value`` of a ``// stitch:`` comment, with where its parts are."""

    key: str
    value: str
    line: int
    key_range: Range
    value_range: Range


def split_directives(text: str, line: int, offset: int) -> list[Directive]:
    """``key=value`` pairs of one comment's text (after ``stitch:``); values may hold spaces
    and commas; a key starts only outside brackets. Bare words (``ignore STX001``) are
    other tools' and are skipped."""
    starts: list[tuple[int, int, str]] = []  # (key start, value start, key)
    depth = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif depth == 0 and (i == 0 or text[i - 1].isspace() or text[i - 1] == ","):
            m = _KEY.match(text, i)
            if m:
                starts.append((i, m.end(), m.group(1)))
                i = m.end()
                continue
        i += 1
    out: list[Directive] = []
    for n, (k0, v0, key) in enumerate(starts):
        end = starts[n + 1][0] if n + 1 < len(starts) else len(text)
        raw = text[v0:end]
        value = raw.strip().rstrip(",").strip()
        lead = len(raw) - len(raw.lstrip())
        vstart = offset + v0 + lead
        out.append(
            Directive(
                key=key,
                value=value,
                line=line,
                key_range=Range.of(line, offset + k0, line, offset + k0 + len(key)),
                value_range=Range.of(line, vstart, line, vstart + len(value)),
            )
        )
    return out


def directives_above(lines: Sequence[str], kernel_line: int) -> list[Directive]:
    """The ``// stitch:`` directives in the comment block directly above ``kernel_line``
    (comment and blank lines; the first code line ends the block)."""
    found: list[Directive] = []
    i = kernel_line - 1
    while i >= 0:
        stripped = lines[i].strip()
        if not stripped:
            i -= 1
            continue
        if not stripped.startswith("//"):
            # ``template <...>`` / ``extern "C"`` belong to the kernel's declaration.
            if stripped.startswith(("template", 'extern "C"')) and not found:
                i -= 1
                continue
            break
        m = _DIRECTIVE.match(lines[i].rstrip("\r\n"))
        if m:
            body_offset = m.start(2)
            directives = split_directives(m.group(2), i, body_offset)
            found = directives + found
        i -= 1
    return found


def dangling_directives(lines: Sequence[str], kernel_lines: Iterable[int], marks: Sequence[int] | None = None) -> list[Finding]:
    """Pairing comments that sit above no kernel (a typo in ``__global__``, a moved kernel).
    ``marks``: the lines that mention ``stitch:`` (all lines when not given)."""
    claimed: set[int] = set()
    for kl in kernel_lines:
        for d in directives_above(lines, kl):
            claimed.add(d.line)
    findings: list[Finding] = []
    for i in marks if marks is not None else range(len(lines)):
        line = lines[i]
        m = _DIRECTIVE.match(line.rstrip("\r\n"))
        if not m or i in claimed:
            continue
        directives = split_directives(m.group(2), i, m.start(2))
        if any(close_key(d.key) for d in directives):
            findings.append(
                Finding(
                    path="",
                    range=Range.of(i, len(m.group(1)), i, len(line.rstrip("\r\n"))),
                    severity=Severity.WARNING,
                    code="STITCH-PAIR",
                    message="this `// stitch:` pairing comment is not directly above a `__global__` kernel, so it pairs nothing",
                    source=SOURCE,
                )
            )
    return findings


def close_key(key: str) -> str | None:
    if key in KEYS:
        return key
    close = difflib.get_close_matches(key.lower(), KEYS, n=1, cutoff=0.7)
    return close[0] if close else None
