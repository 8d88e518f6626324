"""STC017: a loop refills shared memory while other threads may still read the previous
iteration's contents (no barrier between the last read and the next write)."""

from __future__ import annotations

from stitch_lsp.analysis.cuda_facts import FunctionFacts
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.analysis.rules.shared_memory import shared_events
from stitch_lsp.findings import Severity


class SharedOverwrite(Rule):
    meta = RuleMeta("STC017", "shared-overwrite-in-loop",
                    "Loop overwrites shared memory other threads may still be reading", Severity.WARNING)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        if facts.is_host_code or not facts.shared_names():
            return
        ev = shared_events(facts)
        if not ev.has_writes:
            return
        flagged: set[int] = set()
        for loop in facts.controls:
            if loop.kind != "loop":
                continue
            inside = [(pos, kind, a) for pos, _, kind, a in ev.within(loop.gov_start, loop.end)]
            barriers = [pos for pos, kind, _ in inside if kind == "barrier"]
            if not barriers:
                continue  # STC003 covers loops with no barrier at all
            first, last = min(barriers), max(barriers)
            # Written before the loop's first barrier, read (by others) after its last one:
            # the next iteration's write can land before a slower thread's read.
            head_writes = [a for pos, kind, a in inside if kind == "write" and pos < first]
            tail_reads = [a for pos, kind, a in inside if kind == "read" and pos > last]
            for w in head_writes:
                if w.node.id in flagged:
                    continue
                read = next((r for r in tail_reads if r.base == w.base and not ev.same_thread(w, r)), None)
                if read is None:
                    continue
                flagged.add(w.node.id)
                out.emit(w.node, f"`{facts.text(w.node)}` refills shared memory that other threads read at the end "
                                 f"of the previous iteration (`{facts.text(read.node)}`) with no barrier in between; "
                                 f"add `__syncthreads()` at the end of the loop body")


RULE = SharedOverwrite()
