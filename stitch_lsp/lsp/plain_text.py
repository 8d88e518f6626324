"""Markdown marks out of text an editor shows as plain text.

Findings, quick-fix titles and messages are written with Markdown code spans (they also feed
Markdown reports and hover cards). The Problems panel, toasts and code-action menus show text as
it is, so there a code span becomes a quoted name and ``**bold**`` plain words.
"""

from __future__ import annotations

import re

_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
_BOLD = re.compile(r"\*\*(.+?)\*\*", re.S)


def plain(text: str) -> str:
    if "`" not in text and "**" not in text:
        return text
    text = _CODE_SPAN.sub(lambda m: f"'{m.group(2).strip()}'", text)
    return _BOLD.sub(r"\1", text)
