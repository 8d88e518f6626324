"""STC008: a kernel's pointer parameter is only read but not declared `const` (and `__restrict__`)."""

from __future__ import annotations

import re

from stitch_lsp.analysis.cuda_declarations import Param
from stitch_lsp.analysis.cuda_facts import ATOMICS, FunctionFacts
from stitch_lsp.analysis.cuda_text import operands
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.findings import Fix, Severity

# Calls that read through a pointer argument and never write through it.
READ_ONLY_CALLS = frozenset({
    "__ldg", "__ldca", "__ldcg", "__ldcs", "__ldlu", "__ldcv", "printf", "__builtin_assume_aligned",
    "__prefetch_global_l1", "__prefetch_global_l2",
})


def _write_targets(facts: FunctionFacts):
    for a in facts.assigns:
        left = a.child_by_field_name("left")
        if left is not None:
            yield left
    for u in facts.updates:
        arg = u.child_by_field_name("argument")
        if arg is not None:
            yield arg
    for c in facts.calls:
        if c.name in ATOMICS and c.args:
            yield c.args[0]


def _aliases(facts: FunctionFacts, name: str) -> set[str]:
    names = {name}
    changed = True
    while changed:
        changed = False
        for d in facts.decls:
            if d.is_pointer and d.key not in names and d.value is not None and facts.base_names(d.value) & names:
                names.add(d.key)
                changed = True
        for a in facts.assigns:
            left, right = a.child_by_field_name("left"), a.child_by_field_name("right")
            if left is not None and right is not None and left.type == "identifier":
                lname = facts.key_of(left)
                if lname not in names and facts.base_names(right) & names:
                    names.add(lname)
                    changed = True
    return names


def _pointer_names(facts: FunctionFacts, node) -> set[str]:
    """Names whose address an argument passes on (`x`, `x + i`, `&x[i]`, casts); a loaded
    value (`x[i]`) passes none."""
    t = node.type
    if t == "identifier":
        return {facts.key_of(node)}
    if t == "pointer_expression":
        op = node.child_by_field_name("operator")
        arg = node.child_by_field_name("argument")
        if arg is None:
            return set()
        if op is not None and facts.text(op) == "&":
            return facts.base_names(arg)
        return set()  # *p is a value
    if t in ("binary_expression", "parenthesized_expression", "conditional_expression", "cast_expression"):
        out: set[str] = set()
        for c in operands(node):
            if c.type != "type_descriptor":
                out |= _pointer_names(facts, c)
        return out
    if t == "call_expression":
        fn = node.child_by_field_name("function")
        args = node.child_by_field_name("arguments")
        if fn is not None and fn.type == "template_function" and args is not None:  # reinterpret_cast<T*>(p)
            return set().union(*(_pointer_names(facts, a) for a in operands(args)))
    return set()


def _touched_names(facts: FunctionFacts) -> set[str]:
    """Names written through, or handed to code we do not see (which may write)."""
    touched: set[str] = set()
    for target in _write_targets(facts):
        touched |= facts.base_names(target)
    for c in (*facts.calls, *facts.method_calls):
        if c.name not in READ_ONLY_CALLS:
            for arg in c.args:
                touched |= _pointer_names(facts, arg)
    for launch in facts.launches:
        args = launch.node.child_by_field_name("arguments")
        if args is not None:
            touched |= facts.base_names(args)
    touched |= facts.unknown_names()  # a statement the grammar cannot read may write what it names
    return touched


class MutableReadOnlyParam(Rule):
    meta = RuleMeta("STC008", "readonly-param-not-const",
                    "Read-only pointer parameter without `const` / `__restrict__`", Severity.INFO)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        if not facts.is_global or facts.body is None:
            return
        candidates = [p for p in facts.params if p.info.is_pointer and not p.info.is_const]
        if not candidates:
            return
        body = facts.src[facts.body.start_byte:facts.body.end_byte]
        touched = _touched_names(facts)
        for p in candidates:
            info = p.info
            if not re.search(rb"(?<![\w.])(?<!->)" + re.escape(info.name.encode()) + rb"\b", body):
                continue  # unused (a `.y` field is not the parameter `y`): nothing to say
            if _aliases(facts, info.name) & touched:
                continue
            edits = [out.insert_before(p.node, "const ")]
            # `__restrict__` promises no other pointer reaches the same memory. An output of the
            # same type may be the same buffer (an in-place launch): then only `const` is safe.
            outputs = [o.info.name for o in facts.params if o is not p and o.info.is_pointer and not o.info.is_const
                       and _pointee(o.info.type_text) == _pointee(info.type_text)
                       and _aliases(facts, o.info.name) & touched]
            if not info.is_restrict and p.star is not None and not outputs:
                nxt = facts.src[p.star.end_byte:p.star.end_byte + 1]
                edits.append(out.insert_after(p.star, " __restrict__" if nxt.isspace() else " __restrict__ "))
            suggested = _apply(facts.text(p.node), p, edits, facts)
            also = (f" (and `__restrict__` if it never overlaps `{outputs[0]}`: then loads can take the read-only "
                    f"cache path)" if outputs and not info.is_restrict else "")
            out.emit(p.node, f"`{info.name}` is only read; declare it `{suggested}`{also} so the compiler knows "
                             f"and can keep and reorder its loads",
                     fix=Fix(title=f"Declare `{info.name}` as `{suggested}`", edits=tuple(edits)))


def _pointee(type_text: str) -> str:
    return " ".join(re.sub(r"\b(?:const|volatile|__restrict__|__restrict|restrict)\b|[*&]", " ", type_text).split())


def _apply(text: str, p: Param, edits, facts: FunctionFacts) -> str:
    out = "const " + text
    if len(edits) > 1 and p.star is not None:
        cut = p.star.end_byte - p.node.start_byte
        raw = facts.src[p.node.start_byte:p.node.end_byte]
        rest = raw[cut:].decode("utf-8", "replace")
        out = "const " + raw[:cut].decode("utf-8", "replace") + (" __restrict__" if rest[:1].isspace() else " __restrict__ ") + rest
    return " ".join(out.split())


RULE = MutableReadOnlyParam()
