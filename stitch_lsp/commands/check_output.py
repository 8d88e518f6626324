"""How `stitch check` prints a file's results: one line per source location.

A template kernel compiled for many types gets one resource line per instantiation
from ptxas, all at the same source line; they are folded into one line that gives the
range of each figure and how many instantiations there are. Identical findings at the
same place (a compiler warning repeated per instantiation) are printed once.
"""

from __future__ import annotations

from typing import Iterable

from stitch_lsp.findings import Finding
from stitch_lsp.verdict import KernelResources
from stitch_lsp.verify.nvcc_check import hint_label


def unique_findings(findings: Iterable[Finding]) -> list[Finding]:
    seen: set[tuple] = set()
    out = []
    for f in findings:
        key = (f.path, f.range, f.severity, f.code, f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def _span(values: list[int], unit: str = "") -> str:
    lo, hi = min(values), max(values)
    return f"{lo}{unit}" if lo == hi else f"{lo}–{hi}{unit}"


def _bytes_span(values: list[int]) -> str:
    lo, hi = min(values), max(values)
    if hi < 1024:
        return _span(values, " B")
    return f"{lo / 1024:.1f}–{hi / 1024:.1f} KB" if lo != hi else f"{lo / 1024:.1f} KB"


def folded_label(group: list[KernelResources]) -> str:
    """One label for every instantiation of a kernel: each figure as a range."""
    if len({hint_label(k) for k in group}) == 1:
        label = hint_label(group[0])
    else:
        parts = [f"{_span([k.registers for k in group])} regs", f"{_bytes_span([k.shared_bytes for k in group])} smem"]
        spills = [k.spill_stores + k.spill_loads for k in group]
        parts.append("0 spill" if not any(spills) else f"spills up to {_bytes_span(spills)}")
        if any(k.stack_bytes for k in group):
            parts.append(f"{_bytes_span([k.stack_bytes for k in group])} stack")
        label = "⟨" + " · ".join(parts) + "⟩"
    return label if len(group) == 1 else f"{label} ×{len(group)} instantiations"


def kernel_lines(kernels: list[KernelResources]) -> list[tuple[KernelResources, str]]:
    """(first instantiation, label) per kernel definition, in order of first appearance."""
    groups: dict[tuple, list[KernelResources]] = {}
    for k in kernels:
        groups.setdefault((k.line, k.name), []).append(k)
    return [(g[0], folded_label(g)) for g in groups.values()]
