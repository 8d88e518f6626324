"""STC002: a block-wide barrier that only some threads of the block reach."""

from __future__ import annotations

from stitch_lsp.analysis.cuda_facts import FunctionFacts
from stitch_lsp.analysis.cuda_text import squash
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.analysis.rules.guards import thread_dependent_control, thread_dependent_loop_exit
from stitch_lsp.findings import Severity

# Barriers every thread of the block must reach.
_BLOCK_BARRIERS = frozenset({"__syncthreads", "__syncthreads_count", "__syncthreads_and", "__syncthreads_or",
                             "__barrier_sync"})
_GROUP_SYNCS = frozenset({"cg::sync", "cooperative_groups::sync"})
# How a cooperative-groups object that spans the whole block (or grid) is written.
_WHOLE_GROUP = ("this_thread_block", "this_grid", "grid_group", "thread_block")


def _group_is_block_wide(facts: FunctionFacts, obj) -> bool:
    """Whether a cooperative-groups object is the whole block or grid (not a tile, not a
    coalesced group). Unknown objects count as not block-wide: the rule stays silent."""
    if obj is None:
        return False
    text = squash(facts.text(obj))
    if obj.type == "call_expression":
        return any(text.split("(")[0].endswith(w) for w in ("this_thread_block", "this_grid"))
    key = facts.key_of(obj) if obj.type == "identifier" else text
    d = facts.local(key)
    if d is not None:
        described = f"{d.type_text} {facts.text(d.value) if d.value is not None else ''}"
    else:
        p = facts.param_names.get(key)
        if p is None:
            return False
        described = p.info.type_text
    if any(w in described for w in ("tile", "partition", "coalesced", "labeled")):
        return False
    return any(w in described for w in _WHOLE_GROUP)


def block_barriers(facts: FunctionFacts):
    """Calls every thread of the block (or grid) must reach, with how they are shown."""
    for c in facts.calls:
        if c.name in _BLOCK_BARRIERS:
            yield c
        elif c.name in _GROUP_SYNCS and c.args and _group_is_block_wide(facts, c.args[0]):
            yield c
    for c in facts.method_calls:
        if c.name == "sync":
            fn = c.node.child_by_field_name("function")
            if _group_is_block_wide(facts, fn.child_by_field_name("argument") if fn is not None else None):
                yield c


def _enclosing_loops(facts: FunctionFacts, ctl):
    return [c for c in facts.controls_over(ctl.node.start_byte) if c.kind == "loop" and c is not ctl]


def _meets_another_barrier(facts: FunctionFacts, ctl, barriers: list[int]) -> bool:
    """Whether threads that skip the barriers inside ``ctl`` still reach a block barrier:
    one after ``ctl``, or one elsewhere in a loop around it. (Threads that exit instead
    release the barrier: PTX waits only for threads that have not exited.)"""
    lo, hi = ctl.node.start_byte, ctl.node.end_byte
    if any(b >= hi for b in barriers):
        return True
    for loop in _enclosing_loops(facts, ctl):
        if any(loop.governs(b) and not lo <= b < hi for b in barriers):
            return True
    return False


class DivergentBarrier(Rule):
    meta = RuleMeta("STC002", "divergent-barrier",
                    "`__syncthreads()` under a condition that depends on the thread", Severity.WARNING)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        if facts.is_host_code:
            return
        found = list(block_barriers(facts))
        positions = [b.node.start_byte for b in found]
        for b in found:
            shown = squash(facts.text(b.node))
            at = b.node.start_byte
            ctl = thread_dependent_control(facts, at)
            if ctl is not None:
                # The Programming Guide allows __syncthreads() in conditional code only where the
                # condition is the same for the whole block (synccheck reports a divergent
                # barrier otherwise), whatever follows the branch. A loop whose trip count
                # differs is reported where the threads that left it meet another barrier.
                if ctl.kind == "loop" and not _meets_another_barrier(facts, ctl, positions):
                    continue
                cond = squash(facts.text(ctl.cond))
                where = "a loop whose trip count" if ctl.kind == "loop" else "a branch whose condition"
                out.emit(b.node, f"`{shown}` is inside {where} depends on the thread (`{cond}`); threads that "
                                 f"skip it arrive at a later barrier instead, so the block's barriers pair up "
                                 f"wrongly (or hang). Hoist the barrier out and guard only the work")
                continue
            leave = thread_dependent_loop_exit(facts, at)
            if leave is not None:
                c, kind = leave
                loop = facts.loops_over(c.node.start_byte)[-1]
                if kind == "break" and not _meets_another_barrier(facts, loop, positions):
                    continue
                cond = squash(facts.text(c.cond))
                out.emit(b.node, f"`{shown}` is in a loop that some threads leave early (`if ({cond}) {kind};`); "
                                 f"they arrive at a different barrier than the threads waiting here. Keep every "
                                 f"thread in the loop to the barrier and guard the work instead")


RULE = DivergentBarrier()
