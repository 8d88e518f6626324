"""STC001: a kernel writes global memory at a grid-wide index with no bounds check."""

from __future__ import annotations

from stitch_lsp.analysis.cuda_facts import INT32_TYPES, INT64_TYPES, FunctionFacts, index_expr
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.analysis.rules.bounds import (
    size_name, clamped, global_accesses, grid_index, per_thread_slot, suggest_guard, wrap_fix,
)
from stitch_lsp.analysis.rules.guards import is_bounds_checked, kernel_traits
from stitch_lsp.findings import Severity


def constexpr_branch(facts: FunctionFacts, byte: int) -> bool:
    """Code at ``byte`` sits in a branch of an `if constexpr` (a compile-time specialisation)."""
    return any(c.kind == "if" and any(ch.type == "constexpr" for ch in c.node.children)
               for c in facts.controls_over(byte))


def unguarded(facts: FunctionFacts, a) -> bool:
    return grid_index(facts, a) and not is_bounds_checked(facts, a.node.start_byte) and not clamped(facts, a)


def takes_extent(facts: FunctionFacts) -> bool:
    """Whether a size comes in: an integer parameter named like one (`n`, `count`, `len`),
    or one that shapes the kernel's indexing or its conditions (a width, a stride). Then a
    bounds check is possible, and its absence is a finding."""
    hit = facts.memo.get("takes_extent")
    if hit is None:
        ints = {p.info.name for p in facts.params if not p.info.is_pointer and
                p.info.type_text.replace("const ", "").strip() in INT32_TYPES | INT64_TYPES}
        used: set[str] = set()
        if ints:
            for a in facts.accesses:
                for i in a.indices:
                    used |= facts.closure(facts.refs(index_expr(i)))
            for c in facts.controls:
                if c.cond is not None:
                    used |= facts.closure(facts.refs(c.cond))
        hit = facts.memo["takes_extent"] = bool(ints & used) or any(size_name(n) for n in ints)
    return hit


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
        sized = takes_extent(facts)
        for a in global_accesses(facts):
            if not a.is_write or not unguarded(facts, a) or per_thread_slot(facts, a, grid_stride):
                continue
            guard = suggest_guard(facts, a)
            if constexpr_branch(facts, a.node.start_byte):
                # `if constexpr (kIsEven) { y[i] = ...; } else { if (i < n) ... }`: the launcher picks
                # this specialisation when the grid covers the data exactly.
                out.emit(a.node, f"`{facts.text(a.node)}` writes global memory at a grid-wide index with no bounds "
                                 f"check in a compile-time branch: correct only while the launcher takes this "
                                 f"branch for sizes the grid covers exactly", severity=Severity.HINT)
                continue
            if not sized:
                # No size comes in: the kernel's contract is a grid that exactly covers the data.
                out.emit(a.node, f"`{facts.text(a.node)}` writes global memory at a grid-wide index with no bounds "
                                 f"check: correct only while the grid exactly covers the array, and the kernel "
                                 f"takes no size to check against", severity=Severity.HINT)
                continue
            out.emit(a.node, f"`{facts.text(a.node)}` writes global memory at a grid-wide index with no bounds "
                             f"check; threads of the last block past the end write out of bounds. {advice(guard)}",
                     fix=wrap_fix(facts, a, guard))


RULE = UnguardedGlobalWrite()
