"""Launch configurations: the block and grid extents of `<<<grid, block, ...>>>`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tree_sitter import Node

from stitch_lsp.analysis.cuda_text import operands

if TYPE_CHECKING:  # cuda_facts builds launches with these helpers
    from stitch_lsp.analysis.cuda_facts import FunctionFacts


def dim3_args(facts: FunctionFacts, node: Node) -> tuple[Node, ...] | None:
    """The arguments of a dim3 value: `dim3(16, 16)`, `{16, 16}`, or a local `dim3 b(16, 16)`."""
    if node.type == "call_expression":
        fn = node.child_by_field_name("function")
        if fn is not None and facts.text(fn) == "dim3":
            args = node.child_by_field_name("arguments")
            return tuple(operands(args)) if args is not None else ()
    if node.type == "initializer_list":
        return tuple(operands(node))
    if node.type == "identifier":
        d = facts.local(facts.text(node))
        if d is not None and d.type_text.endswith("dim3"):
            if d.value is not None:
                if d.value.type == "argument_list":
                    return tuple(operands(d.value))
                return dim3_args(facts, d.value)
            return None
    return None


def block_dims(facts: FunctionFacts, node: Node) -> list[int] | None:
    """The constant x, y, z extents of a launch's block argument, or None when not constant."""
    args = dim3_args(facts, node)
    if args is None:
        if node.type == "identifier" and facts.local(facts.text(node)) is not None:
            d = facts.local(facts.text(node))
            if d.type_text.endswith("dim3"):
                return None
        value = facts.resolve_int(node)
        return [value] if value is not None else None
    dims = []
    for a in args:
        v = facts.resolve_int(a)
        if v is None:
            return None
        dims.append(v)
    return dims or None


def block_threads(facts: FunctionFacts, node: Node) -> int | None:
    dims = block_dims(facts, node)
    if not dims:
        return None
    total = 1
    for d in dims:
        total *= d
    return total
