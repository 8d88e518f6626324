"""STC002: a block-wide barrier that only some threads of the block reach."""

from __future__ import annotations

from stitch_lsp.analysis.cuda_facts import BLOCK_BARRIERS, FunctionFacts
from stitch_lsp.analysis.cuda_text import squash
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.analysis.rules.guards import thread_dependent_control, thread_dependent_exit
from stitch_lsp.findings import Severity

# Cooperative-groups objects whose .sync() is not block-wide.
_WARP_GROUP_HINTS = ("tile", "tiled_partition", "coalesced", "warp")


def _block_wide_method(facts: FunctionFacts, call) -> bool:
    fn = call.node.child_by_field_name("function")
    obj = fn.child_by_field_name("argument") if fn is not None else None
    if obj is None:
        return False
    name = facts.text(obj)
    d = facts.local(name)
    described = f"{d.type_text} {facts.text(d.value) if d.value is not None else ''}" if d is not None else name
    return not any(h in described.lower() for h in _WARP_GROUP_HINTS)


class DivergentBarrier(Rule):
    meta = RuleMeta("STC002", "divergent-barrier",
                    "`__syncthreads()` under a condition that depends on the thread", Severity.ERROR)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        if facts.is_host_code:
            return
        barriers = [c for c in facts.calls if c.name in BLOCK_BARRIERS]
        barriers += [c for c in facts.method_calls if c.name == "sync" and _block_wide_method(facts, c)]
        for b in barriers:
            shown = squash(facts.text(b.node))
            ctl = thread_dependent_control(facts, b.node.start_byte)
            if ctl is not None:
                cond = squash(facts.text(ctl.cond))
                where = "a loop whose trip count" if ctl.kind == "loop" else "a branch whose condition"
                out.emit(b.node, f"`{shown}` is inside {where} depends on the thread (`{cond}`); threads that "
                                 f"skip it hang the block or corrupt the barrier. Hoist the barrier out")
                continue
            ret = thread_dependent_exit(facts, b.node.start_byte)
            if ret is not None:
                cond = squash(facts.text(ret.cond))
                out.emit(b.node, f"`{shown}` follows a thread-dependent early return (`if ({cond}) return`); "
                                 f"returned threads never reach the barrier. Keep every thread alive "
                                 f"to the barrier and guard the work instead")


RULE = DivergentBarrier()
