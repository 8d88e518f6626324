"""nvcc's error and warning output, parsed into Findings at the right line and column.

Three shapes of message reach us:

- EDG front end (cudafe++)::

      file.cu(3): error: identifier "x" is undefined
                  argument types are: (int *)        <- extra lines of the message
        if (i < n) y[i] = x * 2.0f;                  <- the source line, indented by two
                          ^                          <- the caret gives the column
            detected during instantiation of ...     <- context, after the caret
      file.cu(2): note #3326-D: ...                  <- a note that belongs to the message above

  The echoed line is not always the text of the file: tabs become spaces,
  non-ASCII characters become ``\\U000003b1``, ``__device__`` becomes
  ``__attribute__((device))``. The column is found by walking the echoed line
  against the real one, falling back to the token under the caret.
- host compiler / preprocessor (gcc style): ``file.cu:1:10: fatal error: ...``.
- the driver itself: ``nvcc fatal   : Unsupported gpu architecture 'sm_1000'``.

ptxas lines are left to ``ptxas_report``.
"""

from __future__ import annotations

import os
import re
from typing import Sequence

from attrs import field, frozen

from stitch_lsp.findings import Finding, Position, Range, Severity

_EDG = re.compile(
    r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<sev>catastrophic error|internal error|error|warning|remark|note)"
    r"(?: #(?P<num>[\w-]+))?: (?P<msg>.*)$"
)
_GCC = re.compile(
    r"^(?P<file>[^\s:][^:]*?):(?P<line>\d+):(?:(?P<col>\d+):)? (?P<sev>fatal error|error|warning|note): (?P<msg>.*)$"
)
_DRIVER = re.compile(r"^(?P<tool>nvcc|nvlink|fatbinary|cicc|cudafe\+\+) (?P<sev>fatal|error|warning)\s*: (?P<msg>.*)$")
_CARET = re.compile(r"^(?P<pad>\s*)\^")
_GCC_SOURCE = re.compile(r"^\s*\d*\s*\|")  # "    1 | #include ..." and "      |   ^~~~"
_SKIP = (
    re.compile(r"^\d+ errors? detected in the compilation of"),
    re.compile(r"^Remark: The warnings can be suppressed"),
    re.compile(r"^compilation terminated\.$"),
    re.compile(r"^In file included from "),
    re.compile(r"^\s+from .*[:,]$"),
)
_ESCAPE = re.compile(r"\\U[0-9a-fA-F]{8}|\\u[0-9a-fA-F]{4}")
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|\S")

_SEVERITY = {
    "catastrophic error": Severity.ERROR,
    "internal error": Severity.ERROR,
    "fatal error": Severity.ERROR,
    "fatal": Severity.ERROR,
    "error": Severity.ERROR,
    "warning": Severity.WARNING,
    "remark": Severity.INFO,
    "note": Severity.INFO,
}


@frozen
class CompilerMessage:
    """One message as nvcc printed it (before it is placed in a document)."""

    file: str  # as printed; "" for driver-level messages
    line: int  # 1-based; 0 when the message has no line
    severity: Severity
    message: str
    code: str = ""  # "177-D" for EDG numbered diagnostics, "nvcc" for driver messages
    column: int | None = None  # 0-based, in the echoed line's own units (resolved later)
    echoed: str | None = None  # the source line as nvcc printed it
    gcc_column: int | None = None  # 1-based column from a gcc-style message
    extra: tuple[str, ...] = field(default=())  # lines of the message before the source echo
    notes: tuple[str, ...] = field(default=())  # "detected during ..." lines and attached notes


