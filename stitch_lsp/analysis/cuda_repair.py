"""Analysing a function whose text tree-sitter cannot read in full: each construct the
grammar does not know costs the statement it is in, not the function.

tree-sitter-cuda does not know every construct real CUDA C++ uses (a functional cast of
a dependent type, ``typename K::BlockLoadT(smem).Load(...)``; a macro whose argument is a
block; an attribute it has never seen). Its error-recovered tree marks such places with
ERROR and MISSING nodes. For a function that has them, ``repair_function`` finds the
innermost statement around each one and replaces that statement's bytes, in a copy of
the text, with a call of ``UNKNOWN_CALL`` (blank-padded, so every byte, line and column
stays where it was), then parses the function again. Rules read the repaired tree; an
unknown statement is treated as "may do anything" where that matters (it may be a
barrier, it may write through any pointer it names: see ``FunctionFacts.unknown``).

Two shapes are not blanked but modelled:

* a macro called as a statement with a block or statement argument,
  ``DISPATCH(t, T, { body; });`` or ``DISPATCH(t, "name", kernel<<<g, b>>>(x);)``: the macro
  name and its other arguments are blanked and the code argument stays, so it is analysed;
* a call statement without its ``;`` (``C10_CUDA_KERNEL_LAUNCH_CHECK()`` at the end of a
  line: the macro supplies it): the tree is already right, nothing is lost.

A function whose error cannot be placed in a statement (an unclosed brace while typing:
the body has no end) is not repaired; it is skipped as before.
"""

from __future__ import annotations

import re

from attrs import frozen
from tree_sitter import Node, Parser, Point, Range as TSRange, Tree

from stitch_lsp.analysis.cuda_grammar import cuda_language
from stitch_lsp.findings import Finding, Range, Severity

# The placeholder an unknown statement becomes (a call no code defines).
UNKNOWN_CALL = "__stitch_unknown"
_PLACEHOLDER = f"{UNKNOWN_CALL}();".encode()
MAX_ROUNDS = 6
# A statement larger than this is not blanked: the error is more likely a half-typed line
# that made the parser swallow what follows, and guessing would cost more than skipping.
MAX_STATEMENT_LINES = 40

_STATEMENTS = frozenset({
    "expression_statement", "declaration", "return_statement", "if_statement", "for_statement",
    "for_range_loop", "while_statement", "do_statement", "switch_statement", "break_statement",
    "continue_statement", "goto_statement", "labeled_statement", "case_statement", "type_definition",
    "alias_declaration", "static_assert_declaration", "using_declaration", "throw_statement",
    "try_statement", "co_return_statement", "preproc_call",
})
_BLOCKS = frozenset({"compound_statement", "case_statement"})
_MACRO_CALL = re.compile(rb"\s*([A-Za-z_][\w:]*)\s*\(")


@frozen
class Skipped:
    """A statement the analysis could not read, in bytes of the file."""

    start: int
    end: int
    text: str  # as written (squashed to one line, shortened)
    names: frozenset[str]  # the identifiers it names: what it may write, call or wait on


@frozen
class Repaired:
    src: bytes
    tree: Tree | None  # the repaired parse (None: only macro-supplied `;` were missing)
    fn: Node
    unit: Node
    skipped: tuple[Skipped, ...]
    # Macro calls whose code argument was kept (`DISPATCH(..., { ... })`): their names.
    modelled: tuple[str, ...] = ()


def _error_nodes(node: Node, out: list[Node], limit: int = 64) -> None:
    stack = [node]
    while stack and len(out) < limit:
        n = stack.pop()
        if n.is_error or n.is_missing:
            out.append(n)
            continue
        stack.extend(c for c in n.children if c.has_error or c.is_missing)


def _benign(n: Node) -> bool:
    """A MISSING `;` after a call statement: a macro that supplies its own (the tree is right)."""
    if not (n.is_missing and n.type == ";"):
        return False
    p = n.parent
    if p is None or p.type != "expression_statement":
        return False
    kids = [c for c in p.named_children]
    return len(kids) == 1 and kids[0].type == "call_expression" and not kids[0].has_error


