"""What each top-level node of a CUDA file contributes: its functions (the unit of
analysis and of caching) and its file-level constants, kept between versions of a
document so that an edit only revisits the top-level nodes it touched."""

from __future__ import annotations

from attrs import frozen
from tree_sitter import Node

from stitch_lsp.analysis.cuda_consts import Constants
from stitch_lsp.analysis.cuda_model import (
    BarrierInfo, FunctionFlow, KernelInfo, LaunchInfo, SharedDecl, shift_barrier, shift_finding, shift_flow,
    shift_kernel, shift_launch, shift_shared,
)
from stitch_lsp.analysis.cuda_text import node_text, operands, squash
from stitch_lsp.findings import Finding

_CONTAINERS = frozenset({"translation_unit", "declaration_list", "preproc_ifdef", "preproc_if",
                         "preproc_else", "preproc_elif", "preproc_elifdef"})


@frozen
class UnitResult:
    """What one function contributes to the file's analysis (absolute ranges at ``row``)."""

    row: int
    kernel: KernelInfo | None
    launches: tuple[LaunchInfo, ...]
    shared_decls: tuple[SharedDecl, ...]
    barriers: tuple[BarrierInfo, ...]
    findings: tuple[Finding, ...]
    parse_ok: bool = True
    flow: FunctionFlow | None = None

    def moved_to(self, row: int) -> "UnitResult":
        d = row - self.row
        return UnitResult(
            row, shift_kernel(self.kernel, d) if self.kernel is not None else None,
            tuple(shift_launch(x, d) for x in self.launches), tuple(shift_shared(x, d) for x in self.shared_decls),
            tuple(shift_barrier(x, d) for x in self.barriers), tuple(shift_finding(x, d) for x in self.findings),
            self.parse_ok, shift_flow(self.flow, d) if self.flow is not None else None,
        )


class Unit:
    __slots__ = ("fn", "unit", "is_prototype")

    def __init__(self, fn: Node, unit: Node, is_prototype: bool):
        self.fn = fn  # function_definition, or a declaration for a prototype
        self.unit = unit  # the same, or its template_declaration
        self.is_prototype = is_prototype


class TopRecord:
    """What one top-level node of the file contributes: its functions and constants.

    Kept between versions of a document: a top-level node the edit did not touch is
    reused (moved) without looking at its subtree again.
    """

    __slots__ = ("start", "end", "units", "entries", "values", "macros", "includes")

    def __init__(self, start: int, end: int):
        self.start, self.end = start, end
        self.units: list[Unit] = []  # fresh nodes to analyse (empty for a reused record)
        self.entries: list[tuple[tuple, UnitResult]] = []  # (cache key, result) once analysed
        self.values: list[tuple[str, str]] = []
        self.macros: list[str] = []
        self.includes: list[str] = []

    def move(self, byte_delta: int, row_delta: int) -> "TopRecord":
        """Move this record (in place: the previous version's records are not used again)."""
        self.start += byte_delta
        self.end += byte_delta
        if row_delta:
            self.entries = [(k, r.moved_to(r.row + row_delta)) for k, r in self.entries]
        return self


def visit_top(src: bytes, node: Node) -> TopRecord:
    top = TopRecord(node.start_byte, node.end_byte)
    units, values, macros, includes = top.units, top.values, top.macros, top.includes

    def visit_one(node: Node) -> None:
        t = node.type
        if t == "function_definition":
            units.append(Unit(node, node, False))
        elif t == "template_declaration":
            inner = next((c for c in operands(node) if c.type in ("function_definition", "declaration")), None)
            if inner is not None and inner.type == "function_definition":
                units.append(Unit(inner, node, False))
            elif inner is not None and _is_cuda_prototype(inner):
                units.append(Unit(inner, node, True))
        elif t == "declaration":
            if _is_cuda_prototype(node):
                units.append(Unit(node, node, True))
            else:
                _collect_const(src, node, values)
        elif t == "linkage_specification":
            body = node.child_by_field_name("body")
            if body is None:
                return
            if body.type == "function_definition":
                units.append(Unit(body, body, False))
            elif body.type == "declaration" and _is_cuda_prototype(body):
                units.append(Unit(body, body, True))
            elif body.type == "declaration_list":
                for c in body.children:
                    visit_one(c)
        elif t == "namespace_definition":
            body = node.child_by_field_name("body")
            if body is not None:
                for c in body.children:
                    visit_one(c)
        elif t == "preproc_if" and _is_if_zero(src, node):
            alternative = node.child_by_field_name("alternative")  # `#if 0` code is dead: only its #else
            if alternative is not None:
                visit_one(alternative)
        elif t in _CONTAINERS:
            for c in node.children:
                visit_one(c)
        elif t == "preproc_def":
            name = node.child_by_field_name("name")
            value = node.child_by_field_name("value")
            if name is not None and value is not None:
                values.append((node_text(src, name), squash(node_text(src, value))))
        elif t == "preproc_function_def":
            name = node.child_by_field_name("name")
            if name is not None:
                macros.append(node_text(src, name))
        elif t == "preproc_include":
            path = node.child_by_field_name("path")
            if path is not None:
                includes.append(node_text(src, path).strip("<>\""))

    visit_one(node)
    return top


def _is_if_zero(src: bytes, node: Node) -> bool:
    cond = node.child_by_field_name("condition")
    return cond is not None and node_text(src, cond).strip() in ("0", "false")


def constants_of(tops: list[TopRecord]) -> Constants:
    return Constants(tuple(v for t in tops for v in t.values), tuple(m for t in tops for m in t.macros),
                     tuple(i for t in tops for i in t.includes))


def _is_cuda_prototype(decl: Node) -> bool:
    kinds = {c.type for c in decl.children}
    if not kinds & {"__global__", "__device__"}:
        return False
    d = decl.child_by_field_name("declarator")
    return d is not None and d.type == "function_declarator"


def _collect_const(src: bytes, decl: Node, out: list[tuple[str, str]]) -> None:
    quals = {node_text(src, c) for c in decl.children if c.type in ("type_qualifier", "storage_class_specifier")}
    if not quals & {"const", "constexpr"}:
        return
    for d in decl.children_by_field_name("declarator"):
        if d.type == "init_declarator":
            name = d.child_by_field_name("declarator")
            value = d.child_by_field_name("value")
            if name is not None and name.type == "identifier" and value is not None:
                out.append((node_text(src, name), squash(node_text(src, value))))
