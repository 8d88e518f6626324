"""What re-creating a selection's module needs: ``__init__``'s statements, the class's methods, the file's
own functions and classes, each found by the names it reads (tree-sitter; nothing is run).

Real model code builds its submodules from config objects, ``nn.ModuleDict`` / ``nn.ModuleList``
entries, locals (``m = self.mlp``) and lambdas over them (``self.mlpf = lambda x: m.c_proj(x)``), and
registers buffers inside branches (a causal mask under ``if not self.flash:``). The Task keeps every
``__init__`` statement the used attributes depend on, in the file's order, and copies the classes and
functions they name, so tracing inlines them as torch would.
"""

from __future__ import annotations

import textwrap

import tree_sitter as ts
from attrs import define, field

_LOOPS = ("for_statement", "while_statement")
_REGISTER = ("self.register_buffer", "self.register_parameter", "self.add_module")


def _text(src: bytes, node: ts.Node) -> str:
    return src[node.start_byte:node.end_byte].decode("utf-8", "replace")


def identifiers(node: ts.Node, src: bytes) -> set[str]:
    """Every name a piece of code reads or binds: not attribute names, keyword names, strings or comments."""
    out: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == "identifier":
            out.add(_text(src, n))
        elif n.type == "attribute":
            obj = n.child_by_field_name("object")
            if obj is not None:
                stack.append(obj)
        elif n.type == "keyword_argument":
            value = n.child_by_field_name("value")
            if value is not None:
                stack.append(value)
        elif n.type not in ("string", "comment"):
            stack.extend(n.named_children)
    return out


def self_attributes(node: ts.Node, src: bytes, calls: bool = True) -> list[str]:
    """``self.X`` names a piece of code reads, in order of first use; ``calls=False``: not those called
    (``self.register_buffer(...)`` in ``__init__`` is nn.Module's own)."""
    out: list[str] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == "call" and not calls:
            stack.extend(reversed(n.child_by_field_name("arguments").named_children)
                         if n.child_by_field_name("arguments") is not None else [])
            fn = n.child_by_field_name("function")
            if fn is not None and fn.type == "attribute":
                stack.append(fn.child_by_field_name("object"))
            continue
        if n.type == "attribute":
            obj = n.child_by_field_name("object")
            if obj is not None and obj.type == "identifier" and _text(src, obj) == "self":
                name = _text(src, n.child_by_field_name("attribute"))
                if name not in out:
                    out.append(name)
        stack.extend(reversed(n.named_children))
    return out


def statement_text(lines: list[str], src: bytes, node: ts.Node) -> str:
    """A (possibly nested, possibly multi-line) statement's own text, dedented to column 0."""
    col = node.start_point[1]
    return textwrap.dedent(" " * col + _text(src, node))


@define
class InitStatement:
    line: int  # 0-based
    text: str  # dedented
    binds_self: set[str] = field(factory=set)
    binds_local: set[str] = field(factory=set)
    names: set[str] = field(factory=set)  # identifiers it reads
    reads_self: set[str] = field(factory=set)


def _binds(node: ts.Node, src: bytes) -> tuple[set[str], set[str]]:
    attrs: set[str] = set()
    local: set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type in ("assignment", "augmented_assignment"):
            left = n.child_by_field_name("left")
            for t in ([left] if left is None or left.type not in ("pattern_list", "tuple_pattern") else left.named_children):
                if t is None:
                    continue
                if t.type == "identifier":
                    local.add(_text(src, t))
                elif t.type == "attribute" and _text(src, t.child_by_field_name("object")) == "self":
                    attrs.add(_text(src, t.child_by_field_name("attribute")))
        elif n.type == "call":
            fn = _text(src, n.child_by_field_name("function"))
            args = n.child_by_field_name("arguments")
            first = args.named_children[0] if args is not None and args.named_children else None
            if fn in _REGISTER and first is not None and first.type == "string":
                attrs.add(_text(src, first).strip("\"'"))
            elif fn.startswith("self.") and fn.count(".") == 2:  # self.layers.append(...)
                attrs.add(fn.split(".")[1])
        elif n.type in ("for_statement",):
            left = n.child_by_field_name("left")
            if left is not None:
                local |= identifiers(left, src)
        if n.type not in ("lambda", "function_definition", "class_definition"):
            stack.extend(n.named_children)
    return attrs, local


def init_statements(init_fn: ts.Node, lines: list[str], src: bytes) -> list[InitStatement]:
    """``__init__``'s statements, nested ones too (a branch's buffer): each simple statement, or the whole
    loop it sits in (a ``for`` that appends blocks)."""
    out: list[InitStatement] = []
    body = init_fn.child_by_field_name("body")

    def visit(block: ts.Node) -> None:
        for stmt in block.named_children:
            if stmt.type == "comment":
                continue
            if stmt.type in _LOOPS or stmt.type in ("expression_statement",):
                text = _text(src, stmt)
                if "super(" in text or (stmt.type == "expression_statement" and stmt.named_children
                                        and stmt.named_children[0].type == "string"):
                    continue
                attrs, local = _binds(stmt, src)
                reads = set(self_attributes(stmt, src, calls=False)) - (attrs if stmt.type == "expression_statement" else set())
                out.append(InitStatement(stmt.start_point[0], statement_text(lines, src, stmt), attrs, local,
                                         identifiers(stmt, src), reads))
            elif stmt.type in ("function_definition", "class_definition", "decorated_definition"):
                continue
            else:  # if / with / try: their statements, unconditionally (the branch the selection needs)
                for child in stmt.named_children:
                    if child.type == "block":
                        visit(child)
                    for grand in child.named_children:
                        if grand.type == "block":
                            visit(grand)

    if body is not None:
        visit(body)
    return out


def needed_statements(stmts: list[InitStatement], attrs: set[str]) -> tuple[list[InitStatement], set[str]]:
    """The statements that build ``attrs``, and those they read from (locals, other attributes), in file
    order; and the attributes that are not built anywhere in ``__init__``."""
    chosen: dict[int, InitStatement] = {}
    want_attrs, want_locals = set(attrs), set()
    changed = True
    while changed:
        changed = False
        for s in stmts:
            if s.line in chosen:
                continue
            if s.binds_self & want_attrs or s.binds_local & want_locals:
                chosen[s.line] = s
                want_attrs |= s.reads_self
                want_locals |= s.names
                changed = True
    built = set().union(*(s.binds_self for s in stmts)) if stmts else set()
    return [chosen[k] for k in sorted(chosen)], want_attrs - built


def top_level_definitions(root: ts.Node, src: bytes, lines: list[str]) -> dict[str, tuple[int, str]]:
    """The file's top-level functions and classes: name -> (line, source with decorators)."""
    out: dict[str, tuple[int, str]] = {}
    for stmt in root.named_children:
        node = stmt.child_by_field_name("definition") if stmt.type == "decorated_definition" else stmt
        if node is not None and node.type in ("function_definition", "class_definition"):
            out[_text(src, node.child_by_field_name("name"))] = (stmt.start_point[0], _text(src, stmt))
    return out


def class_methods(cls: ts.Node, src: bytes, lines: list[str]) -> dict[str, ts.Node]:
    body = cls.child_by_field_name("body")
    out: dict[str, ts.Node] = {}
    for item in body.named_children if body is not None else []:
        fn = item.child_by_field_name("definition") if item.type == "decorated_definition" else item
        if fn is not None and fn.type == "function_definition":
            out[_text(src, fn.child_by_field_name("name"))] = item
    return out
