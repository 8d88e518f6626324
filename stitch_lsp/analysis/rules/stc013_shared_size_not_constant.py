"""STC013: a `__shared__` array sized by something that is not a compile-time constant.

nvcc rejects such a declaration, so this is an error, and it is reported only where the
size certainly is not constant: it names a function parameter (not a template
parameter), a local variable that is not `const`, a `const` local computed from one of
those, or a built-in such as `blockDim.x`. A name the file does not declare (a macro or
a `static constexpr` member from a header, `Tile::size`) is left to the compiler.
"""

from __future__ import annotations

from tree_sitter import Node

from stitch_lsp.analysis.cuda_facts import BUILTIN_OBJECTS, FunctionFacts
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.findings import Severity

_OPAQUE = frozenset({"sizeof_expression", "alignof_expression", "template_argument_list", "qualified_identifier",
                     "type_descriptor", "string_literal", "call_expression"})


def _plain_names(facts: FunctionFacts, node: Node) -> list[Node]:
    """Identifiers the size reads directly, and built-ins (`blockDim.x`) as their field expressions."""
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        if n.type == "identifier":
            out.append(n)
        elif n.type == "field_expression":
            arg = n.child_by_field_name("argument")
            if arg is not None and arg.type == "identifier" and facts.text(arg) in BUILTIN_OBJECTS:
                out.append(n)
        elif n.type not in _OPAQUE:
            stack.extend(n.named_children)
    return out


def _not_constant(facts: FunctionFacts, node: Node, depth: int = 0) -> str | None:
    """Why ``node`` is certainly not a compile-time constant (the name to blame), else None."""
    if depth > 8:
        return None
    for n in _plain_names(facts, node):
        if n.type == "field_expression":
            return facts.text(n)
        key = facts.key_of(n)
        if key in facts.template_params:
            continue
        local = facts.local(key)
        if local is not None:
            if local.is_shared or local.value is None and local.is_const:
                continue
            if not local.is_const:
                return facts.text(n)
            if local.value is not None and _not_constant(facts, local.value, depth + 1) is not None:
                return facts.text(n)
            continue
        if key in facts.param_names:
            return facts.text(n)
    return None


class SharedSizeNotConstant(Rule):
    meta = RuleMeta("STC013", "shared-size-not-constant", "Shared array sized by a non-constant",
                    Severity.ERROR)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        for d in facts.decls:
            if not d.is_shared or d.is_extern or d.array_size is None:
                continue
            bad = _not_constant(facts, d.array_size)
            if bad is None:
                continue
            out.emit(d.array_size, f"`__shared__` array `{d.name}` is sized by `{bad}`, which is not a "
                                   f"compile-time constant, so nvcc rejects it; use a template parameter or "
                                   f"constant, or `extern __shared__ {d.type_text} {d.name}[];` with the size "
                                   f"in the launch")


RULE = SharedSizeNotConstant()
