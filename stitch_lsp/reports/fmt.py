"""Number formatting shared by hints, hover cards and reports (units a CUDA developer reads)."""

from __future__ import annotations

import re


def pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} %"


def speedup(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 100:
        return f"{value:.0f}×"
    return f"{value:.2f}×" if value < 10 else f"{value:.1f}×"


def duration_us(us: float | None) -> str:
    if us is None:
        return "—"
    if us >= 1000:
        return f"{us / 1000:.3g} ms"
    return f"{us:.3g} µs"


def duration_ms(ms: float | None) -> str:
    return "—" if ms is None else duration_us(ms * 1000)


def nbytes(n: float | None) -> str:
    if n is None:
        return "—"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def bandwidth(gbs: float | None) -> str:
    if gbs is None:
        return "—"
    return f"{gbs / 1000:.2f} TB/s" if gbs >= 1000 else f"{gbs:.0f} GB/s"


def number(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}g}"


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell (one line, no pipes)."""
    return " ".join(text.replace("|", "\\|").split())


def clip(text: str, limit: int = 220) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def sentences(text: str, limit: int = 300) -> str:
    """As many whole sentences as fit in ``limit`` (always the first, however long): a hover never
    stops mid-sentence; the rest is behind the rule's documentation link or the report."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    ends = [m.end() for m in re.finditer(r"[.;:!?](?=\s)", text)]
    fitting = [e for e in ends if e <= limit]
    cut = fitting[-1] if fitting else (ends[0] if ends else len(text))
    return text[:cut] + (" …" if cut < len(text) else "")
