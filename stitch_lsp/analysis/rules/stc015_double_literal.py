"""STC015: a double-precision literal in a kernel that otherwise works in float."""

from __future__ import annotations

import re

from stitch_lsp.analysis.cuda_facts import FunctionFacts
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.findings import Fix, Severity

_DOUBLE = re.compile(r"^(?:\d+\.\d*|\.\d+|\d+(?:\.\d*)?[eE][+-]?\d+)$")


class DoubleLiteral(Rule):
    meta = RuleMeta("STC015", "double-literal", "Double-precision literal in a float kernel", Severity.WARNING)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        if facts.is_host_code or not facts.numbers:
            return
        text = facts.src[facts.unit.start_byte:facts.unit.end_byte]
        if b"double" in text or b"float" not in text:
            return  # a kernel that means FP64, or one not about floats at all
        for n in facts.numbers:
            lit = facts.text(n)
            if not _DOUBLE.match(lit):
                continue
            out.emit(n, f"`{lit}` is a double: the expression around it is computed in FP64, which runs at a "
                        f"fraction of FP32 speed on most GPUs; write `{lit}f`",
                     fix=Fix(title=f"Write `{lit}f`", edits=(out.insert_after(n, "f"),)))


RULE = DoubleLiteral()
