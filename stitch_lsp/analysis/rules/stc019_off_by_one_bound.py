"""STC019: a bounds check that lets the index equal the size through (`i <= n`, `i > n`)."""

from __future__ import annotations

from tree_sitter import Node

from stitch_lsp.analysis.cuda_facts import FunctionFacts, index_expr
from stitch_lsp.analysis.cuda_text import squash
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.analysis.rules.bounds import global_accesses, inclusive_name
from stitch_lsp.analysis.rules.guards import block_axes, comparisons, early_exits
from stitch_lsp.analysis.rules.shared_memory import canonical
from stitch_lsp.findings import Fix, Severity

# The operator that lets `index == size` pass, and the one that does not, by whether the
# check keeps the code (`if (i <= n) use`) or leaves (`if (i > n) return;`).
_KEEPS = {"<=": "<", ">=": ">"}  # `i <= n` / `n >= i`
_LEAVES = {">": ">=", "<": "<="}  # `i > n` / `n < i`


def _size_bound(facts: FunctionFacts, node: Node) -> bool:
    """A bound that counts elements: built from the kernel's parameters, with no `- 1` and
    no name that says it is the last index (`last`, `max_index`, `end`)."""
    text = squash(facts.text(node))
    names = facts.closure(facts.refs(node))
    if "-" in text or block_axes(facts, node) or any(n.startswith(("threadIdx.", "blockIdx.")) for n in names):
        return False
    params = [n for n in names if n in facts.param_names]
    return bool(params) and not any(inclusive_name(n) for n in facts.refs(node))


def _lets_size_through(facts: FunctionFacts, cmp: Node, index: str, leaves: bool) -> str | None:
    """The corrected operator when ``cmp`` compares ``index`` with a size and lets them be equal."""
    op = facts.text(cmp.child_by_field_name("operator"))
    left, right = cmp.child_by_field_name("left"), cmp.child_by_field_name("right")
    if left is None or right is None:
        return None
    if canonical(facts, left) == index and _size_bound(facts, right):
        table = _LEAVES if leaves else _KEEPS
        return table.get(op) if op in (">", "<=") else None
    if canonical(facts, right) == index and _size_bound(facts, left):
        table = _LEAVES if leaves else _KEEPS
        return table.get(op) if op in ("<", ">=") else None
    return None


class OffByOneBound(Rule):
    meta = RuleMeta("STC019", "off-by-one-bound",
                    "Bounds check that lets the index reach the size (`<=`, `>` instead of `<`, `>=`)",
                    Severity.WARNING)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        if not facts.is_global:
            return
        flagged: set[int] = set()
        for a in global_accesses(facts):
            if len(a.indices) != 1:
                continue
            node = index_expr(a.indices[0])
            if not block_axes(facts, node):
                continue
            index = canonical(facts, node)
            at = a.node.start_byte
            checks = [(c, False) for c in facts.controls_over(at) if c.kind in ("if", "loop", "ternary")]
            checks += [(c, True) for c in early_exits(facts, at)]
            for ctl, leaves in checks:
                # Parts of an `&&` decide a check that keeps the code; of an `||`, an exit.
                for cmp in comparisons(facts, ctl.cond, ("||",) if leaves else ("&&",)):
                    fixed = _lets_size_through(facts, cmp, index, leaves)
                    if fixed is None or cmp.id in flagged:
                        continue
                    flagged.add(cmp.id)
                    op_node = cmp.child_by_field_name("operator")
                    shown = squash(facts.text(cmp))
                    what = "reads" if not a.is_write else "writes"
                    out.emit(cmp, f"`{shown}` lets `{index}` reach the size, and `{facts.text(a.node)}` then "
                                  f"{what} one element past the end; compare with `{fixed}`",
                             fix=Fix(title=f"Use `{fixed}`", edits=(out.replace(op_node, fixed),)))


RULE = OffByOneBound()
