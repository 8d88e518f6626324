"""STC007: 32-bit index arithmetic over sizes that can exceed 2^31 elements.

Only where the 64-bit size is really the extent the index walks: the index is compared
with it and used to subscript memory. A 64-bit seed, a byte count or a small count
declared `size_t` (mip levels, devices) that is never compared with the index is not
a reason to widen anything.
"""

from __future__ import annotations

import bisect

from tree_sitter import Node

from stitch_lsp.analysis.cuda_facts import INT32_TYPES, FunctionFacts, index_expr
from stitch_lsp.analysis.cuda_text import squash
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.analysis.rules.guards import comparisons, kernel_traits
from stitch_lsp.findings import Fix, Severity


def _compared(facts: FunctionFacts) -> dict[str, set[str]]:
    """For each name, the 64-bit names it is compared with somewhere (built once)."""
    hit = facts.memo.get("compared_with_wide")
    if hit is None:
        hit = {}
        for c in facts.controls:
            if c.cond is None:
                continue
            for cmp in comparisons(facts, c.cond):
                left, right = cmp.child_by_field_name("left"), cmp.child_by_field_name("right")
                if left is None or right is None:
                    continue
                for mine, other in ((left, right), (right, left)):
                    wide = {n for n in facts.refs(other) if facts.is_int64_name(n)}
                    if wide:
                        for n in facts.refs(mine):
                            hit.setdefault(n, set()).update(wide)
        facts.memo["compared_with_wide"] = hit
    return hit


def _compared_with_wide(facts: FunctionFacts, key: str, params_only: bool) -> str | None:
    """A 64-bit name (a parameter, or a 64-bit local) that ``key`` is compared with."""
    names = sorted(_compared(facts).get(key, ()))
    return next((n for n in names if n in facts.param_names or not params_only), None)


def _subscripts(facts: FunctionFacts, key: str) -> bool:
    hit = facts.memo.get("subscript_names")
    if hit is None:
        hit = set()
        for a in facts.accesses:
            for i in a.indices:
                hit |= facts.refs(index_expr(i))
        facts.memo["subscript_names"] = hit
    return key in hit


def _products_in(facts: FunctionFacts, node: Node) -> list[Node]:
    starts = facts.memo.get("product_starts")
    if starts is None:
        starts = facts.memo["product_starts"] = [p.start_byte for p in facts.builtin_products]
    i = bisect.bisect_left(starts, node.start_byte)
    out = []
    while i < len(starts) and starts[i] < node.end_byte:
        p = facts.builtin_products[i]
        if p.end_byte <= node.end_byte:
            out.append(p)
        i += 1
    return out


def _grid_step(facts: FunctionFacts, loop) -> bool:
    update = loop.node.child_by_field_name("update")
    return update is not None and any(n.startswith("gridDim.") for n in facts.closure(facts.refs(update)))


class IntIndexOverflow(Rule):
    meta = RuleMeta("STC007", "int-index-overflow", "`int` index arithmetic that can overflow past 2^31",
                    Severity.WARNING)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        self._truncated_numel(facts, out)
        if facts.is_host_code:
            return
        grid_stride = kernel_traits(facts)[1] if facts.is_global else True
        loop_inits = {c.node.child_by_field_name("initializer").id for c in facts.controls
                      if c.node.type == "for_statement" and c.node.child_by_field_name("initializer") is not None}
        for d in facts.decls:
            if d.is_pointer or d.value is None or d.node.id in loop_inits:
                continue
            plain = d.type_text.replace("const ", "").strip()
            products = _products_in(facts, d.value)
            if not products or not _subscripts(facts, d.key):
                continue
            if plain in INT32_TYPES:
                wide = _compared_with_wide(facts, d.key, params_only=False)
                if wide is None:
                    continue
                type_node = d.node.child_by_field_name("type")
                left = products[0].child_by_field_name("left")
                edits = [out.replace(type_node, "int64_t")] if type_node is not None else []
                edits.append(out.insert_before(left, "(int64_t)"))
                out.emit(type_node or d.value,
                         f"`{plain} {d.name}` indexes memory and is compared with 64-bit `{wide}`: past 2^31 "
                         f"elements it overflows (and `{squash(facts.text(products[0]))}` wraps in 32 bits). "
                         f"Use `int64_t {d.name} = (int64_t){squash(facts.text(d.value))}`",
                         fix=Fix(title=f"Make `{d.name}` 64-bit", edits=tuple(edits)))
            elif facts.is_int64_name(d.key) and not grid_stride:
                # One thread per element: the grid grows with the data, and the product wraps at 2^32.
                wide = _compared_with_wide(facts, d.key, params_only=False)
                if wide is None:
                    continue
                prod = products[0]
                left = prod.child_by_field_name("left")
                shown = squash(facts.text(prod))
                out.emit(prod, f"`{shown}` is computed in 32 bits and wraps once the grid covers 2^32 elements, "
                               f"although `{d.name}` and `{wide}` are 64-bit; widen it first: "
                               f"`({plain}){squash(facts.text(left))} * ...`",
                         fix=Fix(title="Widen the product to 64 bits", edits=(out.insert_before(left, f"({plain})"),)))
        # for (int i = tid; i < n; i += ...) with a 64-bit parameter n: i overflows before it gets there.
        for loop in facts.controls:
            if loop.kind != "loop" or loop.node.type != "for_statement" or loop.cond is None:
                continue
            init = loop.node.child_by_field_name("initializer")
            if init is None or init.type != "declaration":
                continue
            type_node = init.child_by_field_name("type")
            mine = [d for d in facts.decls if d.node.id == init.id]
            if type_node is None or squash(facts.text(type_node)) not in INT32_TYPES or len(mine) != 1:
                continue
            d = mine[0]
            if d.value is None or not facts.depends_on_thread(d.value) or not _subscripts(facts, d.key):
                continue
            if not any(n.startswith("blockIdx.") for n in facts.closure(facts.refs(d.value))) and \
                    not _grid_step(facts, loop):
                # `for (i = threadIdx.x; i < C; i += blockDim.x)`: one block walks one row. Reaching
                # 2^31 would take each thread millions of iterations; rows are not that wide.
                continue
            bound = _compared_with_wide(facts, d.key, params_only=True)
            if bound is None:
                continue
            decl = squash(facts.text(init)).rstrip(";")
            out.emit(init, f"loop index `{decl}` is 32-bit but walks up to 64-bit `{bound}`; it overflows before "
                           f"reaching sizes past 2^31. Use a 64-bit index",
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
