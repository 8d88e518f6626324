"""The C building blocks every shape of reduction kernel shares: identities and combines, the Emitter set up
for a reduction, one element folded into a reduction, and the row's divisions turned into products."""

from __future__ import annotations

import re

from stitch_lsp.coders.template.cuda_common import _round_to as _round
from stitch_lsp.coders.template.emitter import Emitter
from stitch_lsp.coders.template.kernels import _Writer
from stitch_lsp.coders.template.rows.analysis import Analysis
from stitch_lsp.op_graph import OpNode
from stitch_lsp.plan.fusion import Group

IDENTITY = {"sum": "0.f", "mean": "0.f", "gather": "0.f", "max": "__int_as_float(0xff800000)",
             "min": "__int_as_float(0x7f800000)", "prod": "1.f", "argmax": "__int_as_float(0xff800000)",
             "argmin": "__int_as_float(0x7f800000)"}
COMBINE = {"sum": "({a} + {b})", "mean": "({a} + {b})", "gather": "({a} + {b})", "max": "stitch_max_nan({a}, {b})",
            "min": "stitch_min_nan({a}, {b})", "prod": "({a} * {b})"}
ARG_MERGE = {"argmax": "stitch_argmax_merge", "argmin": "stitch_argmin_merge"}
NO_POS = "2147483647"  # the position an empty argmax holds (any real one wins a tie against it)



class RowEmitter(Emitter):
    """An Emitter that remembers which variables hold one value per row (they are loop-invariant)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.row_vars: set[str] = set()

    def value(self, name: str, ix: str) -> str:
        out = super().value(name, ix)
        if ix == "row":
            self.row_vars.add(out)
        return out


def fold_element(em: Emitter, how: str, acc: str, val: str, guard: str, sums: tuple | None = None) -> None:
    """One element into a reduction: its offset from the shift into the sums (s1, s2) where ``sums`` is
    (shift, s1, s2) (a mean and the variance around it), else combined into ``acc``; nothing where ``guard`` fails."""
    if sums is not None:
        shift, s1, s2 = sums
        d = em.fresh("d")
        em.emit(f"const float {d} = {f'{guard} ? {val} - {shift} : 0.f' if guard else f'{val} - {shift}'};")
        em.emit(f"{s1} += {d}; {s2} = fmaf({d}, {d}, {s2});")
        return
    combined = COMBINE[how].format(a=acc, b=val)
    em.emit(f"{acc} = {guard} ? {combined} : {acc};" if guard else f"{acc} = {combined};")


def reduction_emitter(w: _Writer, a: Analysis, group: Group, index: dict[str, OpNode], indexed_rows: bool):
    """The Emitter of a reduction kernel. ``indexed_rows``: elements reach their row through the domain's index
    map (rows that are not the last dims). The pointwise kernels' cheaper forms (2-ulp divides, one-instruction
    clamps, SiLU / sigmoid without the IEEE division's slow path) serve the prologue and epilogue; values that feed
    a comparison stay exact."""
    em = w.em
    em.vector_hint = w.hint
    em.row_len = a.dom.row_len
    if indexed_rows:
        em.row_domain = a.dom
    em.fast_math = True
    em.round_products = True
    em.half_outputs = all(index[o].dtype in ("bfloat16", "float16") for o in group.outputs)
    em.mark_exact()
    em.row_nodes = a.row_nodes
    em.indent = "  "
    return em


def rounded(em: Emitter, acc: str, dtype: str) -> str:
    """The reduction's value rounded to its dtype, as eager rounds it (in place)."""
    if dtype not in ("float32", "int64", "bool"):
        em.emit(f"{acc} = {_round(acc, dtype)};")
    return acc


def row_reciprocals(lines: list[str], row_vars: set[str], top: str = "  ") -> list[str]:
    """``x / d`` with ``d`` one value per row becomes ``x * (1 / d)``, the reciprocal taken once per row.

    Within 1.5 ulp of the quotient; a full-precision division per element costs about ten instructions.
    """
    division = re.compile(r"\(([\w\[\]]+) / (\w+)\)|stitch_div(?:_fast)?\(([\w\[\]]+), (\w+)\)")
    wanted = {m.group(2) or m.group(4) for line in lines for m in division.finditer(line)} & row_vars
    if not wanted:
        return lines
    out = list(lines)
    for d in sorted(wanted):
        # After the statement that gives d its final value (row values are assigned at the top level).
        defs = [i for i, line in enumerate(out) if re.search(rf"(?<![\w\[])(?:float )?{d} [*+]?= ", line)]
        if not defs:
            continue
        at = max(defs)
        indent = re.match(r"\s*", out[at]).group(0)
        if indent != top:
            continue  # defined inside a loop or a branch: leave the division alone
        out.insert(at + 1, f"{indent}const float rcp_{d} = 1.f / {d};")
        for i in range(at + 2, len(out)):
            out[i] = re.sub(rf"\(([\w\[\]]+) / {d}\)|stitch_div(?:_fast)?\(([\w\[\]]+), {d}\)",
                            lambda m: f"({m.group(1) or m.group(2)} * rcp_{d})", out[i])
    return out


def retarget(line: str, local: list[str], full: list[str]) -> str:
    """Stores were written with output numbers among ``local``; use numbers among ``full``."""
    def sub(m: re.Match) -> str:
        k = int(m.group(1))
        return f"out{full.index(local[k])} +" if k < len(local) else m.group(0)
    return re.sub(r"out(\d+) \+", sub, line)
