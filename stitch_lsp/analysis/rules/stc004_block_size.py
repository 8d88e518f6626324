"""STC004: a constant block size that is not a multiple of 32 or exceeds 1024 threads."""

from __future__ import annotations

from tree_sitter import Node

from stitch_lsp.analysis.cuda_facts import FunctionFacts
from stitch_lsp.analysis.cuda_launch import block_dims
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.findings import Severity
from stitch_lsp.analysis.cuda_text import operands

MAX_THREADS = 1024
WARP = 32


def _check(out: Emitter, node: Node, dims: list[int], what: str) -> None:
    total = 1
    for d in dims:
        total *= d
    shown = " x ".join(str(d) for d in dims)
    if total > MAX_THREADS:
        out.emit(node, f"{what} of {shown} = {total} threads exceeds the {MAX_THREADS}-thread limit; "
                       f"the launch fails with cudaErrorInvalidConfiguration")
    elif total <= 0:
        out.emit(node, f"{what} of {total} threads launches nothing")
    elif total < WARP:
        return  # a deliberately tiny block (`<<<1, 1>>>` for a one-thread task): nothing to gain
    elif total % WARP:
        idle = WARP - total % WARP
        out.emit(node, f"{what} of {total} threads is not a multiple of the {WARP}-thread warp; "
                       f"{idle} lanes of the last warp sit idle in every block")


class BlockSize(Rule):
    meta = RuleMeta("STC004", "block-size", "Block size not a multiple of 32, or over 1024 threads",
                    Severity.WARNING)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        for launch in facts.launches:
            if len(launch.config_args) < 2:
                continue
            block = launch.config_args[1]
            dims = block_dims(facts, block)
            if dims:
                _check(out, block, dims, "block")
        lb = facts.launch_bounds
        if lb is not None and operands(lb):
            first = operands(lb)[0]
            value = facts.resolve_int(first)
            if value is not None:
                _check(out, first, [value], "`__launch_bounds__`")


RULE = BlockSize()
