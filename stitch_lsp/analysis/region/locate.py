"""Where a selection lies: the enclosing function and class, the block holding it, the branches and loops around it."""

from __future__ import annotations

import tree_sitter as ts
from attrs import define, field

from stitch_lsp.analysis.region.syntax import python_parser, walk

# Compound statements whose bodies a selection may sit in; the header (condition, loop) stays in Python.
_BODIES = {"if_statement": "if", "for_statement": "for", "while_statement": "while", "with_statement": "with",
           "try_statement": "try"}
_CLAUSES = {"else_clause": "else", "elif_clause": "elif", "except_clause": "except", "finally_clause": "finally"}


@define
class Selection:
    """Where the selection lies, what it reads and writes: the facts the refusal checks look at."""

    src: bytes
    root: ts.Node
    lines: list[str]
    start: int
    end: int
    func: ts.Node | None = None
    cls: ts.Node | None = None
    block: ts.Node | None = None  # the innermost block holding the selected statements
    statements: list[ts.Node] = field(factory=list)
    split: ts.Node | None = None  # a statement the selection cuts through
    nesting: list[str] = field(factory=list)  # "else: of the if on line 62", innermost last
    loops: list[ts.Node] = field(factory=list)  # enclosing for / while statements
    imports: set[str] = field(factory=set)
    constants: dict[str, str] = field(factory=dict)
    definitions: dict[str, tuple[int, str]] = field(factory=dict)  # top-level def / class -> (line, text)
    locals_before: set[str] = field(factory=set)  # parameters and names the function binds before the selection
    assigned: set[str] = field(factory=set)
    unknown_calls: list[str] = field(factory=list)
    non_tensor_calls: list[str] = field(factory=list)
    unknown_self: list[str] = field(factory=list)


def _innermost_function(root: ts.Node, start: int, end: int) -> ts.Node | None:
    func = None
    for n in walk(root):
        if n.type == "function_definition":
            body = n.child_by_field_name("body")
            if body is not None and body.start_point[0] <= start and end <= body.end_point[0]:
                func = n
    return func


def _child_blocks(stmt: ts.Node) -> list[tuple[str, ts.Node]]:
    """The bodies of a compound statement with a word saying which (``if``, ``else``, ``for`` ...)."""
    word = _BODIES.get(stmt.type, stmt.type)
    out = []
    for child in stmt.named_children:
        if child.type == "block":
            out.append((word, child))
        elif child.type in _CLAUSES:
            for grand in child.named_children:
                if grand.type == "block":
                    out.append((_CLAUSES[child.type], grand))
    return out


def _descend(sel: Selection) -> None:
    """From the function body into the if / else / for / with body that holds the selection."""
    block = sel.func.child_by_field_name("body")
    while True:
        stmts = [s for s in block.named_children if s.type != "comment"]
        touched = [s for s in stmts if not (s.end_point[0] < sel.start or s.start_point[0] > sel.end)]
        if len(touched) == 1 and touched[0].type in _BODIES:
            inner = next(((w, b) for w, b in _child_blocks(touched[0])
                          if b.start_point[0] <= sel.start and sel.end <= b.end_point[0]
                          and sel.start > touched[0].start_point[0]), None)
            if inner is not None:
                word, block = inner
                head = _BODIES[touched[0].type]
                sel.nesting.append(f"{word}: of the {head} on line {touched[0].start_point[0] + 1}"
                                   if word != head else f"the {head} body on line {touched[0].start_point[0] + 1}")
                if touched[0].type in ("for_statement", "while_statement"):
                    sel.loops.append(touched[0])
                continue
        sel.block = block
        for s in touched:
            if s.start_point[0] < sel.start or s.end_point[0] > sel.end:
                sel.split = s
                return
        sel.statements = touched
        return


def locate(source: str, start: int, end: int) -> Selection:
    src = source.encode("utf-8")
    root = python_parser().parse(src).root_node
    sel = Selection(src=src, root=root, lines=source.splitlines(), start=start, end=end)
    sel.func = _innermost_function(root, start, end)
    if sel.func is None:
        return sel
    cls = sel.func.parent.parent if sel.func.parent is not None and sel.func.parent.type == "block" else None
    sel.cls = cls if cls is not None and cls.type == "class_definition" else None
    _descend(sel)
    return sel

