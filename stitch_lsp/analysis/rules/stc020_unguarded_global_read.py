"""STC020: a kernel reads global memory at a grid-wide index with no bounds check.

Reported in kernels that check their index against a size elsewhere (so they expect a
partial last block) and whose stores are guarded or go elsewhere: the read sits outside
the check (`float v = x[i];` before `if (i < n)`), or inside a `?:` whose condition is
not the array's bound (`c < n ? w[c] : 0` in a kernel whose `if`s check `c` against `C`:
`n` counts something else). Where a store at a grid-wide index is
unguarded too, STC001 reports it and the same guard fixes both.
"""

from __future__ import annotations

from stitch_lsp.analysis.cuda_facts import FunctionFacts
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.analysis.rules.bounds import global_accesses, grid_index, per_thread_slot, suggest_guard, wrap_fix
from stitch_lsp.analysis.rules.guards import _exit_table, comparisons, is_check, kernel_traits, tail_guards
from stitch_lsp.analysis.rules.stc001_unguarded_global_write import advice, constexpr_branch, unguarded
from stitch_lsp.findings import Severity


class UnguardedGlobalRead(Rule):
    meta = RuleMeta("STC020", "unguarded-global-read",
                    "Global read at a thread-derived index without a bounds check", Severity.WARNING)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        if not facts.is_global:
            return
        tail_bounds, grid_stride = kernel_traits(facts)
        if not tail_bounds:
            return  # a kernel with no bounds check at all relies on exact multiples (STC001 covers its stores)
        accesses = [a for a in global_accesses(facts) if (unguarded(facts, a) or _ternary_only(facts, a))
                    and not per_thread_slot(facts, a, grid_stride)]
        if any(a.is_write for a in accesses):
            return  # STC001 reports the store; its guard covers these reads
        seen: set[str] = set()
        for a in accesses:
            if not a.is_read or constexpr_branch(facts, a.node.start_byte):
                continue
            key = f"{a.base}[{a.index_text}]"
            if key in seen:
                continue
            seen.add(key)
            guard = suggest_guard(facts, a)
            if not unguarded(facts, a):
                cond = next(c.cond for c in reversed(facts.controls_over(a.node.start_byte)) if c.kind == "ternary")
                out.emit(a.node, f"`{facts.text(a.node)}` is read under `{facts.text(cond)} ?`, which is not a bound "
                                 f"this kernel checks its index against elsewhere; threads of the last block past "
                                 f"the end read out of bounds. {advice(guard)}")
                continue
            out.emit(a.node, f"`{facts.text(a.node)}` reads global memory at a grid-wide index with no bounds "
                             f"check; threads of the last block past the end read out of bounds. {advice(guard)}",
                     fix=wrap_fix(facts, a, guard))


def _statement_bounds(facts: FunctionFacts) -> frozenset[str]:
    """The parameters the kernel's `if`s and loops check a block-derived index against."""
    hit = facts.memo.get("statement_bounds")
    if hit is None:
        names: set[str] = set()
        for c in facts.controls:
            if c.kind != "ternary" and c.cond is not None:
                for _, params in tail_guards(facts, c.cond):
                    names |= params
        hit = facts.memo["statement_bounds"] = frozenset(names)
    return hit


def _ternary_only(facts: FunctionFacts, a) -> bool:
    """A read whose only check is the `?:` it sits in (`c < n ? w[c] : 0`), where that check
    compares with none of the bounds the kernel's own `if`s and loops use: `n` bounds
    something else (a count, a row), not the array read, so the read is unchecked."""
    if not a.is_read or not grid_index(facts, a):
        return False
    at = a.node.start_byte
    ternaries = [c for c in facts.controls_over(at) if c.kind == "ternary" and c.cond is not None]
    if not ternaries:
        return False
    # Checked anyway without the ternaries? Then it is guarded.
    if _checked_without_ternaries(facts, at):
        return False
    bounds = _statement_bounds(facts)
    if not bounds:
        return False
    for t in ternaries:
        cons = t.node.child_by_field_name("consequence")
        if cons is None or not cons.start_byte <= at < cons.end_byte:
            return False  # in the `:` branch: the check is not of this read's index
        for cmp in comparisons(facts, t.cond):
            if facts.refs(cmp) & bounds:
                return False
    return True


def _checked_without_ternaries(facts: FunctionFacts, byte: int) -> bool:
    for c in facts.controls_over(byte):
        if c.kind != "ternary" and is_check(facts, c.cond):
            return True
    returns, loop_exits = _exit_table(facts)
    if any(c.end <= byte and is_check(facts, c.cond) for c in returns):
        return True
    return any(c.end <= byte and is_check(facts, c.cond) and any(l.governs(byte) for l in loops)
               for c, loops in loop_exits)


RULE = UnguardedGlobalRead()
