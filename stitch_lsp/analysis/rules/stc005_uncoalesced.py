"""STC005: the fastest-moving thread index is multiplied by a stride in a global access."""

from __future__ import annotations

from stitch_lsp.analysis.cuda_facts import FunctionFacts, index_expr
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.analysis.rules.thread_index import Kind, XIndex
from stitch_lsp.findings import Severity


class Uncoalesced(Rule):
    meta = RuleMeta("STC005", "uncoalesced-access",
                    "Thread index times a stride on the fastest-moving dimension (uncoalesced)", Severity.WARNING)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        if not facts.is_global:
            return
        pointers = facts.global_pointer_names()
        xi = XIndex(facts)
        seen: set[tuple] = set()
        for a in facts.accesses:
            if a.base not in pointers or not a.indices:
                continue
            if (a.base, a.index_text) in seen:
                continue  # `y[k] = y[k] + v`: one finding for the location
            last = index_expr(a.indices[-1])
            kind, product = xi.expr(last)
            if kind != Kind.SCALED:
                continue
            seen.add((a.base, a.index_text))
            inside = product is not None and last.start_byte <= product.start_byte and product.end_byte <= last.end_byte
            where = product if inside else last
            verb = "writes" if a.is_write else "reads"
            out.emit(where, f"`{facts.text(a.node)}` {verb} global memory a stride apart for consecutive threads "
                            f"(`{facts.text(where)}` scales threadIdx.x), so one warp access splits into many "
                            f"memory transactions. Let threadIdx.x pick the contiguous index, or stage the tile "
                            f"through shared memory")


RULE = Uncoalesced()
