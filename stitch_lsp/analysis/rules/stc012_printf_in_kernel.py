"""STC012: `printf` in device code outside a debug-only `#if`."""

from __future__ import annotations

from stitch_lsp.analysis.cuda_facts import ATOMICS, FunctionFacts
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.findings import Severity


def _does_work(facts: FunctionFacts) -> bool:
    """The function stores something besides printing (a store through a pointer or an
    array, an atomic)."""
    if any(a.is_write for a in facts.accesses) or any(c.name in ATOMICS for c in facts.calls):
        return True
    for a in facts.assigns:
        left = a.child_by_field_name("left")
        if left is not None and left.type in ("pointer_expression", "field_expression"):
            return True
    return False


class PrintfInKernel(Rule):
    meta = RuleMeta("STC012", "printf-in-kernel", "`printf` in a kernel", Severity.INFO)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        if facts.is_host_code or not _does_work(facts):
            return  # a kernel whose only effect is to print: printing is its job
        for c in facts.calls:
            if c.name != "printf":
                continue
            at = c.node.start_byte
            if any(a <= at < b for a, b in facts.conditional) or \
                    any(p.start_byte <= at < p.end_byte for p in facts.preprocs):
                continue  # inside #ifdef DEBUG or similar
            if any(ctl.kind in ("if", "ternary") for ctl in facts.controls_over(at)):
                continue  # an error report, or one thread's summary: not every thread, not every time
            out.emit(c.node.child_by_field_name("function") or c.node,
                     "`printf` in device code serialises through a host buffer and distorts timing; remove it "
                     "or keep it under `#ifdef DEBUG`")


RULE = PrintfInKernel()
