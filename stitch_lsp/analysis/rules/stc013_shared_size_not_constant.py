"""STC013: a `__shared__` array sized by something that is not a compile-time constant."""

from __future__ import annotations

from stitch_lsp.analysis.cuda_facts import FunctionFacts
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.findings import Severity


def _is_constant_name(facts: FunctionFacts, name: str) -> bool:
    if name in facts.template_params or name in facts.consts:
        return True
    local = facts.local(name)
    if local is not None:
        return local.is_const
    if name in facts.param_names:
        return False
    # An all-caps name from a header is a macro or an enumerator.
    return name.isupper() or not name.islower()


class SharedSizeNotConstant(Rule):
    meta = RuleMeta("STC013", "shared-size-not-constant", "Shared array sized by a non-constant",
                    Severity.ERROR)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        for d in facts.decls:
            if not d.is_shared or d.is_extern or d.array_size is None:
                continue
            bad = sorted(n for n in facts.refs(d.array_size)
                         if "." in n or not _is_constant_name(facts, n))
            if not bad:
                continue
            out.emit(d.array_size, f"`__shared__` array `{d.name}` is sized by `{bad[0]}`, which is not a "
                                   f"compile-time constant; use a template parameter or constant, or "
                                   f"`extern __shared__ {d.type_text} {d.name}[];` with the size in the launch")


RULE = SharedSizeNotConstant()
