"""STC010: a shared-memory tree reduction that runs its last steps with block barriers."""

from __future__ import annotations

import re

from stitch_lsp.analysis.cuda_facts import BLOCK_BARRIERS, Control, FunctionFacts, index_expr
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.findings import Severity

_HALVING = re.compile(r"^(\w+)\s*(?:>>=\s*1|/=\s*2|=\s*\1\s*(?:>>\s*1|/\s*2))$")
WARP = 32


def _halving_var(facts: FunctionFacts, loop: Control) -> str | None:
    update = loop.node.child_by_field_name("update")
    if update is None:
        return None
    m = _HALVING.match(" ".join(facts.text(update).split()))
    return m.group(1) if m else None


def _stops_above_warp(facts: FunctionFacts, loop: Control, var: str) -> bool:
    """`s > 32` (then warp shuffles finish) rather than `s > 0`."""
    cond = loop.cond
    if cond is None or cond.type != "binary_expression":
        return False
    op = facts.text(cond.child_by_field_name("operator"))
    left, right = cond.child_by_field_name("left"), cond.child_by_field_name("right")
    if left is None or right is None or facts.text(left) != var:
        return False
    bound = facts.resolve_int(right)
    if bound is None:
        return True  # a bound we cannot see: do not guess
    return (op == ">" and bound >= WARP - 1) or (op == ">=" and bound >= WARP)


def _combines(facts: FunctionFacts, loop: Control, var: str, shared: frozenset[str]) -> bool:
    """The loop folds the upper half into the lower one: it reads `s[.. + var]` and writes
    slots of the same array at indices without `var` (`s[t] += s[t + stride]`). A sorting
    network swaps both partners (`Comparator(s[pos], s[pos + stride])`), or writes the
    partner too: that is not a reduction."""
    inside = [a for a in facts.accesses if a.base in shared and loop.governs(a.node.start_byte)]
    uses_var = lambda a: any(var in facts.refs(index_expr(i)) for i in a.indices)
    for r in inside:
        if not r.is_read or not uses_var(r):
            continue
        writes = [w for w in inside if w.is_write and w.base == r.base]
        if writes and not any(uses_var(w) for w in writes):
            return True
    return False


class SharedTreeReduction(Rule):
    meta = RuleMeta("STC010", "shared-tree-reduction",
                    "Shared-memory tree reduction where warp shuffles would do", Severity.INFO)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        if facts.is_host_code:
            return
        shared = facts.shared_names()
        if not shared:
            return
        for loop in facts.controls:
            if loop.kind != "loop" or loop.node.type != "for_statement":
                continue
            var = _halving_var(facts, loop)
            if var is None or _stops_above_warp(facts, loop, var):
                continue
            if not any(c.name in BLOCK_BARRIERS and loop.governs(c.node.start_byte) for c in facts.calls):
                continue
            if not _combines(facts, loop, var, shared):
                continue
            body = loop.node.child_by_field_name("body")
            header_end = next((c for c in reversed(loop.node.children)
                               if body is not None and c.end_byte <= body.start_byte and c.type == ")"), None)
            rng = facts.cols.span(loop.node, header_end) if header_end is not None else facts.range(loop.node)
            out.emit(rng, "this tree reduction halves down to one value with a block-wide `__syncthreads()` "
                          "per step; once 32 values are left, finish in registers with `__shfl_down_sync` "
                          "(no shared memory, no barriers)")


RULE = SharedTreeReduction()
