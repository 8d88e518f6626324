"""Compile-time integer constants: literals, ``#define``s, ``constexpr`` values, and
arithmetic over them (for block sizes and shared-array extents)."""

from __future__ import annotations

import ast
import operator
import re
import warnings

from attrs import frozen
from tree_sitter import Node

from stitch_lsp.analysis.cuda_text import node_text
from stitch_lsp.analysis.cuda_text import operands

_ARITHMETIC = re.compile(r"^[\w\s()+\-*/%<>&|]{1,200}$")
_INT_SUFFIX = re.compile(r"(?<=[0-9a-fA-F])[uUlL]+\b")
_MAX_DEPTH = 12
_BINOPS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.floordiv,
    "%": operator.mod, "<<": operator.lshift, ">>": operator.rshift, "&": operator.and_,
    "|": operator.or_,
}
_AST_OPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv, ast.Div: operator.floordiv, ast.Mod: operator.mod,
    ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
}


@frozen(slots=False)
class Constants:
    """File-level names with constant values, as written: ``{"BLOCK": "256"}``."""

    values: tuple[tuple[str, str], ...] = ()
    # Macros taking arguments (`#define CUDA_CHECK(x) ...`): used to phrase quick fixes.
    function_macros: tuple[str, ...] = ()
    includes: tuple[str, ...] = ()

    def get(self, name: str) -> str | None:
        return self._lookup().get(name)

    def __contains__(self, name: str) -> bool:
        return name in self._lookup()

    def names(self) -> frozenset[str]:
        return frozenset(self._lookup())

    def _lookup(self) -> dict[str, str]:
        # Built once per instance (a file can #define hundreds of names); the first definition wins.
        table = self.__dict__.get("_table") if hasattr(self, "__dict__") else None
        if table is None:
            table = {}
            for k, v in self.values:
                table.setdefault(k, v)
            object.__setattr__(self, "_table", table)
        return table


def parse_int_literal(text: str) -> int | None:
    t = _INT_SUFFIX.sub("", text.replace("'", "")).strip()
    try:
        if t.lower().startswith("0x"):
            return int(t, 16)
        if t.lower().startswith("0b"):
            return int(t, 2)
        if len(t) > 1 and t.startswith("0") and t.isdigit():
            return int(t, 8)
        return int(t)
    except ValueError:
        return None


def eval_text(text: str, consts: Constants, depth: int = 0) -> int | None:
    if depth > _MAX_DEPTH:
        return None
    text = text.strip()
    value = parse_int_literal(text)
    if value is not None:
        return value
    if not _ARITHMETIC.match(text):
        return None
    try:
        with warnings.catch_warnings():  # `1x`-style tokens warn before they fail
            warnings.simplefilter("ignore")
            tree = ast.parse(_INT_SUFFIX.sub("", text), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.Name):
            v = consts.get(n.id)
            return eval_text(v, consts, depth + 1) if v is not None else None
        if isinstance(n, ast.BinOp) and type(n.op) in _AST_OPS:
            a, b = ev(n.left), ev(n.right)
            if a is None or b is None or (type(n.op) in (ast.Div, ast.FloorDiv, ast.Mod) and b == 0):
                return None
            return _AST_OPS[type(n.op)](a, b)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            v = ev(n.operand)
            return -v if v is not None else None
        return None

    return ev(tree)


def resolve_int(src: bytes, node: Node, consts: Constants, local: dict[str, Node], depth: int = 0) -> int | None:
    """The integer value of an expression when it is a compile-time constant, else None."""
    if depth > _MAX_DEPTH:
        return None
    t = node.type
    if t == "number_literal":
        return parse_int_literal(node_text(src, node))
    if t == "identifier":
        name = node_text(src, node)
        if name in local:
            return resolve_int(src, local[name], consts, {k: v for k, v in local.items() if k != name}, depth + 1)
        v = consts.get(name)
        return eval_text(v, consts) if v is not None else None
    if t in ("parenthesized_expression", "condition_clause") and len(operands(node)) == 1:
        return resolve_int(src, operands(node)[0], consts, local, depth + 1)
    if t == "cast_expression":
        value = node.child_by_field_name("value")
        return resolve_int(src, value, consts, local, depth + 1) if value is not None else None
    if t == "unary_expression":
        op = node.child_by_field_name("operator")
        arg = node.child_by_field_name("argument")
        if op is not None and arg is not None and node_text(src, op) == "-":
            v = resolve_int(src, arg, consts, local, depth + 1)
            return -v if v is not None else None
        return None
    if t == "binary_expression":
        op = node.child_by_field_name("operator")
        left = node.child_by_field_name("left")
        right = node.child_by_field_name("right")
        fn = _BINOPS.get(node_text(src, op)) if op is not None else None
        if fn is None or left is None or right is None:
            return None
        a = resolve_int(src, left, consts, local, depth + 1)
        b = resolve_int(src, right, consts, local, depth + 1)
        if a is None or b is None or (fn in (operator.floordiv, operator.mod) and b == 0):
            return None
        return fn(a, b)
    return None
