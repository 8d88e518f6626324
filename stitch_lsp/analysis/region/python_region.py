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
from typing import Any

import tree_sitter as ts
import tree_sitter_python as tsp
from attrs import define, field

from stitch_lsp.analysis.region.module_needs import (class_methods, identifiers, init_statements,
                                                     needed_statements, self_attributes, statement_text,
                                                     top_level_definitions)
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
    # Every ``__init__`` statement the used attributes need (locals, ModuleDicts, lambdas, buffers in
    # branches): 0-based line -> dedented text, in file order.
    init_statements: dict[int, str] = field(factory=dict)
    methods: dict[str, str] = field(factory=dict)  # the class's methods the selection calls: name -> source
    helpers: dict[str, str] = field(factory=dict)  # the file's functions / classes it needs: name -> source
    nesting: list[str] = field(factory=list)  # "else: of the if on line 62" when inside a branch or loop
    # The function's simple statements that run before the selection (``B, T, C = x.size()``), dedented:
    # what the shape template reads to know which inputs are ints and how dimensions tie together.
    prelude: list[str] = field(factory=list)
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


# -- Locating the selection ------------------------------------------------------------------------------
# Compound statements whose bodies a selection may sit in; the header (condition, loop) stays in Python.
_BODIES = {"if_statement": "if", "for_statement": "for", "while_statement": "while", "with_statement": "with",
           "try_statement": "try"}
_CLAUSES = {"else_clause": "else", "elif_clause": "elif", "except_clause": "except", "finally_clause": "finally"}
# Attributes every nn.Module has: the Task's Model has them too.
_MODULE_ATTRS = {"training"}


@define
class _Selection:
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
    for n in _walk(root):
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


def _descend(sel: _Selection) -> None:
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


def _locate(source: str, start: int, end: int) -> _Selection:
    src = source.encode("utf-8")
    root = _parser().parse(src).root_node
    sel = _Selection(src=src, root=root, lines=source.splitlines(), start=start, end=end)
    sel.func = _innermost_function(root, start, end)
    if sel.func is None:
        return sel
    cls = sel.func.parent.parent if sel.func.parent is not None and sel.func.parent.type == "block" else None
    sel.cls = cls if cls is not None and cls.type == "class_definition" else None
    _descend(sel)
    return sel


# -- Refusals: each a name and a check; the first group stops (nothing further can be known) -------------
@define(frozen=True)
class Refusal:
    name: str
    check: Any  # (_Selection, Region) -> str | None: the one sentence the user sees, with what to do
    stops: bool = False


def _syntax(sel: _Selection, region: Region) -> str | None:
    return "the file has syntax errors" if sel.root.has_error else None


def _outside_function(sel: _Selection, region: Region) -> str | None:
    return "select statements inside a function or a forward method" if sel.func is None else None


def _in_init(sel: _Selection, region: Region) -> str | None:
    if sel.cls is not None and region.function == "__init__":
        return "the selection is in __init__, which builds the module: select code from forward"
    return None


def _splits(sel: _Selection, region: Region) -> str | None:
    if sel.split is None:
        return None
    s0, s1 = sel.split.start_point[0], sel.split.end_point[0]
    return f"the selection splits a statement (lines {s0 + 1}-{s1 + 1}); select whole statements"


def _empty(sel: _Selection, region: Region) -> str | None:
    return "select whole statements of the function body" if not sel.statements else None


def _control_flow(sel: _Selection, region: Region) -> str | None:
    s = next((s for s in sel.statements if s.type in _CONTROL), None)
    if s is None:
        return None
    kind = s.type.replace("_statement", "")
    return (f"the selection has Python control flow ({kind} on line {s.start_point[0] + 1}); a kernel cannot branch "
            f"on tensor values: select the statements inside the {kind} (its condition stays in Python)")


def _early_return(sel: _Selection, region: Region) -> str | None:
    rets = [s for s in sel.statements if s.type == "return_statement"]
    return "a return before the end of the selection" if rets and rets[-1] is not sel.statements[-1] or len(rets) > 1 else None


def _unknown_call(sel: _Selection, region: Region) -> str | None:
    return "; ".join(f"calls {name}(), which Stitch does not know" for name in sel.unknown_calls) or None


def _non_tensor_call(sel: _Selection, region: Region) -> str | None:
    return "; ".join(f"calls {name}(), which is not a tensor op" for name in sel.non_tensor_calls) or None


def _unknown_self(sel: _Selection, region: Region) -> str | None:
    return "; ".join(f"self.{name} is not set in __init__; Stitch cannot re-create it"
                     for name in sel.unknown_self) or None


