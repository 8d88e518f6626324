"""STC003: shared memory written by one thread and read by another with no barrier between."""

from __future__ import annotations

import bisect

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
        events, same_thread = ev.events, ev.same_thread
        flagged: set[int] = set()
        # Writes since the last barrier, per array; writes alike (same index, same branch)
        # are kept once, so a long barrier-free stretch stays linear.
        pending: dict[str, dict[tuple, Access]] = {}
        for _, _, kind, a in events:
            if kind == "barrier":
                pending.clear()
            elif kind == "write":
                pending.setdefault(a.base, {})[ev.write_key(a)] = a
            else:
                writes = [w for w in pending.get(a.base, {}).values() if not ev.disjoint(w, a)]
                if writes and not any(same_thread(w, a) for w in writes):
                    self._emit(facts, out, a, writes[-1], flagged)
        # A loop with no barrier at all: a write in one iteration races with reads in the next.
        barriers = sorted(ev.barriers)
        for loop in facts.controls:
            if loop.kind != "loop":
                continue
            i = bisect.bisect_left(barriers, loop.gov_start)
            if i < len(barriers) and barriers[i] < loop.end:
                continue
            inside = [a for _, _, k, a in ev.within(loop.gov_start, loop.end)
                      if a is not None and loop.governs(a.node.start_byte)]
            by_base: dict[str, dict[tuple, Access]] = {}
            for w in inside:
                if w.is_write:
                    by_base.setdefault(w.base, {})[ev.write_key(w)] = w
            for a in inside:
                if not a.is_read or a.node.id in flagged:
                    continue
                writes = [w for w in by_base.get(a.base, {}).values() if not ev.disjoint(w, a, loop)]
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
