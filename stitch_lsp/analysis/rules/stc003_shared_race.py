"""STC003: shared memory written by one thread and read by another with no barrier between."""

from __future__ import annotations

from stitch_lsp.analysis.cuda_facts import Access, FunctionFacts
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.analysis.rules.shared_memory import shared_events
from stitch_lsp.findings import Severity


class SharedRace(Rule):
    meta = RuleMeta("STC003", "shared-race",
                    "Shared memory written then read by other threads with no barrier between", Severity.WARNING)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        if facts.is_host_code:
            return
        if not facts.shared_names():
            return
        ev = shared_events(facts)
        if not ev.has_writes:
            return
        events, barriers, same_thread = ev.events, ev.barriers, ev.same_thread
        flagged: set[int] = set()
        pending: dict[str, list[Access]] = {}
        for _, _, kind, a in events:
            if kind == "barrier":
                pending.clear()
            elif kind == "write":
                pending.setdefault(a.base, []).append(a)
            else:
                writes = pending.get(a.base)
                if writes and not any(same_thread(w, a) for w in writes):
                    self._emit(facts, out, a, writes[-1], flagged)
        # A loop with no barrier at all: a write in one iteration races with reads in the next.
        for loop in facts.controls:
            if loop.kind != "loop" or any(loop.governs(b) for b in barriers):
                continue
            inside = [a for _, _, k, a in events if a is not None and loop.governs(a.node.start_byte)]
            for a in inside:
                if not a.is_read or a.node.id in flagged:
                    continue
                writes = [w for w in inside if w.is_write and w.base == a.base]
                if writes and not any(same_thread(w, a) for w in writes):
                    self._emit(facts, out, a, writes[-1], flagged)

    @staticmethod
    def _emit(facts: FunctionFacts, out: Emitter, read: Access, write: Access, flagged: set[int]) -> None:
        if read.node.id in flagged:
            return
        flagged.add(read.node.id)
        out.emit(read.node, f"`{facts.text(read.node)}` reads shared memory that other threads write "
                            f"(`{facts.text(write.node)}` above) with no barrier in "
                            f"between; add `__syncthreads()` (or `__syncwarp()` within a warp) before the read")


RULE = SharedRace()
