"""STC020: a kernel reads global memory at a grid-wide index with no bounds check.

Reported in kernels that check their index against a size elsewhere (so they expect a
partial last block) and whose stores are guarded or go elsewhere: the read sits outside
the check (`float v = x[i];` before `if (i < n)`). Where a store at a grid-wide index is
unguarded too, STC001 reports it and the same guard fixes both.
"""

from __future__ import annotations

from stitch_lsp.analysis.cuda_facts import FunctionFacts
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.analysis.rules.bounds import global_accesses, per_thread_slot, suggest_guard, wrap_fix
from stitch_lsp.analysis.rules.guards import kernel_traits
from stitch_lsp.analysis.rules.stc001_unguarded_global_write import advice, unguarded
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
        accesses = [a for a in global_accesses(facts) if unguarded(facts, a)
                    and not per_thread_slot(facts, a, grid_stride)]
        if any(a.is_write for a in accesses):
            return  # STC001 reports the store; its guard covers these reads
        seen: set[str] = set()
        for a in accesses:
            if not a.is_read:
                continue
            key = f"{a.base}[{a.index_text}]"
            if key in seen:
                continue
            seen.add(key)
            guard = suggest_guard(facts, a)
            out.emit(a.node, f"`{facts.text(a.node)}` reads global memory at a grid-wide index with no bounds "
                             f"check; threads of the last block past the end read out of bounds. {advice(guard)}",
                     fix=wrap_fix(facts, a, guard))


RULE = UnguardedGlobalRead()