def parse_nvcc_output(text: str) -> list[CompilerMessage]:
    """Every compiler message in nvcc's combined output, in order. ptxas lines are skipped."""
    lines = text.replace("\r\n", "\n").split("\n")
    messages: list[CompilerMessage] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        m = _EDG.match(line)
        if m:
            block: list[str] = []
            i += 1
            while i < len(lines) and lines[i].strip() and not _is_header(lines[i]):
                block.append(lines[i])
                i += 1
            msg = _edg_message(m, block)
            if msg.severity is Severity.INFO and m.group("sev") == "note" and messages:
                # A note explains the message before it: keep it there, with its line.
                prev = messages[-1]
                note = f"{_short(msg.file)}:{msg.line}: {msg.message}"
                messages[-1] = _with_notes(prev, prev.notes + (note,))
            else:
                messages.append(msg)
            continue
        m = _GCC.match(line)
        if m:
            i += 1
            while i < len(lines) and _GCC_SOURCE.match(lines[i]):
                i += 1
            sev = m.group("sev")
            msg = CompilerMessage(
                file=m.group("file"),
                line=int(m.group("line")),
                severity=_SEVERITY[sev],
                message=m.group("msg").strip(),
                gcc_column=int(m.group("col")) if m.group("col") else None,
            )
            if sev == "note" and messages:
                prev = messages[-1]
                messages[-1] = _with_notes(prev, prev.notes + (f"{_short(msg.file)}:{msg.line}: {msg.message}",))
            else:
                messages.append(msg)
            continue
        m = _DRIVER.match(line)
        if m:
            messages.append(
                CompilerMessage(
                    file="",
                    line=0,
                    severity=_SEVERITY[m.group("sev")],
                    message=f"{m.group('tool')}: {m.group('msg').strip()}",
                    code=m.group("tool"),
                )
            )
        i += 1
    return messages


def _is_header(line: str) -> bool:
    return bool(_EDG.match(line) or _GCC.match(line) or _DRIVER.match(line) or line.startswith("ptxas "))


def _short(path: str) -> str:
    return os.path.basename(path)


def _with_notes(msg: CompilerMessage, notes: tuple[str, ...]) -> CompilerMessage:
    return CompilerMessage(
        file=msg.file,
        line=msg.line,
        severity=msg.severity,
        message=msg.message,
        code=msg.code,
        column=msg.column,
        echoed=msg.echoed,
        gcc_column=msg.gcc_column,
        extra=msg.extra,
        notes=notes,
    )


def _edg_message(m: re.Match, block: list[str]) -> CompilerMessage:
    caret_at = next((k for k, text in enumerate(block) if _CARET.match(text)), None)
    echoed = column = None
    extra: list[str] = []
    notes: list[str] = []
    if caret_at is not None and caret_at > 0:
        echoed_raw = block[caret_at - 1]
        # nvcc indents the echoed source line and its caret by two spaces.
        echoed = echoed_raw[2:] if echoed_raw.startswith("  ") else echoed_raw
        column = max(0, len(_CARET.match(block[caret_at]).group("pad")) - 2)
        extra = [t.strip() for t in block[: caret_at - 1]]
        notes = [t.strip() for t in block[caret_at + 1 :] if t.strip()]
    else:
        extra = [t.strip() for t in block if t.strip()]
    text = m.group("msg").strip()
    if extra:
        text = text + " (" + "; ".join(extra) + ")"
    sev = m.group("sev")
    return CompilerMessage(
        file=m.group("file"),
        line=int(m.group("line")),
        severity=_SEVERITY[sev],
        message=text,
        code=m.group("num") or "",
        column=column,
        echoed=echoed,
        notes=tuple(notes),
    )


def source_column(source_line: str, echoed: str | None, caret: int | None) -> int:
    """The 0-based code-point column in ``source_line`` that nvcc's caret points at."""
    if echoed is None or caret is None:
        return _first_non_blank(source_line)
    walked = _walk(source_line, echoed, caret)
    if walked is not None:
        return walked
    # The echoed line differs from the file (macro / keyword rewriting): find the token
    # under the caret in the real line, nearest to where the caret would put it.
    tail = echoed[caret:]
    token = _TOKEN.match(tail)
    if token:
        needle = token.group(0)
        hits = [h.start() for h in re.finditer(re.escape(needle), source_line)]
        if hits:
            return min(hits, key=lambda h: abs(h - caret))
    return min(caret, len(source_line))