def _no_ops(sel: _Selection, region: Region) -> str | None:
    return "the selection has no tensor ops" if not region.ops and not region.problems else None


def _unused(sel: _Selection, region: Region) -> str | None:
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
_LOCATION = REFUSALS[:5]
_CONTENT = REFUSALS[5:]


def _refuse(checks: tuple[Refusal, ...], sel: _Selection, region: Region) -> bool:
    """Run ``checks`` in order; True when one that stops refused."""
    for refusal in checks:
        message = refusal.check(sel, region)
        if message:
            region.problems.append(message)
            if refusal.stops:
                return True
    return False


def extract_region(source: str, start_line: int, end_line: int, path: str = "") -> Region:
    """The Region of lines ``start_line``..``end_line`` (0-based, inclusive) of ``source``."""
    lines = source.splitlines()
    # Trim blank / comment-only lines at the edges of the selection.
    while start_line < end_line and start_line < len(lines) and (lines[start_line].strip().startswith("#") or not lines[start_line].strip()):
        start_line += 1
    while end_line > start_line and end_line < len(lines) and (not lines[end_line].strip() or lines[end_line].strip().startswith("#")):
        end_line -= 1
    region = Region(path=path, range=Range.of(start_line, 0, end_line, len(lines[end_line]) if end_line < len(lines) else 0))
    sel = _locate(source, start_line, end_line)
    if sel.func is not None:
        region.function = _text(sel.src, sel.func.child_by_field_name("name"))
        region.class_name = _text(sel.src, sel.cls.child_by_field_name("name")) if sel.cls is not None else None
    if _refuse(_LOCATION, sel, region):
        return region
    _describe(sel, region)
    _data_flow(sel, region)
    _ops(sel, region)
    _module_needs(sel, region)
    _refuse(_CONTENT, sel, region)
    return region


# -- What the selection is ------------------------------------------------------------------------------
def _describe(sel: _Selection, region: Region) -> None:
    src, first, last = sel.src, sel.statements[0], sel.statements[-1]
    params = []
    for p in sel.func.child_by_field_name("parameters").named_children:
        name_node = p if p.type == "identifier" else (p.child_by_field_name("name") or (p.named_children[0] if p.named_children else None))
        if name_node is not None:
            params.append(_text(src, name_node))
    region.function_params = [p for p in params if p != "self"]
    region.range = Range.of(first.start_point[0], first.start_point[1], last.end_point[0], last.end_point[1])
    region.indent = sel.lines[first.start_point[0]][: first.start_point[1]]
    region.body = textwrap.dedent("\n".join(sel.lines[first.start_point[0]:last.end_point[0] + 1]))
    region.nesting = list(sel.nesting)
    region.prelude = _prelude(sel)
    imports, constants, _defined, import_lines = _module_facts(sel.root, src)
    local_imports = _local_imports(sel.func, first.start_point[0], src)
    for line in local_imports:
        imports |= _import_names(line)
    sel.imports, sel.constants = imports, constants
    sel.definitions = top_level_definitions(sel.root, src, sel.lines)
    region.imports = import_lines + local_imports
    # Names bound in the function before the selection: locals, which shadow builtins (``input``).
    sel.locals_before = set(params)
    for n in _walk(sel.func.child_by_field_name("body")):
        if n.start_point[0] >= first.start_point[0]:
            continue
        if n.type in ("assignment", "augmented_assignment", "for_statement"):
            sel.locals_before |= set(_targets(n.child_by_field_name("left"), src))


def _prelude(sel: _Selection) -> list[str]:
    """Simple statements of the function (and of the blocks around the selection) above the selection."""
    out: list[tuple[int, str]] = []
    first = sel.statements[0].start_point[0]
    holders = [sel.func.child_by_field_name("body")]
    for n in _walk(sel.func.child_by_field_name("body")):
        if n.type == "block" and n.start_point[0] <= first <= n.end_point[0] and n not in holders:
            holders.append(n)
    for block in holders:
        for s in block.named_children:
            if s.end_point[0] < first and s.type == "expression_statement":
                out.append((s.start_point[0], statement_text(sel.lines, sel.src, s)))
    return [text for _, text in sorted(out)]


def _data_flow(sel: _Selection, region: Region) -> None:
    src = sel.src
    assigned: set[str] = set()
    written: list[str] = []
    inputs: list[str] = []
    for s in sel.statements:
        if s.type == "return_statement":
            region.returns = True
            expr = s.named_children[0] if s.named_children else None
            region.return_expr = _text(src, expr) if expr is not None else ""
        if s.type in _CONTROL:
            continue
        reads, writes = _statement_io(s, src)
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
    for n in _walk(sel.func.child_by_field_name("body")):
        if n.type == "identifier" and n.start_point[0] > end:
            used_after.add(_text(src, n))
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


