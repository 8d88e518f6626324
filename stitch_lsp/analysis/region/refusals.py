"""Why a selection cannot be fused: each refusal a name and a check, run in order.

The first group (where the selection lies) stops at the first that refuses: nothing further can be known.
The second (what the selection does) runs after the selection is described, each adding its sentence.
"""

from __future__ import annotations

from typing import Any

from attrs import define

from stitch_lsp.analysis.region.data import Region
from stitch_lsp.analysis.region.locate import Selection
from stitch_lsp.analysis.region.syntax import CONTROL


@define(frozen=True)
class Refusal:
    name: str
    check: Any  # (Selection, Region) -> str | None: the one sentence the user sees, with what to do
    stops: bool = False


def _syntax(sel: Selection, region: Region) -> str | None:
    return "the file has syntax errors" if sel.root.has_error else None


def _outside_function(sel: Selection, region: Region) -> str | None:
    return "select statements inside a function or a forward method" if sel.func is None else None


def _in_init(sel: Selection, region: Region) -> str | None:
    if sel.cls is not None and region.function == "__init__":
        return "the selection is in __init__, which builds the module: select code from forward"
    return None


def _splits(sel: Selection, region: Region) -> str | None:
    if sel.split is None:
        return None
    s0, s1 = sel.split.start_point[0], sel.split.end_point[0]
    return f"the selection splits a statement (lines {s0 + 1}-{s1 + 1}); select whole statements"


def _empty(sel: Selection, region: Region) -> str | None:
    return "select whole statements of the function body" if not sel.statements else None


def _control_flow(sel: Selection, region: Region) -> str | None:
    s = next((s for s in sel.statements if s.type in CONTROL), None)
    if s is None:
        return None
    kind = s.type.replace("_statement", "")
    return (f"the selection has Python control flow ({kind} on line {s.start_point[0] + 1}); a kernel cannot branch "
            f"on tensor values: select the statements inside the {kind} (its condition stays in Python)")


def _early_return(sel: Selection, region: Region) -> str | None:
    rets = [s for s in sel.statements if s.type == "return_statement"]
    return "a return before the end of the selection" if rets and rets[-1] is not sel.statements[-1] or len(rets) > 1 else None


def _unknown_call(sel: Selection, region: Region) -> str | None:
    return "; ".join(f"calls {name}(), which Stitch does not know" for name in sel.unknown_calls) or None


def _non_tensor_call(sel: Selection, region: Region) -> str | None:
    return "; ".join(f"calls {name}(), which is not a tensor op" for name in sel.non_tensor_calls) or None


def _unknown_self(sel: Selection, region: Region) -> str | None:
    return "; ".join(f"self.{name} is not set in __init__; Stitch cannot re-create it"
                     for name in sel.unknown_self) or None


def _no_ops(sel: Selection, region: Region) -> str | None:
    return "the selection has no tensor ops" if not region.ops and not region.problems else None


def _unused(sel: Selection, region: Region) -> str | None:
    if region.returns or region.outputs or region.problems:
        return None
    return "nothing the selection computes is used after it"


REFUSALS: tuple[Refusal, ...] = (
    Refusal("syntax-error", _syntax),
    Refusal("outside-function", _outside_function, stops=True),
    Refusal("in-init", _in_init, stops=True),
    Refusal("splits-statement", _splits, stops=True),
    Refusal("no-whole-statement", _empty, stops=True),
    Refusal("control-flow", _control_flow),
    Refusal("early-return", _early_return),
    Refusal("unknown-call", _unknown_call),
    Refusal("non-tensor-call", _non_tensor_call),
    Refusal("unknown-attribute", _unknown_self),
    Refusal("no-tensor-ops", _no_ops),
    Refusal("result-unused", _unused),
)
LOCATION = REFUSALS[:5]
CONTENT = REFUSALS[5:]


def refuse(checks: tuple[Refusal, ...], sel: Selection, region: Region) -> bool:
    """Run ``checks`` in order; True when one that stops refused."""
    for refusal in checks:
        message = refusal.check(sel, region)
        if message:
            region.problems.append(message)
            if refusal.stops:
                return True
    return False

