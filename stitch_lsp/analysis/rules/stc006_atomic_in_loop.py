"""STC006: an atomic on one address inside a loop (every iteration of every thread contends)."""

from __future__ import annotations

import bisect

from stitch_lsp.analysis.cuda_facts import ATOMICS, Control, FunctionFacts, index_expr
from stitch_lsp.analysis.cuda_text import squash
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.analysis.rules.shared_memory import single_thread_guard
from stitch_lsp.findings import Severity


def _assignments(facts: FunctionFacts) -> tuple[list[int], list[str]]:
    """(start byte, name) of every declaration and assignment of a plain name, by position."""
    hit = facts.memo.get("assignments")
    if hit is None:
        found = [(d.node.start_byte, d.key) for d in facts.decls]
        for a in facts.assigns:
            left = a.child_by_field_name("left")
            if left is not None and left.type == "identifier":
                found.append((a.start_byte, facts.key_of(left)))
        for u in facts.updates:
            arg = u.child_by_field_name("argument")
            if arg is not None and arg.type == "identifier":
                found.append((u.start_byte, facts.key_of(arg)))
        found.sort()
        hit = facts.memo["assignments"] = ([b for b, _ in found], [n for _, n in found])
    return hit


def _varying(facts: FunctionFacts, loop: Control) -> set[str]:
    """Names that change from one iteration of ``loop`` to the next."""
    starts, names = _assignments(facts)
    lo = bisect.bisect_left(starts, loop.node.start_byte)
    hi = bisect.bisect_left(starts, loop.node.end_byte)
    return set(names[lo:hi])


# Exchanges and compare-and-swap set a value or retry until they win (a flag, a lock, a
# CAS loop), and atomicInc/Dec wrap at a bound: none of them can be summed in a register
# first and issued once.
_NOT_REDUCTIONS = ("atomicExch", "atomicCAS", "atomicInc", "atomicDec")


def _one_per_group(facts: FunctionFacts, byte: int) -> bool:
    """Inside `if (lane == 0)`, `if (threadIdx.x % 32 == 0)`, `if (g.thread_rank() == 0)`:
    one thread per warp or group does the atomic."""
    for c in facts.controls_over(byte):
        if c.kind != "if" or c.cond is None:
            continue
        text = squash(facts.text(c.cond)).replace(" ", "")
        if "==0" in text and ("thread_rank()" in text or "%" in text or "lane" in text.lower()):
            return True
    return False


def _walks_data(facts: FunctionFacts, loop: Control) -> bool:
    """Each iteration touches other data: an access whose index changes with the loop.
    (Worked out once per function, access by access, for the loops around each.)"""
    walking = facts.memo.get("loops_walking_data")
    if walking is None:
        walking = set()
        for a in facts.accesses:
            loops = facts.loops_over(a.node.start_byte)
            if not loops:
                continue
            names: set[str] = set()
            for i in a.indices:
                names |= facts.closure(facts.refs(index_expr(i)))
            for l in loops:
                if l.node.id not in walking and names & _varying(facts, l):
                    walking.add(l.node.id)
        facts.memo["loops_walking_data"] = walking
    return loop.node.id in walking


class AtomicInLoop(Rule):
    meta = RuleMeta("STC006", "atomic-same-address-in-loop", "Atomic on one address inside a loop",
                    Severity.WARNING)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        if facts.is_host_code:
            return
        for c in facts.calls:
            if c.name not in ATOMICS or not c.args or c.name.startswith(_NOT_REDUCTIONS):
                continue
            loops = facts.loops_over(c.node.start_byte)
            if not loops:
                continue
            if single_thread_guard(facts, c.node.start_byte) is not None or _one_per_group(facts, c.node.start_byte):
                continue  # already one atomic per block, warp or group: the recommended shape
            deps = facts.closure(facts.refs(c.args[0]))
            if any(n.startswith("threadIdx.") for n in deps):
                continue
            if any(deps & _varying(facts, loop) for loop in loops):
                continue
            target = facts.base_names(c.args[0])
            if any(loop.cond is not None and target & facts.refs(loop.cond) for loop in loops):
                continue  # `while (hit < count) { ...; atomicAdd(&hit, 1); }`: the counter steers the loop
            value = facts.closure(facts.refs(c.args[1])) if len(c.args) > 1 else frozenset()
            if not any(_walks_data(facts, loop) or value & _varying(facts, loop) for loop in loops):
                continue  # the loop repeats the atomic itself (a stress test): nothing to hoist
            addr = squash(facts.text(c.args[0]))
            out.emit(c.node, f"`{c.name}` on `{addr}` hits the same address on every iteration of the loop in "
                             f"every thread, so the updates serialise; accumulate in a register and issue one "
                             f"atomic after the loop (one per warp after a shuffle reduction is better still)")


RULE = AtomicInLoop()
