"""Selected Python statements → a Region: what a fused kernel would take, give back and need.

Pure and fast (tree-sitter-python, no torch, nothing run): the editor lists the
fuse code action from this on every cursor move. A Region says, in the user's
terms, why a selection cannot be fused when it cannot (``problems``).
"""

from __future__ import annotations

import builtins
import re
import textwrap
from functools import lru_cache

import tree_sitter as ts
import tree_sitter_python as tsp
from attrs import define, field

from stitch_lsp.findings import Range

_VIEW_METHODS = {"view", "reshape", "contiguous", "size", "dim", "transpose", "permute", "unsqueeze",
                 "squeeze", "flatten", "expand", "t", "float", "half", "bfloat16", "to", "type_as",
                 "chunk", "split", "numel", "unflatten", "view_as", "expand_as", "detach"}
_TENSOR_BUILTINS = {"float", "int", "min", "max", "abs", "len", "tuple", "list", "range", "pow", "round", "sum"}
_CONTROL = {"if_statement", "for_statement", "while_statement", "try_statement", "with_statement",
            "match_statement"}
_ARITH = {"+", "-", "*", "/", "@", "**", "//", "%"}
_WORD = re.compile(r"\b[A-Za-z_]\w*\b")


@lru_cache(maxsize=1)
def _parser() -> ts.Parser:
    return ts.Parser(ts.Language(tsp.language()))


@define
class SelfNeed:
    """An attribute of the enclosing module the selection uses (``self.norm``, ``self.scale``)."""

    name: str
    kind: str  # module | parameter | buffer | attribute | unknown
    init_source: str = ""  # the right-hand side in __init__ (constructor call or value)
    line: int | None = None  # 0-based line in __init__


@define
class Region:
    path: str
    range: Range  # the selected statements, whole lines
    function: str = ""
    class_name: str | None = None
    function_params: list[str] = field(factory=list)  # of the enclosing function, without self
    inputs: list[str] = field(factory=list)  # free variables, in order of first use
    outputs: list[str] = field(factory=list)  # assigned here and used afterwards
    returns: bool = False  # the selection ends with `return ...`
    return_expr: str = ""
    body: str = ""  # the selected statements, dedented
    indent: str = ""
    ops: list[str] = field(factory=list)  # e.g. ["self.lin", "F.gelu", "*"]
    self_needs: list[SelfNeed] = field(factory=list)
    module_names: dict[str, str] = field(factory=dict)  # module-level constants used: name -> source
    imports: list[str] = field(factory=list)  # the file's top-level import statements
    init_params: list[tuple[str, str | None]] = field(factory=list)  # __init__ params and their defaults
    # ``name = expr`` statements of __init__ (``inner = dim * 4``) that re-created attributes may use.
    init_locals: dict[str, str] = field(factory=dict)
    problems: list[str] = field(factory=list)

    @property
    def fusable(self) -> bool:
        return not self.problems

    @property
    def op_count(self) -> int:
        return len(self.ops)


def _text(src: bytes, node: ts.Node) -> str:
    return src[node.start_byte:node.end_byte].decode("utf-8", "replace")


