"""An nvcc run placed in its document: diagnostics, ptxas errors on their kernels,
spill warnings and per-kernel resource hints.

Shared by the editor (compile on save) and ``stitch check`` so both show the same.
Kernels are located with the CUDA analysis (``KernelInfo.name_range``); a kernel
the analysis missed (a parse it could not finish) is found by a plain search for
its ``__global__`` definition.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from attrs import define, field

from stitch_lsp.findings import Finding, Hint, Position, Range, Severity
from stitch_lsp.verdict import KernelResources
from stitch_lsp.verify.nvcc import NvccOutcome
from stitch_lsp.verify.ptxas_report import PtxasReport, match_kernel, split_signature


@define
class PlacedKernel:
    resources: KernelResources
    name_range: Range  # where the kernel's name is written


@define
class NvccCheck:
    findings: list[Finding] = field(factory=list)
    hints: list[Hint] = field(factory=list)
    kernels: list[PlacedKernel] = field(factory=list)


def _kernel_infos(analysis: Any) -> list[Any]:
    return [k for k in (getattr(analysis, "kernels", None) or ()) if getattr(k, "is_global", True)]


def _search_definition(name: str, lines: Sequence[str]) -> Range | None:
    """The name of ``__global__ ... name(`` in the text (the first such definition)."""
    pattern = re.compile(r"\b" + re.escape(name) + r"\s*(?:<[^>]*>)?\s*\(")
    for n, text in enumerate(lines):
        if "__global__" not in text and not (n > 0 and "__global__" in lines[n - 1]):
            continue
        m = pattern.search(text)
        if m:
            return Range(Position(n, m.start()), Position(n, m.start() + len(name)))
    return None


def locate(demangled: str, analysis: Any, lines: Sequence[str]) -> Range | None:
    info = match_kernel(demangled, _kernel_infos(analysis))
    if info is not None:
        rng = getattr(info, "name_range", None) or getattr(info, "range", None)
        if rng is not None:
            return rng
    short = split_signature(demangled)[0].split("::")[-1]
    return _search_definition(short, lines)


def place_kernels(report: PtxasReport, analysis: Any, lines: Sequence[str]) -> list[PlacedKernel]:
    placed = []
    for k in report.kernels:
        rng = locate(report.demangled.get(k.mangled, k.name), analysis, lines)
        if rng is None:
            continue
        k.line = rng.start.line
        placed.append(PlacedKernel(k, rng))
    return placed


def _bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.1f} KB"


def hint_label(k: KernelResources) -> str:
    parts = [f"{k.registers} regs", f"{_bytes(k.shared_bytes)} smem"]
    spill = k.spill_stores + k.spill_loads
    parts.append("0 spill" if spill == 0 else f"spills {_bytes(k.spill_stores)} st / {_bytes(k.spill_loads)} ld")
    if k.stack_bytes:
        parts.append(f"{_bytes(k.stack_bytes)} stack")
    return "⟨" + " · ".join(parts) + "⟩"


def hint_tooltip(k: KernelResources, demangled: str, arch: str) -> str:
    rows = [
        ("registers / thread", str(k.registers)),
        ("static shared memory", _bytes(k.shared_bytes)),
        ("stack frame", _bytes(k.stack_bytes)),
        ("spill stores", _bytes(k.spill_stores)),
        ("spill loads", _bytes(k.spill_loads)),
    ]
    if k.constant_bytes:
        rows.append(("constant memory", _bytes(k.constant_bytes)))
    table = "\n".join(f"| {a} | {b} |" for a, b in rows)
    return (
        f"**ptxas** for `{demangled}` on `{arch or '?'}`\n\n| | |\n|---|---|\n{table}\n\n"
        "Dynamic shared memory (`extern __shared__`, the launch's third argument) is not included."
    )


def _hint_position(rng: Range, lines: Sequence[str]) -> Position:
    line = rng.start.line
    text = lines[line].rstrip() if line < len(lines) else ""
    return Position(line, len(text))


def check_from_outcome(outcome: NvccOutcome, analysis: Any, path: str, text: str) -> NvccCheck:
    lines = text.split("\n")
    check = NvccCheck(findings=list(outcome.result.diagnostics))
    report = outcome.ptxas
    placed = place_kernels(report, analysis, lines)
    check.kernels = placed
    by_mangled = {p.resources.mangled: p for p in placed}
    for msg in report.messages:
        where = None
        if msg.function:
            p = by_mangled.get(msg.function)
            where = p.name_range if p else locate(report.demangled.get(msg.function, msg.function), analysis, lines)
        message = msg.message
        if msg.function and msg.function in report.demangled:
            message = message.replace(msg.function, report.demangled[msg.function])
        check.findings.append(
            Finding(
                path=path,
                range=where or Range(Position(0, 0), Position(0, 0)),
                severity=msg.severity,
                code="ptxas",
                message=f"ptxas: {message}",
                source="nvcc",
            )
        )
    errors = {m.function for m in report.errors}
    for p in placed:
        k = p.resources
        demangled = report.demangled.get(k.mangled, k.name)
        if k.mangled not in errors:
            check.hints.append(
                Hint(
                    path=path,
                    position=_hint_position(p.name_range, lines),
                    label=hint_label(k),
                    tooltip=hint_tooltip(k, demangled, outcome.arch or report.arch),
                    kind="resources",
                )
            )
        if k.spill_stores or k.spill_loads:
            check.findings.append(
                Finding(
                    path=path,
                    range=p.name_range,
                    severity=Severity.WARNING,
                    code="ptxas-spill",
                    message=(
                        f"{k.name} spills registers to local memory: {k.spill_stores} bytes stored, "
                        f"{k.spill_loads} bytes loaded ({k.registers} registers per thread). "
                        "Spills go through L1/L2 and slow the kernel; reduce live values or raise "
                        "the register limit (__launch_bounds__, -maxrregcount)."
                    ),
                    source="nvcc",
                )
            )
    return check
