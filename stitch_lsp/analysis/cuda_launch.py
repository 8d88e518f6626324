"""Launch configurations: the block and grid extents of `<<<grid, block, ...>>>`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tree_sitter import Node

from stitch_lsp.analysis.cuda_model import GridDivision
from stitch_lsp.analysis.cuda_text import operands, squash

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


def _unparen(node: Node) -> Node:
    while node.type == "parenthesized_expression" and len(operands(node)) == 1:
        node = operands(node)[0]
    return node


def _factors(facts: FunctionFacts, node: Node) -> list[str]:
    """The texts of a product's factors (`B * T` -> ["B * T", "B", "T"])."""
    node = _unparen(node)
    out = [squash(facts.text(node))]
    if node.type == "binary_expression" and facts.text(node.child_by_field_name("operator")) == "*":
        for side in ("left", "right"):
            part = node.child_by_field_name(side)
            if part is not None:
                out += _factors(facts, part)
    return out


def _checked_divisible(facts: FunctionFacts, left: Node, right: Node) -> bool:
    """The function tests `left % right` (an `assert`, an early exit, an error message):
    the author relies on the division being exact."""
    dividends = set(_factors(facts, left))
    divisor_text = squash(facts.text(_unparen(right)))
    divisor = facts.resolve_int(right)
    for m in facts.mods:
        ml, mr = m.child_by_field_name("left"), m.child_by_field_name("right")
        if ml is None or mr is None or squash(facts.text(_unparen(ml))) not in dividends:
            continue
        if squash(facts.text(_unparen(mr))) == divisor_text:
            return True
        tested = facts.resolve_int(mr)
        if tested is not None and divisor and tested % divisor == 0:
            return True
    return False


def grid_divisions(facts: FunctionFacts, grid: Node) -> tuple[GridDivision, ...]:
    """The extents of a launch's grid written as truncating divisions (`n / 256`), where
    they are written (a `dim3` declared once may serve several launches)."""
    parts = dim3_args(facts, grid) or (grid,)
    out = []
    for axis, part in zip("xyz", parts):
        node = _unparen(part)
        if node.type != "binary_expression" or facts.text(node.child_by_field_name("operator")) != "/":
            continue
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if left is None or right is None:
            continue
        if any(ch in facts.text(left) for ch in "+-"):
            continue  # already rounds up: (n + b - 1) / b
        a, b = facts.resolve_int(left), facts.resolve_int(right)
        if b is None and right.type not in ("identifier", "number_literal", "parenthesized_expression",
                                            "binary_expression", "field_expression"):
            continue
        if a is not None and b and a % b == 0:
            continue
        if _checked_divisible(facts, left, right):
            continue
        l, r = squash(facts.text(left)), squash(facts.text(right))
        if right.type == "number_literal" and b:
            fixed = f"({l} + {b - 1}) / {r}"
        else:
            fixed = f"({l} + {r} - 1) / {r}"
        out.append(GridDivision(facts.range(part), squash(facts.text(part)), l, r, fixed, axis,
                                tuple(_factors(facts, left))))
    return tuple(out)
