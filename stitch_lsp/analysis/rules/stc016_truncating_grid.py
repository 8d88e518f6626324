"""STC016: a grid size computed by truncating division (the tail gets no threads)."""

from __future__ import annotations

from tree_sitter import Node

from stitch_lsp.analysis.cuda_facts import FunctionFacts
from stitch_lsp.analysis.cuda_launch import dim3_args
from stitch_lsp.analysis.cuda_text import squash
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.findings import Fix, Severity
from stitch_lsp.analysis.cuda_text import operands


def _truncating(facts: FunctionFacts, node: Node) -> tuple[Node, Node] | None:
    while node.type == "parenthesized_expression" and len(operands(node)) == 1:
        node = operands(node)[0]
    if node.type != "binary_expression" or facts.text(node.child_by_field_name("operator")) != "/":
        return None
    left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
    if left is None or right is None:
        return None
    if any(ch in facts.text(left) for ch in "+-"):
        return None  # already rounds up: (n + b - 1) / b
    a, b = facts.resolve_int(left), facts.resolve_int(right)
    if a is not None and b is not None and b and a % b == 0:
        return None
    if b is None and facts.resolve_int(right) is None and right.type != "identifier":
        return None
    return left, right


class TruncatingGrid(Rule):
    meta = RuleMeta("STC016", "truncating-grid", "Grid size computed by truncating division", Severity.WARNING)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        for launch in facts.launches:
            if not launch.config_args:
                continue
            grid = launch.config_args[0]
            parts = dim3_args(facts, grid) or (grid,)
            for part in parts:
                hit = _truncating(facts, part)
                if hit is None:
                    continue
                left, right = hit
                l, r = squash(facts.text(left)), squash(facts.text(right))
                if right.type == "number_literal" and facts.resolve_int(right):
                    fixed = f"({l} + {facts.resolve_int(right) - 1}) / {r}"
                else:
                    fixed = f"({l} + {r} - 1) / {r}"
                out.emit(part, f"grid `{squash(facts.text(part))}` rounds down, so the last `{l} % {r}` elements "
                               f"get no thread; round up with `{fixed}`",
                         fix=Fix(title=f"Round the grid up: `{fixed}`", edits=(out.replace(part, fixed),)))


RULE = TruncatingGrid()