def _statement_of(n: Node, body: Node) -> Node | None:
    """The innermost statement around an error node, inside ``body``; None if there is none."""
    cur = n
    while cur is not None and cur.id != body.id:
        parent = cur.parent
        if cur.type in _STATEMENTS or (parent is not None and parent.type in _BLOCKS and not cur.is_missing):
            return cur
        cur = parent
    return None


def _squash(text: bytes, limit: int = 60) -> str:
    s = " ".join(text.decode("utf-8", "replace").split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


_IDENT = re.compile(rb"[A-Za-z_]\w*")


def src_of(buf: bytearray, node: Node) -> bytes:
    return bytes(buf[node.start_byte:node.end_byte])


def _blank(buf: bytearray, start: int, end: int) -> None:
    for i in range(start, end):
        if buf[i] != 10:
            buf[i] = 32


def _fill(buf: bytearray, start: int, end: int) -> None:
    """Replace [start, end) with the placeholder call, padded with blanks (newlines kept)."""
    _blank(buf, start, end)
    # The placeholder needs one run of bytes without a newline; otherwise an empty statement.
    span = bytes(buf[start:end])
    at, best = start, 0
    for chunk in span.split(b"\n"):
        if len(chunk) >= len(_PLACEHOLDER):
            best = len(chunk)
            break
        at += len(chunk) + 1
    if best:
        buf[at:at + len(_PLACEHOLDER)] = _PLACEHOLDER
    elif end > start:
        first = next((i for i in range(start, end) if buf[i] != 10), None)
        if first is not None:
            buf[first] = ord(";")


_STATEMENT_START = re.compile(rb"\s*(?:\{|[A-Za-z_][\w:]*\s*(?:<[^;{}()]*>\s*)?(?:<<<|\(|=|[+*/-]=|\+\+|--|[A-Za-z_&*]))")


def _kept_argument(src: bytes, stmt: Node) -> tuple[int, int] | None:
    """For a macro called as a statement whose last argument is code (`NAME(args..., { block })`,
    `DISPATCH(t, "name", kernel<<<g, b>>>(x);)`): that argument's byte span, else None."""
    text = src[stmt.start_byte:stmt.end_byte]
    m = _MACRO_CALL.match(text)
    if m is None:
        return None
    depth, i, n = 0, m.end(), len(text)
    commas: list[int] = []
    while i < n:
        if text.startswith(b"<<<", i):
            depth += 1
            i += 3
            continue
        if text.startswith(b">>>", i):
            depth -= 1
            i += 3
            continue
        c = text[i]
        if c in b"([{":
            depth += 1
        elif c in b")]}":
            if depth == 0:
                break
            depth -= 1
        elif c == ord(",") and depth == 0:
            commas.append(i)
        elif c == ord('"'):
            close = text.find(b'"', i + 1)
            i = close if close > 0 else n
        i += 1
    if i >= n or not commas:
        return None
    close = i  # the macro's `)`
    for comma in commas:
        if _STATEMENT_START.match(text, comma + 1) is None:
            continue
        arg = text[comma + 1:close].strip()
        if arg.startswith(b"{") and not arg.endswith(b"}"):
            continue
        if not arg.startswith(b"{") and b";" not in arg and b"<<<" not in arg:
            continue  # an expression argument, not code
        lead = len(text[comma + 1:close]) - len(text[comma + 1:close].lstrip())
        return stmt.start_byte + comma + 1 + lead, stmt.start_byte + close
    return None


def _parse_unit(src: bytes, unit: Node) -> tuple[Tree, Node | None]:
    rng = TSRange(Point(unit.start_point.row, unit.start_point.column), Point(unit.end_point.row, unit.end_point.column),
                  unit.start_byte, unit.end_byte)
    parser = Parser(cuda_language(), included_ranges=[rng])
    tree = parser.parse(src)
    found = None
    for c in tree.root_node.children:
        if c.start_byte == unit.start_byte and c.type == unit.type:
            found = c
            break
    return tree, found


def _inner_function(unit: Node) -> Node | None:
    if unit.type == "function_definition":
        return unit
    return next((c for c in unit.named_children if c.type == "function_definition"), None)


def repair_function(src: bytes, unit: Node, fn: Node) -> Repaired | None:
    """The function with its unreadable statements replaced (see the module docstring), or
    None where an error cannot be placed in a statement of its body."""
    buf = bytearray(src)
    skipped: list[Skipped] = []
    modelled: list[str] = []
    # The function parsed on its own: its error recovery (and so the result) depends on its
    # text only, as the per-function cache assumes, not on what the rest of the file was.
    tree, cur_unit = _parse_unit(src, unit)
    if cur_unit is None:
        return None
    cur_fn = _inner_function(cur_unit)
    if cur_fn is None:
        return None
    for _ in range(MAX_ROUNDS):
        body = cur_fn.child_by_field_name("body")
        if body is None:
            return None
        errors: list[Node] = []
        _error_nodes(cur_unit, errors)
        errors = [e for e in errors if not _benign(e)]
        if not errors:
            return Repaired(bytes(buf), tree, cur_fn, cur_unit, tuple(sorted(skipped, key=lambda s: s.start)),
                            tuple(modelled))
        spans: list[tuple[int, int, Node]] = []
        for e in errors:
            if not (body.start_byte < e.start_byte and e.end_byte <= body.end_byte) or (
                    e.is_missing and e.type == "}" and e.parent is not None and e.parent.id == body.id):
                return None  # in the signature, or the body never closes
            stmt = _statement_of(e, body)
            if stmt is None or stmt.end_point.row - stmt.start_point.row > MAX_STATEMENT_LINES:
                return None
            start = stmt.start_byte
            if stmt.type == "ERROR" and src_of(buf, stmt).lstrip().startswith(b"else"):
                # A stray `else`: blanking it alone would make its branch unconditional.
                prev = stmt.prev_named_sibling
                if prev is None or prev.type != "if_statement":
                    return None
                start = prev.start_byte
            spans.append((start, stmt.end_byte, stmt))
        spans.sort(key=lambda s: (s[0], -s[1]))
        merged: list[tuple[int, int, Node]] = []
        for s in spans:
            if merged and s[0] < merged[-1][1]:
                if s[1] > merged[-1][1]:
                    merged[-1] = (merged[-1][0], s[1], merged[-1][2])
                continue
            merged.append(s)
        snapshot = bytes(buf)
        for start, end, stmt in merged:
            block = _kept_argument(snapshot, stmt) if stmt.type in ("expression_statement", "ERROR") else None
            if block is not None and end - start > 0:
                name = _MACRO_CALL.match(snapshot[start:end]).group(1).decode()
                modelled.append(name)
                _blank(buf, start, block[0])
                _blank(buf, block[1], end)
                continue
            text = snapshot[start:end]
            skipped.append(Skipped(start, end, _squash(text),
                                   frozenset(m.decode() for m in _IDENT.findall(text))))
            _fill(buf, start, end)
        tree, cur_unit = _parse_unit(bytes(buf), cur_unit)
        if cur_unit is None:
            return None
        cur_fn = _inner_function(cur_unit)
        if cur_fn is None:
            return None
    return None


def function_name(src: bytes, fn: Node) -> str:
    d = fn.child_by_field_name("declarator")
    while d is not None and d.type not in ("identifier", "qualified_identifier", "field_identifier",
                                           "destructor_name", "operator_name", "template_function"):
        d = d.child_by_field_name("declarator")
    return src[d.start_byte:d.end_byte].decode("utf-8", "replace") if d is not None else "?"


def skipped_note(path: str, cols, s: Skipped, kind: str, owner: str) -> Finding:
    """The hint an unreadable statement gets: what was skipped, where, and that the code may be fine."""
    start, end = cols.at_byte(s.start), cols.at_byte(s.end)
    # No line number in the text (cached results move with the function): the range says where.
    lines = "one line" if start.line == end.line else f"{end.line - start.line + 1} lines"
    return Finding(
        path=path, range=Range(start, end), severity=Severity.HINT, code="parse",
        message=(f"Static rules skipped `{s.text}` ({lines}) in {kind} `{owner}`: tree-sitter's CUDA grammar "
                 f"cannot read this construct. The code may well be valid (nvcc reports any real error on save); "
                 f"the rest of `{owner}` was checked, taking this statement as one that may write what it names "
                 f"or wait at a barrier."),
        source="stitch")
