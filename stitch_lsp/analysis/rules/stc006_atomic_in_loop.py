"""STC006: an atomic on one address inside a loop (every iteration of every thread contends)."""

from __future__ import annotations

import bisect

from stitch_lsp.analysis.cuda_facts import ATOMICS, Control, FunctionFacts
from stitch_lsp.analysis.cuda_text import squash
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
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


class AtomicInLoop(Rule):
    meta = RuleMeta("STC006", "atomic-same-address-in-loop", "Atomic on one address inside a loop",
                    Severity.WARNING)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        if facts.is_host_code:
            return
        for c in facts.calls:
            if c.name not in ATOMICS or not c.args:
                continue
            loops = facts.loops_over(c.node.start_byte)
            if not loops:
                continue
            deps = facts.closure(facts.refs(c.args[0]))
            if any(n.startswith("threadIdx.") for n in deps):
                continue
            if any(deps & _varying(facts, loop) for loop in loops):
                continue
            addr = squash(facts.text(c.args[0]))
            out.emit(c.node, f"`{c.name}` on `{addr}` hits the same address on every iteration of the loop in "
                             f"every thread, so the updates serialise; accumulate in a register and issue one "
                             f"atomic after the loop (one per warp after a shuffle reduction is better still)")


RULE = AtomicInLoop()
