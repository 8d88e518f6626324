"""STC003: shared memory written by one thread and read by another with no barrier between."""

from __future__ import annotations

from tree_sitter import Node

from stitch_lsp.analysis.cuda_facts import BLOCK_BARRIERS, WARP_BARRIERS, Access, FunctionFacts, index_expr
from stitch_lsp.analysis.cuda_text import squash
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.analysis.rules.guards import thread_dependent_control
from stitch_lsp.findings import Severity


def _canonical_index(facts: FunctionFacts, a: Access) -> str:
    """Index text with plain aliases resolved (`tid` for `int tid = threadIdx.x;`)."""
    parts = []
    for idx in a.indices:
        node: Node = index_expr(idx)
        for _ in range(4):
            if node.type != "identifier":
                break
            defs = facts.defs.get(facts.text(node), [])
            if len(defs) != 1 or defs[0].type not in ("identifier", "field_expression"):
                break
            node = defs[0]
        parts.append(squash(facts.text(node)))
    return "][".join(parts)


def _single_thread(facts: FunctionFacts, cond: Node | None) -> bool:
    """`tid == 0` (possibly `&& ...`): at most one thread of the block passes."""
    if cond is None or cond.type != "binary_expression":
        return False
    op = facts.text(cond.child_by_field_name("operator"))
    left, right = cond.child_by_field_name("left"), cond.child_by_field_name("right")
    if op == "&&":
        return _single_thread(facts, left) or _single_thread(facts, right)
    return op == "==" and facts.depends_on_thread(cond)


class SharedRace(Rule):
    meta = RuleMeta("STC003", "shared-race",
                    "Shared memory written then read by other threads with no barrier between", Severity.WARNING)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        if facts.is_host_code:
            return
        shared = facts.shared_names()
        if not shared:
            return
        events: list[tuple[int, int, str, Access | None]] = []
        for a in facts.accesses:
            if a.base not in shared:
                continue
            if a.is_read:
                events.append((a.node.start_byte, 1, "read", a))
            if a.is_write:
                events.append((a.order, 2, "write", a))
        if not any(kind == "write" for _, _, kind, _ in events):
            return
        barriers = [c.node.start_byte for c in facts.calls if c.name in BLOCK_BARRIERS | WARP_BARRIERS]
        barriers += [c.node.start_byte for c in facts.method_calls if c.name == "sync"]
        events += [(b, 0, "barrier", None) for b in barriers]
        events.sort(key=lambda e: (e[0], e[1]))
        canon = {id(a): _canonical_index(facts, a) for _, _, k, a in events if a is not None}

        def same_thread(w: Access, r: Access) -> bool:
            """The read sees only what its own thread wrote."""
            if canon[id(w)] == canon[id(r)] and any(
                    facts.depends_on_thread(index_expr(i)) for i in w.indices):
                return True  # each thread owns its slot
            # Written and read inside one `if (tid == 0)`-style branch: a single thread.
            owner = thread_dependent_control(facts, w.node.start_byte)
            return (owner is not None and owner.kind == "if" and owner.governs(r.node.start_byte)
                    and _single_thread(facts, owner.cond))

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
