"""STC001: a kernel writes global memory at a grid-wide index with no bounds check."""

from __future__ import annotations

from stitch_lsp.analysis.cuda_facts import FunctionFacts
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.analysis.rules.bounds import (
    clamped, global_accesses, grid_index, per_thread_slot, suggest_guard, wrap_fix,
)
from stitch_lsp.analysis.rules.guards import is_bounds_checked, kernel_traits
from stitch_lsp.findings import Severity


def unguarded(facts: FunctionFacts, a) -> bool:
    return grid_index(facts, a) and not is_bounds_checked(facts, a.node.start_byte) and not clamped(facts, a)


def advice(guard) -> str:
    if guard.condition is not None:
        return f"Guard it: `if ({guard.condition})`"
    return f"Guard it by comparing `{guard.index}` with the array's extent (pass it to the kernel if it is not there)"


class UnguardedGlobalWrite(Rule):
    meta = RuleMeta("STC001", "unguarded-global-write",
                    "Global write at a thread-derived index without a bounds check", Severity.WARNING)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        if not facts.is_global:
            return
        grid_stride = kernel_traits(facts)[1]
        for a in global_accesses(facts):
            if not a.is_write or not unguarded(facts, a) or per_thread_slot(facts, a, grid_stride):
                continue
            guard = suggest_guard(facts, a)
            out.emit(a.node, f"`{facts.text(a.node)}` writes global memory at a grid-wide index with no bounds "
                             f"check; threads of the last block past the end write out of bounds. {advice(guard)}",
                     fix=wrap_fix(facts, a, guard))


RULE = UnguardedGlobalWrite()
