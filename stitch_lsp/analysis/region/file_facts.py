"""What the file and the enclosing class define: imports, module constants, ``__init__``'s attributes and parameters."""

from __future__ import annotations

import tree_sitter as ts

from stitch_lsp.analysis.region.data import SelfNeed
from stitch_lsp.analysis.region.syntax import bound_names, node_text, walk


def module_facts(root: ts.Node, src: bytes) -> tuple[set[str], dict[str, str], set[str], list[str]]:
    """Import aliases, simple module-level constants, module-level functions/classes, import lines."""
    imports: set[str] = set()
    constants: dict[str, str] = {}
    defined: set[str] = set()
    import_lines: list[str] = []
    for stmt in root.named_children:
        if stmt.type in ("import_statement", "import_from_statement"):
            import_lines.append(node_text(src, stmt))
            for n in stmt.named_children:
                if n.type == "aliased_import":
                    imports.add(node_text(src, n.child_by_field_name("alias")))
                elif n.type == "dotted_name" and not (stmt.type == "import_from_statement" and n == stmt.child_by_field_name("module_name")):
                    imports.add(node_text(src, n).split(".")[0] if stmt.type == "import_statement" else node_text(src, n).split(".")[-1])
        elif stmt.type == "expression_statement" and stmt.named_children and stmt.named_children[0].type == "assignment":
            a = stmt.named_children[0]
            left = a.child_by_field_name("left")
            if left is not None and left.type == "identifier":
                constants[node_text(src, left)] = node_text(src, stmt)
            elif left is not None and left.type in ("pattern_list", "tuple_pattern"):
                for name in bound_names(left, src):  # M, N = 8192, 4096: each name, the one statement
                    constants[name] = node_text(src, stmt)
        elif stmt.type in ("function_definition", "class_definition"):
            defined.add(node_text(src, stmt.child_by_field_name("name")))
        elif stmt.type == "decorated_definition":
            d = stmt.child_by_field_name("definition")
            if d is not None:
                defined.add(node_text(src, d.child_by_field_name("name")))
    return imports, constants, defined, import_lines


def init_facts(cls: ts.Node, src: bytes) -> tuple[dict[str, SelfNeed], list[tuple[str, str | None]], dict[str, str]]:
    needs: dict[str, SelfNeed] = {}
    params: list[tuple[str, str | None]] = []
    local_values: dict[str, str] = {}
    body = cls.child_by_field_name("body")
    for item in body.named_children if body is not None else []:
        fn = item.child_by_field_name("definition") if item.type == "decorated_definition" else item
        if fn is None or fn.type != "function_definition" or node_text(src, fn.child_by_field_name("name")) != "__init__":
            continue
        for p in fn.child_by_field_name("parameters").named_children:
            if p.type == "identifier":
                params.append((node_text(src, p), None))
            elif p.type in ("default_parameter", "typed_default_parameter"):
                params.append((node_text(src, p.child_by_field_name("name")), node_text(src, p.child_by_field_name("value"))))
            elif p.type == "typed_parameter":
                params.append((node_text(src, p.named_children[0]), None))
        params = [p for p in params if p[0] != "self"]
        for stmt in fn.child_by_field_name("body").named_children:
            a = stmt.named_children[0] if stmt.type == "expression_statement" and stmt.named_children else None
            if a is not None and a.type == "assignment" and a.child_by_field_name("left").type == "identifier" \
                    and a.child_by_field_name("right") is not None:
                local_values[node_text(src, a.child_by_field_name("left"))] = node_text(src, a)
        for n in walk(fn.child_by_field_name("body")):
            if n.type == "assignment":
                left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
                if left is not None and left.type == "attribute" and node_text(src, left.child_by_field_name("object")) == "self":
                    name = node_text(src, left.child_by_field_name("attribute"))
                    rhs = node_text(src, right) if right is not None else ""
                    kind = "attribute"
                    if right is not None and right.type == "call":
                        callee = node_text(src, right.child_by_field_name("function"))
                        if callee.endswith("Parameter"):
                            kind = "parameter"
                        elif callee.split(".")[-1][:1].isupper():
                            kind = "module"
                    needs[name] = SelfNeed(name, kind, rhs, n.start_point[0])
            elif n.type == "call":
                fn_node = n.child_by_field_name("function")
                if fn_node is not None and node_text(src, fn_node) == "self.register_buffer":
                    args = n.child_by_field_name("arguments").named_children
                    if len(args) >= 2 and args[0].type == "string":
                        name = node_text(src, args[0]).strip("\"'")
                        needs[name] = SelfNeed(name, "buffer", node_text(src, args[1]), n.start_point[0])
    return needs, params, local_values


def function_imports(func: ts.Node, before_line: int, src: bytes) -> list[str]:
    """Import statements at the top level of ``func``'s body above the selection (``import torch.nn.functional as F``)."""
    body = func.child_by_field_name("body")
    return [node_text(src, s) for s in (body.named_children if body is not None else [])
            if s.type in ("import_statement", "import_from_statement") and s.end_point[0] < before_line]

