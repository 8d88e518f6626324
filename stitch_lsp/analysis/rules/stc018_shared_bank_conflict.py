"""STC018: consecutive threads walk down a column of a shared 2D array whose rows are a
multiple of 128 bytes, so every access of the warp lands in the same bank."""

from __future__ import annotations

from stitch_lsp.analysis.cuda_facts import FunctionFacts, index_expr
from stitch_lsp.analysis.cuda_text import squash
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.analysis.rules.thread_index import Kind, XIndex
from stitch_lsp.findings import Fix, Severity

BANKS = 32
BANK_BYTES = 4
ELEMENT_BYTES = {
    "float": 4, "int": 4, "unsigned": 4, "unsigned int": 4, "int32_t": 4, "uint32_t": 4,
    "double": 8, "long long": 8, "int64_t": 8, "uint64_t": 8, "float2": 8,
    "__half": 2, "half": 2, "__nv_bfloat16": 2, "short": 2,
}


class SharedBankConflict(Rule):
    meta = RuleMeta("STC018", "shared-bank-conflict",
                    "Threads of a warp walk a column of a shared array (bank conflicts)", Severity.WARNING)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        if facts.is_host_code:
            return
        arrays = {d.key: d for d in facts.decls if d.is_shared and not d.is_extern and d.array_size is not None}
        if not arrays:
            return
        xi = XIndex(facts)
        flagged: set[str] = set()
        for a in facts.accesses:
            d = arrays.get(a.base)
            if d is None or len(a.indices) < 2:
                continue
            element = ELEMENT_BYTES.get(d.type_text.replace("const ", "").replace("volatile ", "").strip())
            row = facts.resolve_int(d.array_size)
            if element is None or not row or (row * element) % (BANKS * BANK_BYTES):
                continue  # rows already spread over the banks (e.g. padded to 33)
            if xi.expr(index_expr(a.indices[-1]))[0] == Kind.UNIT:
                continue  # threads move along a row: conflict-free
            if not any(xi.expr(index_expr(i))[0] in (Kind.UNIT, Kind.SCALED) for i in a.indices[:-1]):
                continue
            size = squash(facts.text(d.array_size))
            fix = None
            if d.name not in flagged:
                fix = Fix(title=f"Pad the rows of `{d.name}`: [{size} + 1]",
                          edits=(out.replace(d.array_size, f"{size} + 1"),))
            flagged.add(d.name)
            out.emit(a.node, f"`{facts.text(a.node)}`: consecutive threads step down a column of `{d.name}`, "
                             f"whose {row}-element rows all start in the same bank, so the warp's accesses "
                             f"serialise (bank conflicts); pad the rows: `[{size} + 1]`",
                     fix=fix)


RULE = SharedBankConflict()