def _ops(sel: _Selection, region: Region) -> None:
    src = sel.src
    for s in sel.statements:
        for n in _walk(s):
            if n.type == "call":
                fn = n.child_by_field_name("function")
                label = _text(src, fn)
                if fn.type == "attribute":
                    obj = fn.child_by_field_name("object")
                    attr = _text(src, fn.child_by_field_name("attribute"))
                    root_name = _text(src, obj).split(".")[0].split("(")[0]
                    if root_name in sel.imports or _text(src, obj) == "self" or root_name in sel.definitions:
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
                sym = _text(src, op).rstrip("=") if op is not None else ""
                if sym in _ARITH:
                    region.ops.append(sym)
            elif n.type == "unary_operator" and _text(src, n).startswith("-") and n.named_children and n.named_children[0].type not in ("integer", "float"):
                region.ops.append("neg")


def _module_needs(sel: _Selection, region: Region) -> None:
    """Attributes, methods, ``__init__`` statements, the file's definitions and constants the Task re-creates."""
    src = sel.src
    used = [a for s in sel.statements for a in self_attributes(s, src)]
    used = [a for i, a in enumerate(used) if a not in used[:i] and a not in _MODULE_ATTRS]
    init_needs, init_params, init_locals = _init_facts(sel.cls, src) if sel.cls is not None else ({}, [], {})
    region.init_params = init_params
    methods = class_methods(sel.cls, src, sel.lines) if sel.cls is not None else {}
    # Methods of the class the selection calls (``self._norm(x)``), and what they use in turn.
    attrs: list[str] = []
    pending = list(used)
    while pending:
        name = pending.pop(0)
        if name in attrs or name in region.methods or name in _MODULE_ATTRS:
            continue
        if name in methods and name not in init_needs and name != region.function:
            node = methods[name]
            region.methods[name] = statement_text(sel.lines, src, node)
            pending += self_attributes(node, src)
        else:
            attrs.append(name)
    init = next((m for n, m in methods.items() if n == "__init__"), None)
    init_fn = (init.child_by_field_name("definition") if init is not None and init.type == "decorated_definition" else init)
    stmts = init_statements(init_fn, sel.lines, src) if init_fn is not None else []
    chosen, unbuilt = needed_statements(stmts, set(attrs))
    for name in attrs:
        need = init_needs.get(name)
        region.self_needs.append(need if need is not None else SelfNeed(name, "unknown"))
    sel.unknown_self = [a for a in attrs if a in unbuilt and a not in methods]
    sel.unknown_self += [a for a in unbuilt - set(attrs) if a not in methods and a not in _MODULE_ATTRS
                         and a not in sel.unknown_self]
    region.init_statements = {s.line: s.text for s in chosen}
    # Names the re-created code reads: the file's constants, functions and classes, transitively.
    param_names = {p for p, _ in init_params}
    local_names = set().union(*(s.binds_local for s in chosen)) if chosen else set()
    words: set[str] = set()
    for s in sel.statements:
        words |= identifiers(s, src)
    for s in chosen:
        words |= s.names - local_names - param_names
    for text in region.methods.values():
        words |= _identifiers_of(text)
    wanted_consts: set[str] = set(region.module_names)
    wanted_defs: set[str] = set()
    pending_words = list(words)
    while pending_words:
        word = pending_words.pop()
        if word in sel.definitions and word not in wanted_defs and word != region.class_name:
            wanted_defs.add(word)
            pending_words += list(_identifiers_of(sel.definitions[word][1]))
        elif word in sel.constants and word not in wanted_consts and word not in param_names:
            wanted_consts.add(word)
            pending_words += list(_identifiers_of(sel.constants[word]))
    region.helpers = {name: text for name, (line, text) in sorted(sel.definitions.items(), key=lambda kv: kv[1][0])
                      if name in wanted_defs}
    # In file order: a constant may be defined from an earlier one.
    region.module_names = {k: v for k, v in sel.constants.items() if k in wanted_consts}
    region.init_locals = {k: v for k, v in init_locals.items()
                          if any(k in s.binds_local for s in chosen) and k not in param_names}


def _identifiers_of(text: str) -> set[str]:
    src = text.encode("utf-8")
    return identifiers(_parser().parse(src).root_node, src)


def shape_comment_line(region: Region) -> int:
    """The 0-based line where a ``# stitch:`` shape comment for this region sits (just above it)."""
    return region.range.start.line
