"""STC001: a kernel writes global memory at a thread-derived index with no bounds check."""

from __future__ import annotations

from stitch_lsp.analysis.cuda_facts import INT32_TYPES, INT64_TYPES, FunctionFacts, index_expr
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.analysis.rules.guards import is_bounds_checked
from stitch_lsp.findings import Severity


_SIZE_TYPES = INT32_TYPES | INT64_TYPES
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
            index = " ".join(facts.text(index_expr(a.indices[-1])).split()) if a.indices else "i"
            size = next((p.info.name for p in facts.params
                         if not p.info.is_pointer and p.info.type_text.replace("const ", "") in _SIZE_TYPES), "n")
            out.emit(a.node, f"`{facts.text(a.node)}` writes global memory at a thread-derived index with no "
                             f"bounds check; threads past the end write out of bounds. Guard it: "
                             f"`if ({index} < {size})`")


RULE = UnguardedGlobalWrite()
