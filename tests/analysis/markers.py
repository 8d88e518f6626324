"""Fixture markers: ``/*!STC001*/`` right before the expression a finding must start at."""

from __future__ import annotations

import re

MARKER = re.compile(r"/\*!(STC\d{3})\*/")


def expected_findings(text: str) -> set[tuple[str, int, int]]:
    """(code, line, character) for every marker; positions in code points, 0-based."""
    out = set()
    for line_no, line in enumerate(text.split("\n")):
        for m in MARKER.finditer(line):
            out.add((m.group(1), line_no, m.end()))
    return out


def actual_findings(findings) -> set[tuple[str, int, int]]:
    return {(f.code, f.range.start.line, f.range.start.character) for f in findings}