def _walk(source: str, echoed: str, caret: int) -> int | None:
    i = j = 0
    while j < caret:
        if i >= len(source):
            return None
        c = source[i]
        if j < len(echoed) and echoed[j] == c:
            j += 1
        elif c == "\t" and j < len(echoed) and echoed[j] == " ":
            j += 1
            # A tab may be expanded to several spaces; the next real character decides.
            nxt = source[i + 1] if i + 1 < len(source) else ""
            while j < caret and j < len(echoed) and echoed[j] == " " and nxt != " ":
                j += 1
        elif ord(c) > 127:
            esc = _ESCAPE.match(echoed, j)
            j += len(esc.group(0)) if esc else 1
        else:
            return None
        i += 1
    return i if j == caret else None


def _first_non_blank(line: str) -> int:
    stripped = line.lstrip()
    return len(line) - len(stripped) if stripped else 0


def _token_end(source_line: str, column: int) -> int:
    m = _TOKEN.match(source_line, column)
    return m.end() if m else min(len(source_line), column + 1)


def _same_file(printed: str, target: str, cwd: str | None) -> bool:
    if not printed:
        return False
    a = os.path.normpath(os.path.join(cwd or "", printed))
    b = os.path.normpath(target)
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a == b


_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](?P<name>[^>"]+)[>"]')


def _include_line(source_lines: Sequence[str], header: str) -> int | None:
    """The 0-based line of the ``#include`` that names ``header`` (by file name)."""
    base = os.path.basename(header)
    for n, text in enumerate(source_lines):
        m = _INCLUDE.match(text)
        if m and os.path.basename(m.group("name")) == base:
            return n
    return None


def to_findings(
    messages: Sequence[CompilerMessage],
    *,
    compiled_file: str,
    display_path: str,
    source_text: str,
    cwd: str | None = None,
) -> list[Finding]:
    """Place messages in the document that was compiled.

    ``compiled_file`` is the file nvcc was given (a temporary copy of the buffer);
    ``display_path`` the document's own path. A message inside an included header
    lands on the ``#include`` line that brought it in, with the header's line in the
    message; a message without a line (driver errors) lands on the first line.
    """
    source_lines = source_text.split("\n")
    findings: list[Finding] = []
    for msg in messages:
        code = f"nvcc-{msg.code}" if msg.code and msg.code != "nvcc" else "nvcc"
        related = msg.notes
        if msg.line and _same_file(msg.file, compiled_file, cwd):
            line = min(msg.line - 1, max(0, len(source_lines) - 1))
            text = source_lines[line].rstrip("\r") if source_lines else ""
            if msg.gcc_column is not None:
                column = min(max(0, msg.gcc_column - 1), len(text))
            else:
                column = source_column(text, msg.echoed, msg.column)
            end = _token_end(text, column)
            rng = Range(Position(line, column), Position(line, max(end, column)))
            message = msg.message
        elif msg.line and msg.file:
            at = _include_line(source_lines, msg.file)
            line = at if at is not None else 0
            text = source_lines[line] if source_lines else ""
            rng = Range(Position(line, _first_non_blank(text)), Position(line, len(text.rstrip())))
            message = f"In {_short(msg.file)}:{msg.line}: {msg.message}"
            if msg.echoed:
                related = (f"{_short(msg.file)}:{msg.line}: {msg.echoed.strip()}",) + tuple(related)
        else:
            text = source_lines[0] if source_lines else ""
            rng = Range(Position(0, 0), Position(0, len(text.rstrip())))
            message = msg.message
        findings.append(
            Finding(
                path=display_path,
                range=rng,
                severity=msg.severity,
                code=code,
                message=message,
                source="nvcc",
                related=tuple(related),
            )
        )
    return findings
