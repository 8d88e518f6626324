"""Shared-memory accesses and barriers of one function, in evaluation order, and who
may see whose writes (used by the race rules)."""

from __future__ import annotations

import bisect

from tree_sitter import Node

from stitch_lsp.analysis.cuda_facts import BLOCK_BARRIERS, WARP_BARRIERS, Access, FunctionFacts, index_expr
from stitch_lsp.analysis.cuda_text import squash
from stitch_lsp.analysis.rules.guards import thread_dependent_control


def _unalias(facts: FunctionFacts, node: Node) -> Node:
    """`tid` -> `threadIdx.x` for `int tid = threadIdx.x;` (a name with one plain definition)."""
    while node.type == "parenthesized_expression" and len(node.named_children) == 1:
        node = node.named_children[0]
    for _ in range(4):
        if node.type != "identifier":
            break
        defs = facts.defs.get(facts.key_of(node), [])
        if len(defs) != 1 or defs[0].type not in ("identifier", "field_expression", "call_expression"):
            break
        if defs[0].type == "call_expression" and _thread_rank_call(facts, defs[0]) is None:
            break
        node = defs[0]
    return node


def _thread_rank_call(facts: FunctionFacts, node: Node) -> str | None:
    fn = node.child_by_field_name("function")
    if fn is not None and fn.type == "field_expression":
        fld = fn.child_by_field_name("field")
        if fld is not None and facts.text(fld) == "thread_rank":
            return squash(facts.text(node))
    return None


def canonical(facts: FunctionFacts, node: Node) -> str:
    return squash(facts.text(_unalias(facts, node)))


def canonical_index(facts: FunctionFacts, a: Access) -> str:
    """Index text with plain aliases resolved (`tid` for `int tid = threadIdx.x;`)."""
    return "][".join(canonical(facts, index_expr(idx)) for idx in a.indices)


def thread_id(facts: FunctionFacts, node: Node) -> str | None:
    """The canonical text of an expression that is the thread's own index in the block
    (`threadIdx.x`, an alias of it, `block.thread_rank()`), else None."""
    n = _unalias(facts, node)
    if n.type == "field_expression" and squash(facts.text(n)).replace(" ", "") == "threadIdx.x":
        return "threadIdx.x"
    if n.type == "call_expression":
        return _thread_rank_call(facts, n)
    return None


def _increments(facts: FunctionFacts, key: str) -> bool:
    """Every assignment to ``key`` other than its declaration adds to it (`i += stride`, `++i`)."""
    defs = facts.defs.get(key, [])
    adds = 0
    for a in facts.assigns:
        left = a.child_by_field_name("left")
        if left is not None and left.type == "identifier" and facts.key_of(left) == key:
            if facts.text(a.child_by_field_name("operator")) != "+=":
                return False
            adds += 1
    declared = sum(1 for d in facts.decls if d.key == key and d.value is not None)
    return declared == 1 and len(defs) == declared + adds


def slot_owner(facts: FunctionFacts, w: Access) -> tuple[str, bool] | None:
    """Who writes a shared slot: (thread index, exact) when slot k is written by thread k
    (`s[tid]`: exact), or by thread k and threads walking up from lower slots (a block-stride
    loop `for (i = tid; ...; i += blockDim.x) s[i]`: only slot 0 is thread 0's alone)."""
    if len(w.indices) != 1:
        return None
    node = index_expr(w.indices[0])
    tid = thread_id(facts, node)
    if tid is not None:
        return tid, True
    node = _unalias(facts, node)
    if node.type != "identifier":
        return None
    key = facts.key_of(node)
    d = facts.local(key)
    if d is None or d.value is None or thread_id(facts, d.value) is None or not _increments(facts, key):
        return None
    return thread_id(facts, d.value), False


def single_thread_guard(facts: FunctionFacts, byte: int) -> tuple[str, int] | None:
    """(thread index, k) when code at ``byte`` runs only in the thread whose index is k
    (`if (tid == 0)`, `if (block.thread_rank() == 0 && ...)`)."""
    for c in reversed(facts.controls_over(byte)):
        if c.kind != "if":
            continue
        hit = _equality(facts, c.cond)
        if hit is not None:
            return hit
    return None


def _equality(facts: FunctionFacts, cond: Node | None) -> tuple[str, int] | None:
    if cond is None or cond.type != "binary_expression":
        return None
    op = facts.text(cond.child_by_field_name("operator"))
    left, right = cond.child_by_field_name("left"), cond.child_by_field_name("right")
    if op == "&&":
        return _equality(facts, left) or _equality(facts, right)
    if op != "==" or left is None or right is None:
        return None
    for a, b in ((left, right), (right, left)):
        tid, k = thread_id(facts, a), facts.resolve_int(b)
        if tid is not None and k is not None:
            return tid, k
    return None


def assigned_within(facts: FunctionFacts, lo: int, hi: int) -> set[str]:
    """Names assigned (or declared, or incremented) in the bytes [lo, hi)."""
    out = {d.key for d in facts.decls if lo <= d.node.start_byte < hi}
    for a in facts.assigns:
        left = a.child_by_field_name("left")
        if lo <= a.start_byte < hi and left is not None and left.type == "identifier":
            out.add(facts.key_of(left))
    for u in facts.updates:
        arg = u.child_by_field_name("argument")
        if lo <= u.start_byte < hi and arg is not None and arg.type == "identifier":
            out.add(facts.key_of(arg))
    return out


