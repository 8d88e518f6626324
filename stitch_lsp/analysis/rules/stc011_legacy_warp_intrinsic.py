"""STC011: warp shuffles and votes without `_sync` (removed for sm_70 and newer)."""

from __future__ import annotations

from stitch_lsp.analysis.cuda_facts import FunctionFacts
from stitch_lsp.analysis.rules.base import Emitter, Rule, RuleMeta
from stitch_lsp.findings import Fix, Severity

LEGACY = {name: f"{name}_sync" for name in ("__shfl", "__shfl_up", "__shfl_down", "__shfl_xor", "__any",
                                             "__all", "__ballot")}
FULL_MASK = "0xffffffff"


class LegacyWarpIntrinsic(Rule):
    meta = RuleMeta("STC011", "legacy-warp-intrinsic", "Warp shuffle or vote without `_sync`", Severity.WARNING)

    def check(self, facts: FunctionFacts, out: Emitter) -> None:
        for c in facts.calls:
            new = LEGACY.get(c.name)
            if new is None:
                continue
            fn = c.node.child_by_field_name("function")
            args = c.node.child_by_field_name("arguments")
            edits = [out.replace(fn, new)]
            if args is not None and args.children:
                edits.append(out.insert_after(args.children[0], FULL_MASK + (", " if c.args else "")))
            out.emit(fn, f"`{c.name}` is deprecated and does not compile for sm_70 and newer (independent "
                         f"thread scheduling); use `{new}({FULL_MASK}, ...)` with the mask of lanes taking part",
                     fix=Fix(title=f"Use `{new}` with a full-warp mask", edits=tuple(edits)))


RULE = LegacyWarpIntrinsic()
