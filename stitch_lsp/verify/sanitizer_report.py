"""Parsing compute-sanitizer (memcheck, racecheck, ...) text output into SanitizerFindings.

Formats (compute-sanitizer 2025.3, captured on an H100: tests/fixtures/h100/sanitizer_*.txt):

    ========= Invalid __global__ write of size 4 bytes
    =========     at oob_kernel(float *, int)+0x70 in /path/kernels.cu:10
    =========     by thread (100,0,0) in block (0,0,0)
    =========     Address 0x7f.. is out of bounds
    ========= Error: Race reported between Write access at race_kernel(float *)+0xa0 in kernels.cu:15
    =========     and Read access at race_kernel(float *)+0xb0 in kernels.cu:17 [1024 hazards]
"""

from __future__ import annotations

import re
from pathlib import Path

from stitch_lsp.verdict import SanitizerFinding

_PREFIX = re.compile(r"^=========\s?(?P<body>.*)$")
_AT = re.compile(r"^\s*at (?P<kernel>.+?)\+0x[0-9a-f]+(?: in (?P<file>.+?):(?P<line>\d+))?\s*$")
_RACE = re.compile(r"^(?P<sev>Error|Warning): Race reported between (?P<a>\w+) access at (?P<kernel>.+?)\+0x[0-9a-f]+"
                   r"(?: in (?P<file>.+?):(?P<line>\d+))?\s*$")
_AND = re.compile(r"^\s*and (?P<b>\w+) access at (?P<kernel>.+?)\+0x[0-9a-f]+(?: in (?P<file>.+?):(?P<line>\d+))?"
                  r"(?:\s*\[(?P<hazards>\d+) hazards?\])?\s*$")
_HAZARD = re.compile(r"^(?P<sev>Error|Warning): Potential (?P<kind>RAW|WAR|WAW) hazard detected at (?P<space>__\w+__) "
                     r"(?P<addr>0x[0-9a-f]+) in block (?P<block>\([^)]*\))")
_THREAD = re.compile(r"^\s*(?P<access>Read|Write) Thread (?P<thread>\([^)]*\)) at (?P<kernel>.+?)\+0x[0-9a-f]+"
                     r"(?: in (?P<file>.+?):(?P<line>\d+))?\s*$")
_HEADLINES = ("Invalid __global__", "Invalid __shared__", "Invalid __local__", "Invalid __generic__",
              "Misaligned", "Program hit", "Uninitialized __global__", "Barrier error", "Warp-level",
              "Malloc/Free", "Out-of-range", "Cuda API error", "Leaked")


def _kernel_name(text: str) -> str:
    return text.split("(")[0].strip()


def parse_sanitizer(text: str, tool: str) -> list[SanitizerFinding]:
    findings: list[SanitizerFinding] = []
    current: SanitizerFinding | None = None
    details: list[str] = []

    def close() -> None:
        nonlocal current, details
        if current is not None:
            if details:
                current.message = (current.message + "; " if current.message else "") + "; ".join(details[:4])
            findings.append(current)
        current, details = None, []

    for raw in text.splitlines():
        m = _PREFIX.match(raw)
        if not m:
            continue
        body = m.group("body").rstrip()
        stripped = body.strip()
        if not stripped or stripped.startswith(("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY",
                                                "LEAK SUMMARY", "Target application returned")):
            close()
            continue
        hazard = _HAZARD.match(stripped)
        if hazard:
            close()
            current = SanitizerFinding(tool=tool, kind=f"{hazard.group('kind')} hazard on {hazard.group('space')}",
                                       message=f"{hazard.group('sev')}: potential {hazard.group('kind')} hazard at "
                                               f"{hazard.group('space')} {hazard.group('addr')} in block "
                                               f"{hazard.group('block')}")
            continue
        thread = _THREAD.match(stripped)
        if thread and current is not None:
            if not current.kernel:
                current.kernel = _kernel_name(thread.group("kernel"))
            if thread.group("file") and current.line is None:
                current.file = thread.group("file")
                current.line = int(thread.group("line")) - 1
            details.append(f"{thread.group('access').lower()} by thread {thread.group('thread')} at line "
                           f"{thread.group('line') or '?'}")
            continue
        race = _RACE.match(stripped)
        if race:
            close()
            current = SanitizerFinding(tool=tool, kind=f"race ({race.group('a').lower()} / ?)", message="",
                                       kernel=_kernel_name(race.group("kernel")), file=race.group("file") or "",
                                       line=int(race.group("line")) - 1 if race.group("line") else None)
            current.message = f"{race.group('sev')}: race between a {race.group('a').lower()} at line " \
                              f"{race.group('line') or '?'}"
            continue
        other = _AND.match(stripped)
        if other and current is not None:
            b = other.group("b").lower()
            current.kind = current.kind.replace("?", b)
            current.message += f" and a {b} at line {other.group('line') or '?'}"
            if other.group("hazards"):
                current.message += f" ({other.group('hazards')} hazards)"
            continue
        if not body.startswith(" ") and stripped.startswith(_HEADLINES):
            close()
            current = SanitizerFinding(tool=tool, kind=stripped.split(" of size")[0].split(":")[0], message=stripped)
            continue
        at = _AT.match(stripped)
        if at and current is not None and not current.kernel:
            current.kernel = _kernel_name(at.group("kernel"))
            if at.group("file"):
                current.file = at.group("file")
                current.line = int(at.group("line")) - 1
            continue
        if current is not None and stripped.startswith(("Address", "Access to", "by thread", "and is",
                                                        "is out of bounds")):
            details.append(stripped)
    close()
    return _dedupe(findings)


def _dedupe(findings: list[SanitizerFinding]) -> list[SanitizerFinding]:
    """One finding per (tool, kind, kernel, line); an API error that only echoes a fault goes when the fault is there."""
    seen: dict[tuple, SanitizerFinding] = {}
    counts: dict[tuple, int] = {}
    for f in findings:
        key = (f.tool, f.kind, f.kernel, f.file, f.line)
        counts[key] = counts.get(key, 0) + 1
        seen.setdefault(key, f)
    out = []
    for key, f in seen.items():
        if counts[key] > 1:
            f.message += f" (x{counts[key]})"
        out.append(f)
    if any(f.kernel for f in out):
        out = [f for f in out if not f.kind.startswith("Program hit")] or out
    return out


def error_count(text: str) -> int | None:
    m = re.search(r"ERROR SUMMARY: (\d+) error", text) or re.search(r"RACECHECK SUMMARY: (\d+) hazards? displayed", text)
    return int(m.group(1)) if m else None


def map_to_candidate(finding: SanitizerFinding, files: list[str]) -> None:
    """Point a finding's file at the candidate's own file of that name (lines already match: #line)."""
    if not finding.file:
        return
    base = Path(finding.file).name
    for path in files:
        if Path(path).name == base:
            finding.file = path
            return
