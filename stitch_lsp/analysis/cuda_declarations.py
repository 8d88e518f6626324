"""Declarations in CUDA source: function headers, parameters, local variables."""

from __future__ import annotations

import re

from attrs import define
from tree_sitter import Node

from stitch_lsp.analysis.cuda_model import KernelInfo, ParamInfo
from stitch_lsp.analysis.cuda_text import Columns, node_text, operands, squash


@define(slots=True)
class LocalDecl:
    name: str
    type_text: str
    node: Node  # the declaration
    declarator: Node
    value: Node | None
    is_pointer: bool
    is_const: bool
    is_shared: bool
    is_extern: bool
    array_size: Node | None
    # The name as the function's facts know it: the name itself, or `name#2` for a second
    # declaration of it in another scope (two loops that each declare `i`).
    key: str = ""


@define(slots=True)
class Param:
    info: ParamInfo
    node: Node
    type_node: Node | None
    star: Node | None  # the `*` of a pointer parameter


def children_types(node: Node) -> set[str]:
    return {c.type for c in node.children}


def _find_function_declarator(node: Node | None) -> Node | None:
    while node is not None:
        if node.type == "function_declarator":
            return node
        node = node.child_by_field_name("declarator")
    return None


def _declarator_name(node: Node | None) -> Node | None:
    """The identifier a declarator declares (through pointers, arrays, references, inits)."""
    while node is not None:
        if node.type in ("identifier", "field_identifier", "qualified_identifier", "operator_name",
                         "destructor_name", "type_identifier"):
            return node
        nxt = node.child_by_field_name("declarator")
        if nxt is None:
            nxt = next((c for c in operands(node) if c.type in (
                "identifier", "pointer_declarator", "reference_declarator", "array_declarator",
                "init_declarator", "parenthesized_declarator", "qualified_identifier")), None)
        node = nxt
    return None


def find_descendant(node: Node, types: set[str], stop: set[str] = frozenset()) -> Node | None:
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type in types:
            return n
        if n.type in stop:
            continue
        stack.extend(n.children)
    return None


_RESTRICT = re.compile(rb"\b(?:__restrict__|__restrict|restrict)\b")


def _param(src: bytes, cols: Columns, node: Node) -> Param | None:
    declarator = node.child_by_field_name("declarator")
    name_node = _declarator_name(declarator)
    if name_node is None:
        return None
    raw = src[node.start_byte:node.end_byte]
    rel_start = name_node.start_byte - node.start_byte
    rel_end = name_node.end_byte - node.start_byte
    # Qualifiers and declarator shape, read from the text (cheaper than walking the subtree):
    # `*` or `[]` before the name makes a pointer; `const` among the direct children is the
    # pointee's (`float* const p` keeps it inside the pointer declarator).
    around = raw[declarator.start_byte - node.start_byte:] if declarator is not None else b""
    pointer = b"*" in around or b"[" in around
    is_const = any(c.type == "type_qualifier" and node_text(src, c) == "const" for c in node.children)
    is_restrict = _RESTRICT.search(raw) is not None
    type_text = squash((raw[:rel_start] + raw[rel_end:]).decode("utf-8", "replace"))
    star = None
    if declarator is not None and declarator.type == "pointer_declarator":
        star = declarator.children[0] if declarator.children else None
    info = ParamInfo(name=node_text(src, name_node), type_text=type_text, is_pointer=pointer, is_const=is_const,
                     is_restrict=is_restrict, range=cols.range(node))
    return Param(info=info, node=node, type_node=node.child_by_field_name("type"), star=star)


def function_header(src: bytes, cols: Columns, fn: Node):
    """(name node, is_global, is_device, launch_bounds node, params) of a function or prototype."""
    kinds = children_types(fn)
    is_global = "__global__" in kinds
    is_device = "__device__" in kinds
    launch_bounds = next((c for c in fn.children if c.type == "launch_bounds"), None)
    fdecl = _find_function_declarator(fn.child_by_field_name("declarator"))
    if fdecl is None:
        return None
    name_node = fdecl.child_by_field_name("declarator")
    if name_node is None:
        return None
    params = []
    plist = fdecl.child_by_field_name("parameters")
    if plist is not None:
        for p in operands(plist):
            if p.type in ("parameter_declaration", "optional_parameter_declaration"):
                param = _param(src, cols, p)
                if param is not None:
                    params.append(param)
    return name_node, is_global, is_device, launch_bounds, tuple(params)


def launch_bounds_text(src: bytes, node: Node | None) -> str | None:
    if node is None:
        return None
    args = [node_text(src, c) for c in operands(node)]
    return ", ".join(args) if args else squash(node_text(src, node))


def kernel_info(src: bytes, cols: Columns, fn: Node, unit: Node, *, parse_ok: bool, is_template: bool,
                header=None) -> KernelInfo | None:
    header = header or function_header(src, cols, fn)
    if header is None:
        return None
    name_node, is_global, is_device, lb, params = header
    body = fn.child_by_field_name("body")
    return KernelInfo(
        name=node_text(src, name_node),
        range=cols.range(unit),
        name_range=cols.range(name_node),
        is_global=is_global,
        params=tuple(p.info for p in params),
        body_range=cols.range(body) if body is not None else None,
        launch_bounds=launch_bounds_text(src, lb),
        is_host="__host__" in children_types(fn),
        is_template=is_template,
        parse_ok=parse_ok,
    )


def template_params(src: bytes, unit: Node) -> frozenset[str]:
    if unit.type != "template_declaration":
        return frozenset()
    plist = unit.child_by_field_name("parameters")
    names = set()
    if plist is not None:
        for p in operands(plist):
            n = _declarator_name(p.child_by_field_name("declarator")) if p.child_by_field_name("declarator") \
                else next((c for c in operands(p) if c.type in ("type_identifier", "identifier")), None)
            if n is not None:
                names.add(node_text(src, n))
    return frozenset(names)


def local_declarations(src: bytes, decl: Node) -> list[LocalDecl]:
    type_node = decl.child_by_field_name("type")
    type_text = node_text(src, type_node) if type_node is not None else ""
    quals = {node_text(src, c) for c in decl.children if c.type in ("type_qualifier", "storage_class_specifier")}
    # `__shared__` sits among the qualifiers; `const`/`constexpr` too.
    is_shared = "__shared__" in quals
    is_extern = "extern" in quals
    is_const = bool(quals & {"const", "constexpr"})
    prefix = " ".join(q for q in ("const", "constexpr") if q in quals)
    out = []
    for d in decl.children_by_field_name("declarator"):
        value = d.child_by_field_name("value") if d.type == "init_declarator" else None
        target = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
        name_node = _declarator_name(target)
        if name_node is None:
            continue
        is_pointer = find_descendant(target, {"pointer_declarator"}) is not None if target is not None else False
        array = find_descendant(target, {"array_declarator"}) if target is not None else None
        size = array.child_by_field_name("size") if array is not None else None
        out.append(LocalDecl(
            name=node_text(src, name_node),
            type_text=(prefix + " " + type_text).strip() if prefix else type_text,
            node=decl, declarator=d, value=value, is_pointer=is_pointer, is_const=is_const,
            is_shared=is_shared, is_extern=is_extern, array_size=size,
        ))
    return out
