"""What a selection is: its place in the function, what it reads and gives back, and the ops it calls."""

from __future__ import annotations

import builtins
import textwrap

from stitch_lsp.analysis.region.data import Region
from stitch_lsp.analysis.region.file_facts import function_imports, module_facts
from stitch_lsp.analysis.region.locate import Selection
from stitch_lsp.analysis.region.module_needs import identifiers, statement_text, top_level_definitions
from stitch_lsp.analysis.region.syntax import CONTROL, bound_names, import_names, node_text, statement_io, walk
from stitch_lsp.findings import Range

_VIEW_METHODS = {"view", "reshape", "contiguous", "size", "dim", "transpose", "permute", "unsqueeze",
                 "squeeze", "flatten", "expand", "t", "float", "half", "bfloat16", "to", "type_as",
                 "chunk", "split", "numel", "unflatten", "view_as", "expand_as", "detach"}
_TENSOR_BUILTINS = {"float", "int", "min", "max", "abs", "len", "tuple", "list", "range", "pow", "round", "sum"}
_ARITH = {"+", "-", "*", "/", "@", "**", "//", "%"}


def describe(sel: Selection, region: Region) -> None:
    """Where the selection sits in its function, its text, the imports and names around it."""
    src, first, last = sel.src, sel.statements[0], sel.statements[-1]
    params = []
    for p in sel.func.child_by_field_name("parameters").named_children:
        name_node = p if p.type == "identifier" else (p.child_by_field_name("name") or (p.named_children[0] if p.named_children else None))
        if name_node is not None:
            params.append(node_text(src, name_node))
    region.function_params = [p for p in params if p != "self"]
    region.range = Range.of(first.start_point[0], first.start_point[1], last.end_point[0], last.end_point[1])
    region.indent = sel.lines[first.start_point[0]][: first.start_point[1]]
    region.body = textwrap.dedent("\n".join(sel.lines[first.start_point[0]:last.end_point[0] + 1]))
    region.nesting = list(sel.nesting)
    region.prelude = _prelude(sel)
    imports, constants, _defined, import_lines = module_facts(sel.root, src)
    local_imports = function_imports(sel.func, first.start_point[0], src)
    for line in local_imports:
        imports |= import_names(line)
    sel.imports, sel.constants = imports, constants
    sel.definitions = top_level_definitions(sel.root, src, sel.lines)
    region.imports = import_lines + local_imports
    # Names bound in the function before the selection: locals, which shadow builtins (``input``).
    sel.locals_before = set(params)
    for n in walk(sel.func.child_by_field_name("body")):
        if n.start_point[0] >= first.start_point[0]:
            continue
        if n.type in ("assignment", "augmented_assignment", "for_statement"):
            sel.locals_before |= set(bound_names(n.child_by_field_name("left"), src))


def _prelude(sel: Selection) -> list[str]:
    """Simple statements of the function (and of the blocks around the selection) above the selection."""
    out: list[tuple[int, str]] = []
    first = sel.statements[0].start_point[0]
    holders = [sel.func.child_by_field_name("body")]
    for n in walk(sel.func.child_by_field_name("body")):
        if n.type == "block" and n.start_point[0] <= first <= n.end_point[0] and n not in holders:
            holders.append(n)
    for block in holders:
        for s in block.named_children:
            if s.end_point[0] < first and s.type == "expression_statement":
                out.append((s.start_point[0], statement_text(sel.lines, sel.src, s)))
    return [text for _, text in sorted(out)]


def data_flow(sel: Selection, region: Region) -> None:
    """What the selection reads from before it (inputs) and gives to what follows (outputs, return)."""
    src = sel.src
    assigned: set[str] = set()
    written: list[str] = []
    inputs: list[str] = []
    for s in sel.statements:
        if s.type == "return_statement":
            region.returns = True
            expr = s.named_children[0] if s.named_children else None
            region.return_expr = node_text(src, expr) if expr is not None else ""
        if s.type in CONTROL:
            continue
        reads, writes = statement_io(s, src)
        for r in reads:
            if r not in assigned and r not in inputs:
                inputs.append(r)
        for w in writes:
            assigned.add(w)
            if w not in written:
                written.append(w)
    sel.assigned = assigned
    # Read after the selection: later in the function, or anywhere in a loop around it (the next iteration).
    used_after: set[str] = set()
    end = sel.statements[-1].end_point[0]
    for n in walk(sel.func.child_by_field_name("body")):
        if n.type == "identifier" and n.start_point[0] > end:
            used_after.add(node_text(src, n))
    for loop in sel.loops:
        used_after |= identifiers(loop, src)
    region.outputs = [w for w in written if w in used_after]
    free = []
    for name in inputs:
        if name == "self" or (name in sel.imports and name not in sel.locals_before):
            continue
        if name in sel.constants and name not in sel.locals_before:
            region.module_names[name] = sel.constants[name]
            continue
        if name in sel.definitions and name not in sel.locals_before:
            continue  # a function or class of this file: copied into the Task, inlined by tracing
        if hasattr(builtins, name) and name not in assigned and name not in sel.locals_before:
            continue
        free.append(name)
    region.inputs = free


def find_ops(sel: Selection, region: Region) -> None:
    """The calls and operators the selection runs; calls Stitch cannot take are noted for the refusals."""
    src = sel.src
    for s in sel.statements:
        for n in walk(s):
            if n.type == "call":
                fn = n.child_by_field_name("function")
                label = node_text(src, fn)
                if fn.type == "attribute":
                    obj = fn.child_by_field_name("object")
                    attr = node_text(src, fn.child_by_field_name("attribute"))
                    root_name = node_text(src, obj).split(".")[0].split("(")[0]
                    if root_name in sel.imports or node_text(src, obj) == "self" or root_name in sel.definitions:
                        region.ops.append(label)
                    elif attr not in _VIEW_METHODS:
                        region.ops.append("." + attr)
                elif fn.type == "identifier":
                    if label in sel.locals_before or label in sel.assigned:
                        region.ops.append(label)  # a callable the function holds (a submodule from a list)
                    elif label in sel.definitions or label in sel.imports:
                        region.ops.append(label)
                    elif hasattr(builtins, label):
                        if label not in _TENSOR_BUILTINS and label not in sel.non_tensor_calls:
                            sel.non_tensor_calls.append(label)
                    elif label not in sel.unknown_calls:
                        sel.unknown_calls.append(label)
            elif n.type in ("binary_operator", "augmented_assignment"):
                op = n.child_by_field_name("operator")
                sym = node_text(src, op).rstrip("=") if op is not None else ""
                if sym in _ARITH:
                    region.ops.append(sym)
            elif n.type == "unary_operator" and node_text(src, n).startswith("-") and n.named_children and n.named_children[0].type not in ("integer", "float"):
                region.ops.append("neg")