def _walk(node: ts.Node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def _targets(node: ts.Node, src: bytes) -> list[str]:
    """Names bound by an assignment target (identifiers in patterns; not attributes or subscripts)."""
    if node.type == "identifier":
        return [_text(src, node)]
    if node.type in ("pattern_list", "tuple_pattern", "list_pattern", "tuple", "list", "parenthesized_expression"):
        out: list[str] = []
        for c in node.named_children:
            out += _targets(c, src)
        return out
    return []


def _reads(node: ts.Node, src: bytes) -> list[str]:
    """Identifiers read by an expression, in order (attribute names and keyword names excluded)."""
    out: list[str] = []

    def visit(n: ts.Node) -> None:
        if n.type == "identifier":
            out.append(_text(src, n))
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


def _statement_io(stmt: ts.Node, src: bytes) -> tuple[list[str], list[str]]:
    """(names read, names written) by one simple statement, reads first."""
    reads: list[str] = []
    writes: list[str] = []
    node = stmt.named_children[0] if stmt.type == "expression_statement" and stmt.named_children else stmt
    if node.type == "assignment":
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        if right is not None:
            reads += _reads(right, src)
        writes += _targets(left, src)
        if left is not None and left.type in ("subscript", "attribute"):
            reads += _reads(left, src)
            writes += [n for n in _reads(left, src)[:1]]
    elif node.type == "augmented_assignment":
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        reads += _reads(left, src) + _reads(right, src)
        writes += _targets(left, src) or _reads(left, src)[:1]
    else:
        reads += _reads(node, src)
        # In-place methods (x.add_(1), x.mul_(2)) write their receiver.
        for n in _walk(node):
            if n.type == "call":
                fn = n.child_by_field_name("function")
                if fn is not None and fn.type == "attribute":
                    attr = fn.child_by_field_name("attribute")
                    obj = fn.child_by_field_name("object")
                    if attr is not None and _text(src, attr).endswith("_") and obj is not None and obj.type == "identifier":
                        writes.append(_text(src, obj))
    return reads, writes


def _module_facts(root: ts.Node, src: bytes) -> tuple[set[str], dict[str, str], set[str], list[str]]:
    """Import aliases, simple module-level constants, module-level functions/classes, import lines."""
    imports: set[str] = set()
    constants: dict[str, str] = {}
    defined: set[str] = set()
    import_lines: list[str] = []
    for stmt in root.named_children:
        if stmt.type in ("import_statement", "import_from_statement"):
            import_lines.append(_text(src, stmt))
            for n in stmt.named_children:
                if n.type == "aliased_import":
                    imports.add(_text(src, n.child_by_field_name("alias")))
                elif n.type == "dotted_name" and not (stmt.type == "import_from_statement" and n == stmt.child_by_field_name("module_name")):
                    imports.add(_text(src, n).split(".")[0] if stmt.type == "import_statement" else _text(src, n).split(".")[-1])
        elif stmt.type == "expression_statement" and stmt.named_children and stmt.named_children[0].type == "assignment":
            a = stmt.named_children[0]
            left = a.child_by_field_name("left")
            if left is not None and left.type == "identifier":
                constants[_text(src, left)] = _text(src, stmt)
            elif left is not None and left.type in ("pattern_list", "tuple_pattern"):
                for name in _targets(left, src):  # M, N = 8192, 4096: each name, the one statement
                    constants[name] = _text(src, stmt)
        elif stmt.type in ("function_definition", "class_definition"):
            defined.add(_text(src, stmt.child_by_field_name("name")))
        elif stmt.type == "decorated_definition":
            d = stmt.child_by_field_name("definition")
            if d is not None:
                defined.add(_text(src, d.child_by_field_name("name")))
    return imports, constants, defined, import_lines


def _init_facts(cls: ts.Node, src: bytes) -> tuple[dict[str, SelfNeed], list[tuple[str, str | None]], dict[str, str]]:
    needs: dict[str, SelfNeed] = {}
    params: list[tuple[str, str | None]] = []
    local_values: dict[str, str] = {}
    body = cls.child_by_field_name("body")
    for item in body.named_children if body is not None else []:
        fn = item.child_by_field_name("definition") if item.type == "decorated_definition" else item
        if fn is None or fn.type != "function_definition" or _text(src, fn.child_by_field_name("name")) != "__init__":
            continue
        for p in fn.child_by_field_name("parameters").named_children:
            if p.type == "identifier":
                params.append((_text(src, p), None))
            elif p.type in ("default_parameter", "typed_default_parameter"):
                params.append((_text(src, p.child_by_field_name("name")), _text(src, p.child_by_field_name("value"))))
            elif p.type == "typed_parameter":
                params.append((_text(src, p.named_children[0]), None))
        params = [p for p in params if p[0] != "self"]
        for stmt in fn.child_by_field_name("body").named_children:
            a = stmt.named_children[0] if stmt.type == "expression_statement" and stmt.named_children else None
            if a is not None and a.type == "assignment" and a.child_by_field_name("left").type == "identifier" \
                    and a.child_by_field_name("right") is not None:
                local_values[_text(src, a.child_by_field_name("left"))] = _text(src, a)
        for n in _walk(fn.child_by_field_name("body")):
            if n.type == "assignment":
                left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
                if left is not None and left.type == "attribute" and _text(src, left.child_by_field_name("object")) == "self":
                    name = _text(src, left.child_by_field_name("attribute"))
                    rhs = _text(src, right) if right is not None else ""
                    kind = "attribute"
                    if right is not None and right.type == "call":
                        callee = _text(src, right.child_by_field_name("function"))
                        if callee.endswith("Parameter"):
                            kind = "parameter"
                        elif callee.split(".")[-1][:1].isupper():
                            kind = "module"
                    needs[name] = SelfNeed(name, kind, rhs, n.start_point[0])
            elif n.type == "call":
                fn_node = n.child_by_field_name("function")
                if fn_node is not None and _text(src, fn_node) == "self.register_buffer":
                    args = n.child_by_field_name("arguments").named_children
                    if len(args) >= 2 and args[0].type == "string":
                        name = _text(src, args[0]).strip("\"'")
                        needs[name] = SelfNeed(name, "buffer", _text(src, args[1]), n.start_point[0])
    return needs, params, local_values


def _local_imports(func: ts.Node, before_line: int, src: bytes) -> list[str]:
    """Import statements at the top level of ``func``'s body above the selection (``import torch.nn.functional as F``)."""
    body = func.child_by_field_name("body")
    return [_text(src, s) for s in (body.named_children if body is not None else [])
            if s.type in ("import_statement", "import_from_statement") and s.end_point[0] < before_line]


def _import_names(stmt_text: str) -> set[str]:
    """Names bound by one import statement's text."""
    root = _parser().parse(stmt_text.encode("utf-8")).root_node
    src = stmt_text.encode("utf-8")
    names: set[str] = set()
    for stmt in root.named_children:
        for n in stmt.named_children:
            if n.type == "aliased_import":
                names.add(_text(src, n.child_by_field_name("alias")))
            elif n.type == "dotted_name" and not (stmt.type == "import_from_statement" and n == stmt.child_by_field_name("module_name")):
                names.add(_text(src, n).split(".")[0] if stmt.type == "import_statement" else _text(src, n).split(".")[-1])
    return names


def extract_region(source: str, start_line: int, end_line: int, path: str = "") -> Region:
    """The Region of lines ``start_line``..``end_line`` (0-based, inclusive) of ``source``."""
    src = source.encode("utf-8")
    tree = _parser().parse(src)
    root = tree.root_node
    lines = source.splitlines()
    # Trim blank / comment-only lines at the edges of the selection.
    while start_line < end_line and start_line < len(lines) and lines[start_line].strip().startswith("#") | (not lines[start_line].strip()):
        start_line += 1
    while end_line > start_line and end_line < len(lines) and (not lines[end_line].strip() or lines[end_line].strip().startswith("#")):
        end_line -= 1
    region = Region(path=path, range=Range.of(start_line, 0, end_line, len(lines[end_line]) if end_line < len(lines) else 0))
    if root.has_error:
        region.problems.append("the file has syntax errors")
    # The innermost function whose body holds the selection.
    func = None
    for n in _walk(root):
        if n.type == "function_definition":
            body = n.child_by_field_name("body")
            if body is not None and body.start_point[0] <= start_line and end_line <= body.end_point[0]:
                func = n
    if func is None:
        region.problems.append("select statements inside a function or a forward method")
        return region
    region.function = _text(src, func.child_by_field_name("name"))
    cls = func.parent.parent if func.parent is not None and func.parent.type == "block" else None
    if cls is not None and cls.type != "class_definition":
        cls = None
    region.class_name = _text(src, cls.child_by_field_name("name")) if cls is not None else None
    if cls is not None and region.function == "__init__":
        region.problems.append("the selection is in __init__, which builds the module: select code from forward")
        return region
    params = []
    for p in func.child_by_field_name("parameters").named_children:
        name_node = p if p.type == "identifier" else (p.child_by_field_name("name") or (p.named_children[0] if p.named_children else None))
        if name_node is not None:
            params.append(_text(src, name_node))
    region.function_params = [p for p in params if p != "self"]
    body = func.child_by_field_name("body")
    stmts = [s for s in body.named_children if s.type != "comment"]
    selected = []
    for s in stmts:
        s0, s1 = s.start_point[0], s.end_point[0]
        if s1 < start_line or s0 > end_line:
            continue
        if s0 < start_line or s1 > end_line:
            region.problems.append(f"the selection splits a statement (lines {s0 + 1}-{s1 + 1}); select whole statements")
            return region
        selected.append(s)
    if not selected:
        # A selection inside a nested block (an if / for body) or within one statement's lines.
        region.problems.append("select whole statements of the function body")
        return region
    after = [s for s in stmts if s.start_point[0] > end_line]
    region.range = Range.of(selected[0].start_point[0], selected[0].start_point[1],
                            selected[-1].end_point[0], selected[-1].end_point[1])
    region.indent = lines[selected[0].start_point[0]][: selected[0].start_point[1]]
    first, last = selected[0].start_point[0], selected[-1].end_point[0]
    region.body = textwrap.dedent("\n".join(lines[first:last + 1]))
    imports, constants, defined, import_lines = _module_facts(root, src)
    local_imports = _local_imports(func, first, src)
    for line in local_imports:
        imports |= _import_names(line)
    region.imports = import_lines + local_imports
    init_needs, init_params, init_locals = _init_facts(cls, src) if cls is not None else ({}, [], {})
    region.init_params = init_params
    # Data flow.
    assigned: set[str] = set()
    written_order: list[str] = []
    for s in selected:
        if s.type in _CONTROL:
            region.problems.append(f"the selection has Python control flow ({s.type.replace('_statement', '')} on line {s.start_point[0] + 1}); "
                                   "a kernel cannot branch on tensor values")
            continue
        if s.type == "return_statement":
            if s is not selected[-1]:
                region.problems.append("a return before the end of the selection")
            region.returns = True
            expr = s.named_children[0] if s.named_children else None
            region.return_expr = _text(src, expr) if expr is not None else ""
        reads, writes = _statement_io(s, src)
        for r in reads:
            if r not in assigned and r not in region.inputs:
                region.inputs.append(r)
        for w in writes:
            assigned.add(w)
            if w not in written_order:
                written_order.append(w)
    used_after: set[str] = set()
    for s in after:
        used_after.update(_reads(s, src))
        for n in _walk(s):
            if n.type == "identifier":
                used_after.add(_text(src, n))
    region.outputs = [w for w in written_order if w in used_after]
    # Names that are not variables: imports, builtins, module constants, self.
    free = []
    for name in region.inputs:
        if name == "self":
            continue
        if name in imports:
            continue
        if name in constants and name not in region.function_params:
            region.module_names[name] = constants[name]
            continue
        if name in defined:
            region.problems.append(f"calls {name}(), defined in this file: fuse inside it, or inline it")
            continue
        if hasattr(builtins, name) and name not in assigned:
            continue
        free.append(name)
    region.inputs = free
    # Ops and what the selection needs from the module.
    seen_self: list[str] = []
    for s in selected:
        for n in _walk(s):
            if n.type == "attribute":
                obj = n.child_by_field_name("object")
                if obj is not None and obj.type == "identifier" and _text(src, obj) == "self":
                    attr = _text(src, n.child_by_field_name("attribute"))
                    if attr not in seen_self:
                        seen_self.append(attr)
            if n.type == "call":
                fn = n.child_by_field_name("function")
                label = _text(src, fn)
                if fn.type == "attribute":
                    obj = fn.child_by_field_name("object")
                    attr = _text(src, fn.child_by_field_name("attribute"))
                    root_name = _text(src, obj).split(".")[0].split("(")[0]
                    if root_name in imports or _text(src, obj) == "self":
                        region.ops.append(label)
                    elif attr not in _VIEW_METHODS:
                        region.ops.append("." + attr)
                elif fn.type == "identifier":
                    if label in defined:
                        pass  # reported above
                    elif label in imports:
                        region.ops.append(label)
                    elif hasattr(builtins, label):
                        if label not in _TENSOR_BUILTINS:
                            region.problems.append(f"calls {label}(), which is not a tensor op")
                    else:
                        region.problems.append(f"calls {label}(), which Stitch does not know")
            elif n.type in ("binary_operator", "augmented_assignment"):
                op = n.child_by_field_name("operator")
                sym = _text(src, op).rstrip("=") if op is not None else ""
                if sym in _ARITH:
                    region.ops.append(sym)
            elif n.type == "unary_operator" and _text(src, n).startswith("-") and n.named_children and n.named_children[0].type not in ("integer", "float"):
                region.ops.append("neg")
    for name in seen_self:
        need = init_needs.get(name)
        region.self_needs.append(need if need is not None else SelfNeed(name, "unknown"))
        if need is None:
            region.problems.append(f"self.{name} is not set in __init__; Stitch cannot re-create it")
    # What re-creating the used attributes needs: __init__'s locals and module constants, transitively.
    wanted = set(region.module_names)
    pending = [need.init_source for need in region.self_needs] + list(region.module_names.values())
    param_names = {p for p, _ in init_params}
    while pending:
        for word in set(_WORD.findall(pending.pop())):
            if word in init_locals and word not in region.init_locals and word not in param_names:
                region.init_locals[word] = init_locals[word]
                pending.append(init_locals[word])
            elif word in constants and word not in wanted and word not in param_names:
                wanted.add(word)
                pending.append(constants[word])
    # In file order: a constant may be defined from an earlier one.
    region.module_names = {k: v for k, v in constants.items() if k in wanted}
    region.init_locals = {k: v for k, v in init_locals.items() if k in region.init_locals}
    if not region.ops and not region.problems:
        region.problems.append("the selection has no tensor ops")
    if not region.returns and not region.outputs and not region.problems:
        region.problems.append("nothing the selection computes is used after it")
    return region


def shape_comment_line(region: Region) -> int:
    """The 0-based line where a ``# stitch:`` shape comment for this region sits (just above it)."""
    return region.range.start.line
