"""Which code runs for which threads: bounds checks, early exits, divergent conditions."""

from __future__ import annotations

from tree_sitter import Node

from stitch_lsp.analysis.cuda_facts import Control, FunctionFacts, contains_return, is_relational


def _exits(node: Node) -> Node | None:
    """The consequence of an `if` when it leaves the function or the loop iteration."""
    return node.child_by_field_name("consequence")


def _exit_table(facts: FunctionFacts) -> tuple[list[Control], list[tuple[Control, list[Control]]]]:
    """Every `if` whose consequence returns, and every one that leaves a loop iteration
    (with the loops around it), computed once per function."""
    hit = facts.memo.get("exit_table")
    if hit is None:
        returns, loop_exits = [], []
        for c in facts.controls:
            if c.kind != "if":
                continue
            cons = _exits(c.node)
            if cons is None:
                continue
            if contains_return(cons):
                returns.append(c)
            elif _has_loop_exit(cons):
                loops = facts.loops_over(c.node.start_byte)
                if loops:
                    loop_exits.append((c, loops))
        hit = facts.memo["exit_table"] = (returns, loop_exits)
    return hit


def early_exits(facts: FunctionFacts, before: int) -> list[Control]:
    """`if (...) return;` (or `continue`/`break` in a loop) that ends before byte ``before``."""
    returns, loop_exits = _exit_table(facts)
    out = [c for c in returns if c.end <= before]
    out += [c for c, loops in loop_exits if c.end <= before and any(l.governs(before) for l in loops)]
    out.sort(key=lambda c: c.node.start_byte)
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
    returns, loop_exits = _exit_table(facts)
    first = facts.memo.get("first_checked_return")
    if first is None:
        ends = [c.end for c in returns if is_relational(facts, c.cond)]
        first = facts.memo["first_checked_return"] = min(ends, default=-1)
    if 0 <= first <= byte:
        return True
    return any(c.end <= byte and is_relational(facts, c.cond) and any(l.governs(byte) for l in loops)
               for c, loops in loop_exits)


def thread_dependent_control(facts: FunctionFacts, byte: int) -> Control | None:
    """The innermost condition over ``byte`` whose outcome differs between threads of a block."""
    hit = None
    for c in facts.controls_over(byte):
        if c.cond is not None and facts.depends_on_thread(c.cond):
            hit = c
    return hit


def thread_dependent_exit(facts: FunctionFacts, byte: int) -> Control | None:
    """The first `if (...) return;` before ``byte`` that only some threads take."""
    divergent = facts.memo.get("divergent_returns")
    if divergent is None:
        returns, _ = _exit_table(facts)
        divergent = facts.memo["divergent_returns"] = [
            c for c in returns if c.cond is not None and facts.depends_on_thread(c.cond)]
    return next((c for c in divergent if c.end <= byte), None)
