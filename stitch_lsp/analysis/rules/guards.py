"""Which code runs for which threads: bounds checks, early exits, divergent conditions."""

from __future__ import annotations

from tree_sitter import Node

from stitch_lsp.analysis.cuda_facts import Control, FunctionFacts, contains_return, is_relational


def _exits(node: Node) -> Node | None:
    """The consequence of an `if` when it leaves the function or the loop iteration."""
    return node.child_by_field_name("consequence")


def early_exits(facts: FunctionFacts, before: int) -> list[Control]:
    """`if (...) return;` (or `continue`/`break` in a loop) that ends before byte ``before``."""
    out = []
    for c in facts.controls:
        if c.kind != "if" or c.end > before:
            continue
        cons = _exits(c.node)
        if cons is None:
            continue
        if contains_return(cons):
            out.append(c)
        elif _has_loop_exit(cons) and any(l.governs(c.node.start_byte) and l.governs(before)
                                           for l in facts.controls if l.kind == "loop"):
            out.append(c)
    return out


def _has_loop_exit(node: Node) -> bool:
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type in ("continue_statement", "break_statement"):
            return True
        if n.type in ("for_statement", "while_statement", "do_statement", "switch_statement"):
            continue
        stack.extend(n.children)
    return False


def is_bounds_checked(facts: FunctionFacts, byte: int) -> bool:
    """A comparison decides whether code at ``byte`` runs: an enclosing if/loop/ternary
    condition, or an earlier early exit."""
    for c in facts.controls_over(byte):
        if is_relational(facts, c.cond):
            return True
    return any(is_relational(facts, c.cond) for c in early_exits(facts, byte))


def thread_dependent_control(facts: FunctionFacts, byte: int) -> Control | None:
    """The innermost condition over ``byte`` whose outcome differs between threads of a block."""
    hit = None
    for c in facts.controls_over(byte):
        if c.cond is not None and facts.depends_on_thread(c.cond):
            hit = c
    return hit


def thread_dependent_exit(facts: FunctionFacts, byte: int) -> Control | None:
    for c in early_exits(facts, byte):
        if c.cond is not None and facts.depends_on_thread(c.cond) and contains_return(_exits(c.node)):
            return c
    return None
