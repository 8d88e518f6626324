"""STC005: the fastest-moving thread index is multiplied by a stride in a global access."""

from __future__ import annotations

from stitch_lsp.analysis.cuda_facts import FunctionFacts, index_expr
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.analysis.rules.shared_memory import single_thread
from stitch_lsp.analysis.rules.thread_index import Kind, XIndex
from stitch_lsp.findings import Severity


def one_thread_runs(facts: FunctionFacts, byte: int) -> bool:
    """Code at ``byte`` runs in at most one thread of its block (or warp): it sits in the
    `if` branch of `t == 0` / `u == n - 1`, or the `else` branch of `t != 0`."""
    for c in facts.controls_over(byte):
        if c.kind != "if" or c.cond is None:
            continue
        cons = c.node.child_by_field_name("consequence")
        alt = c.node.child_by_field_name("alternative")
        if cons is not None and cons.start_byte <= byte < cons.end_byte and single_thread(facts, c.cond):
            return True
        if alt is not None and alt.start_byte <= byte < alt.end_byte and c.cond.type == "binary_expression" \
                and facts.text(c.cond.child_by_field_name("operator")) == "!=" and facts.depends_on_thread(c.cond):
            return True
    return False


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
            parent = a.node.parent
            if parent is not None and parent.type == "pointer_expression" and facts.text(parent).startswith("&"):
                continue  # `*reinterpret_cast<const uint4*>(&A[i])`: an address for a vector load of unknown width
            if one_thread_runs(facts, a.node.start_byte):
                continue  # `if (t == 0)`: one thread, one transaction; the many-thread site is reported
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
