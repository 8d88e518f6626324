"""STC015: a double-precision literal in a kernel that otherwise works in float."""

from __future__ import annotations

import re

from tree_sitter import Node

from stitch_lsp.analysis.cuda_facts import INT32_TYPES, INT64_TYPES, FunctionFacts
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.findings import Fix, Severity

_DOUBLE = re.compile(r"^(?:\d+\.\d*|\.\d+|\d+(?:\.\d*)?[eE][+-]?\d+)$")
_SCALARS = frozenset({"float", "auto"}) | INT32_TYPES | INT64_TYPES
_QUALIFIERS = re.compile(r"\b(?:const|volatile|__restrict__|__restrict|restrict|static|constexpr)\b|[*&]")


def _other_operand(facts: FunctionFacts, node: Node) -> Node | None:
    known = facts.number_operands.get(node.id)
    if known is not None:
        return known
    parent = node.parent
    if parent is None:
        return None
    for side in ("left", "right"):
        other = parent.child_by_field_name(side)
        if other is not None and other.id != node.id:
            return other
    return None


def _is_vector(facts: FunctionFacts, node: Node | None) -> bool:
    """An operand of a vector or class type (`float4 color`, `make_float3(...)`): its own
    `operator*` takes a float, so the literal is converted once, at compile time."""
    while node is not None and node.type == "parenthesized_expression" and node.named_children:
        node = node.named_children[0]
    if node is None:
        return False
    if node.type == "call_expression":
        fn = node.child_by_field_name("function")
        return fn is not None and facts.text(fn).startswith("make_")
    if node.type == "subscript_expression":
        node = node.child_by_field_name("argument")
    if node is None or node.type != "identifier":
        return False
    declared = facts.type_of(facts.key_of(node))
    if declared is None:
        return False
    base = " ".join(_QUALIFIERS.sub(" ", declared).split())
    return base not in _SCALARS


_ARITHMETIC = frozenset({"binary_expression", "parenthesized_expression", "cast_expression", "unary_expression",
                         "argument_list", "call_expression", "conditional_expression"})


def _once_per_thread(facts: FunctionFacts, n: Node) -> bool:
    """The literal's expression is outside every loop and uses no per-thread value
    (`float keep = 1.0 - smoothing;`): it is evaluated once per thread from the kernel's
    arguments, a cost nobody can measure."""
    if facts.loops_over(n.start_byte):
        return False
    top = n
    while top.parent is not None and top.parent.type in _ARITHMETIC:
        top = top.parent
    if top.parent is not None and top.parent.type in ("assignment_expression", "init_declarator") \
            and top.parent.child_by_field_name("left" if top.parent.type == "assignment_expression" else "declarator") \
            is not None and top.parent.child_by_field_name("left") is not None \
            and top.parent.child_by_field_name("left").type != "identifier":
        return False  # stored to memory (`out[i] = 0.5 * ...`): per element
    names = facts.closure(facts.refs(top))
    if any(x.startswith(("threadIdx.", "blockIdx.")) for x in names):
        return False
    return not _reads_memory(top) and not any(_reads_memory(v) for x in names for v in facts.defs.get(x, ()))


def _reads_memory(node: Node) -> bool:
    stack = [node]
    while stack:
        x = stack.pop()
        if x.type in ("subscript_expression", "pointer_expression", "field_expression") and \
                not (x.type == "field_expression" and x.child_by_field_name("argument") is not None
                     and x.child_by_field_name("argument").type == "identifier"):
            if x.type != "pointer_expression" or x.children[0].type == "*":
                return True
        stack.extend(x.named_children)
    return False


class DoubleLiteral(Rule):
    meta = RuleMeta("STC015", "double-literal", "Double-precision literal in a float kernel", Severity.WARNING)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        if facts.is_host_code or not facts.numbers:
            return
        text = facts.src[facts.unit.start_byte:facts.unit.end_byte]
        if b"double" in text or b"float" not in text:
            return  # a kernel that means FP64, or one not about floats at all
        for n in facts.numbers:
            lit = facts.text(n)
            if not _DOUBLE.match(lit) or _is_vector(facts, _other_operand(facts, n)):
                continue
            if facts.is_global and _once_per_thread(facts, n):
                continue
            out.emit(n, f"`{lit}` is a double: the expression around it is computed in FP64, which runs at a "
                        f"fraction of FP32 speed on most GPUs; write `{lit}f`",
                     fix=Fix(title=f"Write `{lit}f`", edits=(out.insert_after(n, "f"),)))


RULE = DoubleLiteral()
