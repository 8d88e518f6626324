"""Importing the reference and the candidate, and turning compile failures into diagnostics
on the candidate's own lines."""

from __future__ import annotations

import importlib.util
import itertools
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from stitch_lsp.findings import Finding, Range, Severity

_counter = itertools.count(1)


class ModuleLoadError(Exception):
    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.cause = cause


def import_file(path: Path, prefix: str) -> ModuleType:
    """Execute ``path`` as a fresh module (unique name per job, its folder on sys.path)."""
    name = f"_stitch_{prefix}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModuleLoadError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    folder = str(path.parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:
            pass
    return module


# ------------------------------------------------------------------ compile errors


def is_compile_error(exc: BaseException) -> bool:
    name = type(exc).__name__
    if name in ("KernelCompileError", "CompileException", "NVRTCError"):
        return True
    text = str(exc)
    return "Error building extension" in text or "Kernel compilation failed" in text or "nvrtc" in text.lower() and (
        "error" in text.lower() and "compil" in text.lower())


_NVCC_DIAG = re.compile(r"(?P<file>[^\s:()]+\.(?:cu|cuh|cpp|h|hpp|cc))\((?P<line>\d+)\): (?P<sev>error|warning)[^:]*: (?P<msg>.*)")
_GCC_DIAG = re.compile(r"(?P<file>[^\s:()]+\.(?:cu|cuh|cpp|h|hpp|cc)):(?P<line>\d+):(?:\d+:)? (?P<sev>error|warning|fatal error): (?P<msg>.*)")


@dataclass
class RawDiagnostic:
    file: str
    line: int  # 1-based in ``file``
    severity: str
    message: str
    text: str = ""  # the offending source line, where it could be read


@dataclass
class CompileFailure:
    log: str
    diagnostics: list[Finding] = field(default_factory=list)
    backend: str = ""


def _raw_diagnostics(exc: BaseException) -> tuple[str, list[RawDiagnostic], str]:
    log = getattr(exc, "log", None) or str(exc)
    backend = "nvrtc" if type(exc).__name__ in ("KernelCompileError", "CompileException", "NVRTCError") else "load_inline"
    diags: list[RawDiagnostic] = []
    structured = getattr(exc, "diagnostics", None)
    source = getattr(exc, "source", None)
    first = int(getattr(exc, "first_line", 1) or 1)
    if structured:
        lines = (source or "").splitlines()
        for d in structured:
            i = d.line - first
            diags.append(RawDiagnostic(d.file, d.line, d.severity, d.message,
                                       lines[i] if 0 <= i < len(lines) else ""))
        return log, diags, backend
    for line in str(log).splitlines():
        m = _NVCC_DIAG.search(line) or _GCC_DIAG.search(line)
        if m:
            sev = "error" if "error" in m.group("sev") else "warning"
            diags.append(RawDiagnostic(m.group("file"), int(m.group("line")), sev, m.group("msg").strip()))
    if source:
        lines = source.splitlines()
        for d in diags:
            if 0 < d.line <= len(lines):
                d.text = lines[d.line - 1]
    return log, diags, backend


def _read_line(path: str, line: int) -> str:
    try:
        return Path(path).read_text(errors="replace").splitlines()[line - 1]
    except (OSError, IndexError):
        return ""


def locate(diag: RawDiagnostic, files: dict[str, str]) -> tuple[str, int] | None:
    """Where a compiler's (file, line) is in the candidate's own files: by name, else by the line's text."""
    base = Path(diag.file).name
    for path, text in files.items():
        if Path(path).name == base and path.endswith((".cu", ".cuh")):
            return path, diag.line - 1
    wanted = (diag.text or _read_line(diag.file, diag.line)).strip()
    if not wanted:
        return None
    hits = [(path, i) for path, text in files.items() for i, l in enumerate(text.splitlines()) if l.strip() == wanted]
    if hits:
        return hits[0]
    return None


def compile_failure(exc: BaseException, files: dict[str, str], default_path: str) -> CompileFailure:
    log, raw, backend = _raw_diagnostics(exc)
    findings: list[Finding] = []
    for d in raw:
        where = locate(d, files)
        path, line = where if where else (default_path, 0)
        message = d.message if where else f"{Path(d.file).name}:{d.line}: {d.message}"
        findings.append(Finding(
            path=path, range=Range.line_span(max(0, line)),
            severity=Severity.ERROR if d.severity == "error" else Severity.WARNING,
            code=backend, message=message, source="stitch-verify",
        ))
    if not findings:
        findings.append(Finding(path=default_path, range=Range.line_span(0), severity=Severity.ERROR,
                                code=backend, message=(str(log).strip().splitlines() or ["compile failed"])[-1][:500],
                                source="stitch-verify"))
    return CompileFailure(log=str(log)[-20000:], diagnostics=findings, backend=backend)
