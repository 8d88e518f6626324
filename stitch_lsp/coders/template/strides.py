"""Which values of a lowered program are known to be contiguous, and views only of those.

A generated program runs the reference's ``view`` calls on tensors of its own: a kernel's output
(always written contiguous), a cuBLAS result, or a PyTorch view step (a permute, a slice, an
attention call's output, whose strides are whatever its backend chose). Eager's tensor at the same
point may have had other strides: a pointwise op on a transposed input keeps the transposed layout,
where the fused kernel writes its output row-major. A ``view`` that eager could take then fails
with "view size is not compatible with input tensor's size and stride". So a program views only
values whose strides it knows (contiguous); any other ``view`` becomes a ``reshape``, which is the
same view wherever the strides allow one and a copy where they do not. The graph is functional (no
value is written after it is made), so a copy where eager had an alias computes the same values.
"""

from __future__ import annotations

from typing import Any

from stitch_lsp.plan import op_table

VIEW_CALLS = ("aten.view.default", "aten._unsafe_view.default")
RESHAPE = "aten.reshape.default"
# Calls whose result is a new row-major tensor whatever their inputs' strides.
FRESH_CONTIGUOUS = op_table.ROW_MAJOR_RESULTS
# Calls that keep a contiguous input contiguous (the same elements, the same order).
KEEPS_CONTIGUOUS = {"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
                    "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default",
                    "aten.alias.default", "aten.detach.default"}


def _clone_format(step: dict[str, Any]) -> str:
    fmt = (step.get("kwargs") or {}).get("memory_format")
    return fmt.get("$memory_format", "") if isinstance(fmt, dict) else ""


def _source(step: dict[str, Any]) -> str | None:
    args = step.get("args") or []
    first = args[0] if args else None
    return first.get("$") if isinstance(first, dict) else None


def checked_views(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``steps`` (``program_data``'s) with every ``view`` of a value not known to be contiguous made a
    ``reshape``. Known contiguous: kernel and Triton outputs, GEMM results, a clone into
    ``contiguous_format``, and views of those that keep the order."""
    contiguous: set[str] = set()
    out = []
    for step in steps:
        if "kernel" in step or "triton" in step:
            contiguous.update(o[0] for o in step["outputs"] if len(o) < 4)  # a 4th item: written channels-last
            out.append(step)
            continue
        op, name = step.get("op"), step.get("name")
        src = _source(step)
        if op in VIEW_CALLS and src not in contiguous:
            step = dict(step, op=RESHAPE)
            op = RESHAPE
        if step.get("layout"):
            pass  # a channels-last convolution: its output is not row-major
        elif op in FRESH_CONTIGUOUS:
            contiguous.add(name)
        elif op == "aten.clone.default" and (_clone_format(step) == "contiguous_format"
                                             or (not _clone_format(step) and src in contiguous)):
            contiguous.add(name)
        elif op in KEEPS_CONTIGUOUS and src in contiguous:
            contiguous.add(name)
        out.append(step)
    return out