def below_bound(facts: FunctionFacts, w: Access, r: Access, loop=None) -> bool:
    """The write's index is kept below a bound B (`if (tid < s)`, `for (i = ..; i < s; ..)`)
    and the read's index is B plus that index: they never touch the same slot (across the
    iterations of ``loop`` too, when B does not change in it)."""
    if len(w.indices) != 1 or len(r.indices) != 1:
        return False
    written = canonical(facts, index_expr(w.indices[0]))
    read = _unalias(facts, index_expr(r.indices[0]))
    if read.type != "binary_expression" or facts.text(read.child_by_field_name("operator")) != "+":
        return False
    a, b = read.child_by_field_name("left"), read.child_by_field_name("right")
    if a is None or b is None:
        return False
    if canonical(facts, a) == written:
        bound_node = b
    elif canonical(facts, b) == written:
        bound_node = a
    else:
        return False
    bound = squash(facts.text(bound_node))
    if loop is not None and facts.refs(bound_node) & assigned_within(facts, loop.node.start_byte, loop.end):
        return False
    for c in facts.controls_over(w.node.start_byte):
        cond = c.cond
        if cond is None or cond.type != "binary_expression":
            continue
        parts = [cond]
        if facts.text(cond.child_by_field_name("operator")) == "&&":
            parts = [cond.child_by_field_name("left"), cond.child_by_field_name("right")]
        for p in parts:
            if p is None or p.type != "binary_expression" or facts.text(p.child_by_field_name("operator")) != "<":
                continue
            pl, pr = p.child_by_field_name("left"), p.child_by_field_name("right")
            if pl is not None and pr is not None and canonical(facts, pl) == written \
                    and squash(facts.text(pr)) == bound:
                return True
    return False


def single_thread(facts: FunctionFacts, cond: Node | None) -> bool:
    """`tid == 0` (possibly `&& ...`): at most one thread of the block passes."""
    if cond is None or cond.type != "binary_expression":
        return False
    op = facts.text(cond.child_by_field_name("operator"))
    left, right = cond.child_by_field_name("left"), cond.child_by_field_name("right")
    if op == "&&":
        return single_thread(facts, left) or single_thread(facts, right)
    return op == "==" and facts.depends_on_thread(cond)


def _is_barrier_method(facts: FunctionFacts, call) -> bool:
    """`block.sync()`, `bar.arrive_and_wait()`, `bar.wait(token)` on a `cuda::barrier`."""
    if call.name in ("sync", "arrive_and_wait"):
        return True
    if call.name != "wait":
        return False
    fn = call.node.child_by_field_name("function")
    obj = fn.child_by_field_name("argument") if fn is not None else None
    if obj is None or obj.type != "identifier":
        return False
    key = facts.key_of(obj)
    d = facts.local(key)
    p = facts.param_names.get(key)
    described = d.type_text if d is not None else (p.info.type_text if p is not None else "")
    return "barrier" in described


def _multi_axis(facts: FunctionFacts) -> bool:
    """The kernel uses threadIdx.y or .z: threadIdx.x alone does not name one thread."""
    hit = facts.memo.get("multi_axis")
    if hit is None:
        text = facts.src[facts.node.start_byte:facts.node.end_byte]
        hit = facts.memo["multi_axis"] = b"threadIdx.y" in text or b"threadIdx.z" in text
    return hit


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
        self.barriers += [c.node.start_byte for c in facts.method_calls if _is_barrier_method(facts, c)]
        # A statement the grammar cannot read may be a barrier (`BlockLoadT(smem).Load(...)` is
        # one): races are not claimed across it.
        self.barriers += [s.start for s in facts.unknown]
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
        if self._same_own_column(w, r):
            return True  # `s[j][tid] = s[0][tid]`: each thread owns its column
        # Written and read inside one `if (tid == 0)`-style branch: a single thread.
        owner = thread_dependent_control(facts, w.node.start_byte)
        if (owner is not None and owner.kind == "if" and owner.governs(r.node.start_byte)
                and single_thread(facts, owner.cond)):
            return True
        # `if (tid == 0) ... s[0]` after `s[tid] = ...`: thread 0 reads the slot only it writes.
        return self._reads_own_slot(w, r)

    def _same_own_column(self, w: Access, r: Access) -> bool:
        """Both index one dimension with the thread's own index (`threadIdx.x` in a kernel that
        uses no other thread axis): thread k only ever touches that dimension's slice k."""
        facts = self.facts
        if len(w.indices) != len(r.indices) or len(w.indices) < 2 or _multi_axis(facts):
            return False
        return any(thread_id(facts, index_expr(a)) is not None and
                   thread_id(facts, index_expr(a)) == thread_id(facts, index_expr(b))
                   for a, b in zip(w.indices, r.indices))

    def _reads_own_slot(self, w: Access, r: Access) -> bool:
        facts = self.facts
        if len(r.indices) != 1:
            return False
        k = facts.resolve_int(index_expr(r.indices[0]))
        if k is None:
            return False
        guard = single_thread_guard(facts, r.node.start_byte)
        owner = slot_owner(facts, w)
        if guard is None or owner is None or guard[0] != owner[0] or guard[1] != k:
            return False
        return owner[1] or k == 0

    def disjoint(self, w: Access, r: Access, loop=None) -> bool:
        """Whether the read can never touch a slot this write writes (see below_bound)."""
        return below_bound(self.facts, w, r, loop)


def shared_events(facts: FunctionFacts) -> SharedEvents:
    """The function's SharedEvents, built once for all the rules that need them."""
    ev = facts.memo.get("shared_events")
    if ev is None:
        ev = facts.memo["shared_events"] = SharedEvents(facts)
    return ev
