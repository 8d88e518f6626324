"""STC001: a kernel writes global memory at a thread-derived index with no bounds check."""

from __future__ import annotations

from stitch_lsp.analysis.cuda_facts import FunctionFacts, index_expr
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.analysis.rules.guards import is_bounds_checked
from stitch_lsp.findings import Severity


_CLAMPS = frozenset({"min", "max", "umin", "umax", "llmin", "llmax", "std::min", "std::max", "clamp"})


def _clamped(facts: FunctionFacts, index) -> bool:
    """`y[min(i, n - 1)]`: the index is clamped into range instead of checked."""
    return any(c.name in _CLAMPS and index.start_byte <= c.node.start_byte < index.end_byte for c in facts.calls)


class UnguardedGlobalWrite(Rule):
    meta = RuleMeta("STC001", "unguarded-global-write",
                    "Global write at a thread-derived index without a bounds check", Severity.WARNING)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        if not facts.is_global:
            return
        pointers = facts.global_pointer_names()
        for a in facts.accesses:
            if not a.is_write or a.base not in pointers:
                continue
            names = set()
            for idx in a.indices:
                names |= facts.refs(index_expr(idx))
            deps = facts.closure(names)
            # A grid-wide index (block and thread) can run past the end of the array.
            if not (any(n.startswith("threadIdx.") for n in deps) and any(n.startswith("blockIdx.") for n in deps)):
                continue
            if is_bounds_checked(facts, a.node.start_byte) or any(_clamped(facts, i) for i in a.indices):
                continue
            out.emit(a.node, f"`{facts.text(a.node)}` writes global memory at a thread-derived index with no "
                             f"bounds check; guard it (e.g. `if (i < n)`) or threads past the end write out of bounds")


RULE = UnguardedGlobalWrite()
