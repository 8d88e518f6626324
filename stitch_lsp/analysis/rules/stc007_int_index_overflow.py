"""STC007: 32-bit index arithmetic over sizes that can exceed 2^31 elements."""

from __future__ import annotations

from stitch_lsp.analysis.cuda_facts import INT32_TYPES, FunctionFacts, is_relational
from stitch_lsp.analysis.cuda_text import squash
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.findings import Fix, Severity


class IntIndexOverflow(Rule):
    meta = RuleMeta("STC007", "int-index-overflow", "`int` index arithmetic that can overflow past 2^31",
                    Severity.WARNING)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        self._truncated_numel(facts, out)
        # 64-bit parameters that bound an index (compared somewhere), not seeds or byte counts.
        compared: set[str] = set()
        for c in facts.controls:
            if c.cond is not None and is_relational(facts, c.cond):
                compared |= facts.refs(c.cond)
        wide = [p.info.name for p in facts.params if facts.is_int64_name(p.info.name) and p.info.name in compared]
        if wide and facts.is_global:
            # blockIdx.x * blockDim.x is an unsigned 32-bit product whatever it is assigned to.
            for prod in facts.builtin_products:
                left = prod.child_by_field_name("left")
                shown = squash(facts.text(prod))
                out.emit(prod, f"`{shown}` is computed in 32 bits and wraps once the grid covers 2^32 elements, "
                               f"but `{wide[0]}` is 64-bit; widen it first: `(size_t){squash(facts.text(left))} * ...`",
                         fix=Fix(title="Widen the product to 64 bits", edits=(out.insert_before(left, "(size_t)"),)))
        # for (int i = ...; i < n; ...) with a 64-bit n: i overflows before it gets there.
        for loop in facts.controls:
            if loop.kind != "loop" or loop.node.type != "for_statement" or loop.cond is None:
                continue
            init = loop.node.child_by_field_name("initializer")
            if init is None or init.type != "declaration":
                continue
            type_node = init.child_by_field_name("type")
            if type_node is None or squash(facts.text(type_node)) not in INT32_TYPES:
                continue
            bounds = [n for n in facts.refs(loop.cond) if facts.is_int64_name(n)]
            if not bounds:
                continue
            decl = squash(facts.text(init)).rstrip(";")
            out.emit(init, f"loop index `{decl}` is 32-bit but is compared with 64-bit "
                           f"`{bounds[0]}`; it overflows before reaching sizes past 2^31. Use a 64-bit index",
                     fix=Fix(title="Make the loop index 64-bit", edits=(out.replace(type_node, "int64_t"),)))


    @staticmethod
    def _truncated_numel(facts: FunctionFacts, out: Emitter) -> None:
        """`int n = x.numel();`: a PyTorch element count (int64_t) squeezed into 32 bits."""
        numels = [c for c in facts.method_calls if c.name == "numel"]
        if not numels:
            return
        for d in facts.decls:
            if d.value is None or d.is_pointer or d.type_text.replace("const ", "") not in INT32_TYPES:
                continue
            lo, hi = d.value.start_byte, d.value.end_byte
            if not any(lo <= c.node.start_byte < hi for c in numels):
                continue
            type_node = d.node.child_by_field_name("type")
            fix = Fix(title="Keep the count in 64 bits", edits=(out.replace(type_node, "int64_t"),)) \
                if type_node is not None else None
            out.emit(d.value, f"`{squash(facts.text(d.value))}` is an int64_t element count; storing it in "
                              f"`{d.type_text} {d.name}` truncates tensors past 2^31 elements. Use `int64_t`",
                     fix=fix)


RULE = IntIndexOverflow()
