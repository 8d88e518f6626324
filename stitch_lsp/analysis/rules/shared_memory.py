"""Shared-memory accesses and barriers of one function, in evaluation order, and who
may see whose writes (used by the race rules)."""

from __future__ import annotations

import bisect

from tree_sitter import Node

from stitch_lsp.analysis.cuda_facts import BLOCK_BARRIERS, WARP_BARRIERS, Access, FunctionFacts, index_expr
from stitch_lsp.analysis.cuda_text import squash
from stitch_lsp.analysis.rules.guards import thread_dependent_control


def canonical_index(facts: FunctionFacts, a: Access) -> str:
    """Index text with plain aliases resolved (`tid` for `int tid = threadIdx.x;`)."""
    parts = []
    for idx in a.indices:
        node: Node = index_expr(idx)
        for _ in range(4):
            if node.type != "identifier":
                break
            defs = facts.defs.get(facts.key_of(node), [])
            if len(defs) != 1 or defs[0].type not in ("identifier", "field_expression"):
                break
            node = defs[0]
        parts.append(squash(facts.text(node)))
    return "][".join(parts)


def single_thread(facts: FunctionFacts, cond: Node | None) -> bool:
    """`tid == 0` (possibly `&& ...`): at most one thread of the block passes."""
    if cond is None or cond.type != "binary_expression":
        return False
    op = facts.text(cond.child_by_field_name("operator"))
    left, right = cond.child_by_field_name("left"), cond.child_by_field_name("right")
    if op == "&&":
        return single_thread(facts, left) or single_thread(facts, right)
    return op == "==" and facts.depends_on_thread(cond)


class SharedEvents:
    """(position, kind, access) for every shared-memory read, write and barrier.

    A write is placed at the end of its assignment: `s[t] = s[t + 1]` reads first."""

    def __init__(self, facts: FunctionFacts):
        self.facts = facts
        shared = facts.shared_names()
        events: list[tuple[int, int, str, Access | None]] = []
        for a in facts.accesses:
            if a.base not in shared:
                continue
            if a.is_read:
                events.append((a.node.start_byte, 1, "read", a))
            if a.is_write:
                events.append((a.order, 2, "write", a))
        self.has_writes = any(kind == "write" for _, _, kind, _ in events)
        self.barriers = [c.node.start_byte for c in facts.calls if c.name in BLOCK_BARRIERS | WARP_BARRIERS]
        self.barriers += [c.node.start_byte for c in facts.method_calls if c.name == "sync"]
        events += [(b, 0, "barrier", None) for b in self.barriers]
        events.sort(key=lambda e: (e[0], e[1]))
        self.events = events
        self.positions = [e[0] for e in events]
        self._canon = {id(a): canonical_index(facts, a) for _, _, _, a in events if a is not None}

    def within(self, lo: int, hi: int) -> list[tuple[int, int, str, Access | None]]:
        """The events at positions in [lo, hi)."""
        return self.events[bisect.bisect_left(self.positions, lo):bisect.bisect_left(self.positions, hi)]

    def write_key(self, w: Access) -> tuple:
        """Writes with equal keys look the same to `same_thread` (index and owning branch)."""
        owner = thread_dependent_control(self.facts, w.node.start_byte)
        return self._canon[id(w)], owner.node.id if owner is not None else None

    def same_thread(self, w: Access, r: Access) -> bool:
        """Whether the read can only see what its own thread wrote (so no barrier is needed)."""
        facts = self.facts
        if self._canon[id(w)] == self._canon[id(r)] and any(
                facts.depends_on_thread(index_expr(i)) for i in w.indices):
            return True  # each thread owns its slot
        # Written and read inside one `if (tid == 0)`-style branch: a single thread.
        owner = thread_dependent_control(facts, w.node.start_byte)
        return (owner is not None and owner.kind == "if" and owner.governs(r.node.start_byte)
                and single_thread(facts, owner.cond))


def shared_events(facts: FunctionFacts) -> SharedEvents:
    """The function's SharedEvents, built once for all the rules that need them."""
    ev = facts.memo.get("shared_events")
    if ev is None:
        ev = facts.memo["shared_events"] = SharedEvents(facts)
    return ev
