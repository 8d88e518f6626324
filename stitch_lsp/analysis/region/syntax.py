"""Reading Python with tree-sitter: a node's text, the names a statement reads and binds, import names."""

from __future__ import annotations

from functools import lru_cache

import tree_sitter as ts
import tree_sitter_python as tsp

from stitch_lsp.analysis.region.module_needs import identifiers

# Compound statements a kernel cannot hold: Python control flow.
CONTROL = {"if_statement", "for_statement", "while_statement", "try_statement", "with_statement",
           "match_statement"}


@lru_cache(maxsize=1)
def python_parser() -> ts.Parser:
    return ts.Parser(ts.Language(tsp.language()))


def node_text(src: bytes, node: ts.Node) -> str:
    return src[node.start_byte:node.end_byte].decode("utf-8", "replace")


def walk(node: ts.Node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def bound_names(node: ts.Node, src: bytes) -> list[str]:
    """Names bound by an assignment target (identifiers in patterns; not attributes or subscripts)."""
    if node.type == "identifier":
        return [node_text(src, node)]
    if node.type in ("pattern_list", "tuple_pattern", "list_pattern", "tuple", "list", "parenthesized_expression"):
        out: list[str] = []
        for c in node.named_children:
            out += bound_names(c, src)
        return out
    return []


def _reads(node: ts.Node, src: bytes) -> list[str]:
    """Identifiers read by an expression, in order (attribute names and keyword names excluded)."""
    out: list[str] = []

    def visit(n: ts.Node) -> None:
        if n.type == "identifier":
            out.append(node_text(src, n))
            return
        if n.type == "attribute":
            visit(n.child_by_field_name("object"))
            return
        if n.type == "keyword_argument":
            visit(n.child_by_field_name("value"))
            return
        if n.type in ("lambda", "string"):
            return
        for c in n.named_children:
            visit(c)

    visit(node)
    return out


def statement_io(stmt: ts.Node, src: bytes) -> tuple[list[str], list[str]]:
    """(names read, names written) by one simple statement, reads first."""
    reads: list[str] = []
    writes: list[str] = []
    node = stmt.named_children[0] if stmt.type == "expression_statement" and stmt.named_children else stmt
    if node.type == "assignment":
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if right is not None:
            reads += _reads(right, src)
        writes += bound_names(left, src)
        if left is not None and left.type in ("subscript", "attribute"):
            reads += _reads(left, src)
            writes += [n for n in _reads(left, src)[:1]]
    elif node.type == "augmented_assignment":
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        reads += _reads(left, src) + _reads(right, src)
        writes += bound_names(left, src) or _reads(left, src)[:1]
    else:
        reads += _reads(node, src)
        # In-place methods (x.add_(1), x.mul_(2)) write their receiver.
        for n in walk(node):
            if n.type == "call":
                fn = n.child_by_field_name("function")
                if fn is not None and fn.type == "attribute":
                    attr = fn.child_by_field_name("attribute")
                    obj = fn.child_by_field_name("object")
                    if attr is not None and node_text(src, attr).endswith("_") and obj is not None and obj.type == "identifier":
                        writes.append(node_text(src, obj))
    return reads, writes



def import_names(stmt_text: str) -> set[str]:
    """Names bound by one import statement's text."""
    root = python_parser().parse(stmt_text.encode("utf-8")).root_node
    src = stmt_text.encode("utf-8")
    names: set[str] = set()
    for stmt in root.named_children:
        for n in stmt.named_children:
            if n.type == "aliased_import":
                names.add(node_text(src, n.child_by_field_name("alias")))
            elif n.type == "dotted_name" and not (stmt.type == "import_from_statement" and n == stmt.child_by_field_name("module_name")):
                names.add(node_text(src, n).split(".")[0] if stmt.type == "import_statement" else node_text(src, n).split(".")[-1])
    return names



def identifiers_of(text: str) -> set[str]:
    src = text.encode("utf-8")
    return identifiers(python_parser().parse(src).root_node, src)

