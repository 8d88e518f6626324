"""One configuration of a CUDA file, as the rules see it.

tree-sitter parses every branch of an ``#if`` / ``#else`` at once: both declarations of
a name (a ``__shared__`` array in one branch, a local array in the other) land in one
function, and a directive inside a parameter list or an expression does not parse at
all. The compiler only ever sees one branch, so the analysis does the same: it parses a
*view* of the file in which, for each conditional group, one branch is kept and the
directive lines and the other branches are blanked (every byte but the newlines
replaced by a space).

The view has exactly the bytes, lines and columns of the file, so every position the
analysis reports is a position in the file. Whole lines are blanked, never part of one.

Which branch: the one the condition selects where it can be decided from the file's
own ``#define``s (``#if 0``, ``#if USE_SHARED`` after ``#define USE_SHARED 1``,
``#ifdef X`` after ``#define X``; a macro only AMD's HIP/ROCm builds define, such as
``USE_ROCM`` or ``BNB_HIP``, is not defined), else the first one (``#ifdef DEBUG`` keeps the
debug code; ``#ifdef __CUDA_ARCH__`` the device code).

A few CUDA macros tree-sitter cannot parse are blanked in place too (``__align__(8)``
before a declaration's name, ``CUDART_CB`` before a callback's name), as are ``#pragma``
lines; attribute macros become the keywords they stand for and file-scope instantiation
macros are blanked (``cuda_macros``).
"""

from __future__ import annotations

import ast
import re

from attrs import frozen

from stitch_lsp.analysis.cuda_macros import file_scope_invocations, rewrite_attributes

# Unanchored (a `^` with re.M is ten times slower on a large file); `_at_line_start` checks.
_DIRECTIVE = re.compile(rb"#[ \t]*(if|ifdef|ifndef|elif|elifdef|elifndef|else|endif|define|undef)\b([^\n]*)")
_CONDITIONAL = re.compile(rb"#[ \t]*(?:if|el|endif)")
_PRAGMA = re.compile(rb"#[ \t]*pragma\b")
_INLINE_MACROS = re.compile(rb"\b__align__[ \t]*\([^()\n]*\)|\bCUDART_CB\b")
_BLANK_TABLE = bytes(b if b == 10 else 32 for b in range(256))
_IDENT = re.compile(r"[A-Za-z_]\w*")
# Defined whenever device code is compiled with nvcc; their values are unknown.
_ALWAYS_DEFINED = frozenset({"__CUDACC__", "__NVCC__", "__CUDA_ARCH__", "__cplusplus"})
_UNKNOWN = object()
# Macros only an AMD (HIP / ROCm) build defines: nvcc never does, so the CUDA branch is the one
# the rules must read (`#if BNB_HIP`, `#ifdef USE_ROCM`, `#if defined(__HIP_PLATFORM_AMD__)`).
_AMD_ONLY = re.compile(r"(?:^|_)(?:HIP|ROCM|HIPCC|AMD|HCC)(?:_|$)", re.I)


def _amd_only(name: str, macros: dict) -> bool:
    return name not in macros and _AMD_ONLY.search(name) is not None


@frozen
class PreprocessedView:
    text: bytes
    # Byte ranges [start, end) of code kept inside a conditional branch (``#ifdef DEBUG``).
    conditional: tuple[tuple[int, int], ...] = ()


def _at_line_start(src: bytes, pos: int) -> bool:
    """Only blanks between the start of the line and ``pos`` (a directive, not a `#` in code)."""
    start = src.rfind(b"\n", 0, pos) + 1
    return not src[start:pos].strip(b" \t")


def _has_conditionals(src: bytes) -> bool:
    return any(_at_line_start(src, m.start()) for m in _CONDITIONAL.finditer(src))


def _line_end(src: bytes, pos: int) -> int:
    """The end of the logical line at ``pos`` (a directive continues past ``\\`` newlines)."""
    while True:
        end = src.find(b"\n", pos)
        if end < 0:
            return len(src)
        if src[end - 1:end] == b"\\" or src[end - 2:end] == b"\\\r":
            pos = end + 1
            continue
        return end


def _strip_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/|//.*$", " ", text, flags=re.S).strip()


def _evaluate(expr: str, macros: dict[str, str | None]):
    """The value of an ``#if`` condition, or _UNKNOWN where it names a macro this file does not define."""
    expr = _strip_comments(expr)

    def defined(m: re.Match) -> str:
        name = m.group(1)
        if name in macros or name in _ALWAYS_DEFINED:
            return " 1 "
        if _amd_only(name, macros):
            return " 0 "
        raise LookupError(name)

    try:
        expr = re.sub(r"\bdefined\s*\(?\s*([A-Za-z_]\w*)\s*\)?", defined, expr)
    except LookupError:
        return _UNKNOWN
    for _ in range(8):  # macros defined in terms of macros
        names = set(_IDENT.findall(expr)) - {"and", "or", "not"}
        amd = {n for n in names if _amd_only(n, macros)}
        if amd:
            expr = _IDENT.sub(lambda m: " 0 " if m.group(0) in amd else m.group(0), expr)
            names -= amd
        if not names:
            break
        if any(n not in macros or macros[n] is None for n in names):
            return _UNKNOWN
        expr = _IDENT.sub(lambda m: f"({macros[m.group(0)]})", expr)
    else:
        return _UNKNOWN
    expr = re.sub(r"(?<=\d)[uUlL]+\b", "", expr)
    expr = expr.replace("&&", " and ").replace("||", " or ")
    expr = re.sub(r"!(?!=)", " not ", expr)
    try:
        return _eval_node(ast.parse(expr.strip(), mode="eval").body)
    except (SyntaxError, ValueError, TypeError, ZeroDivisionError, RecursionError, MemoryError):
        return _UNKNOWN


_CMP = {ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
        ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b}
_ARITH = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
          ast.FloorDiv: lambda a, b: a // b, ast.Div: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
          ast.LShift: lambda a, b: a << b, ast.RShift: lambda a, b: a >> b,
          ast.BitAnd: lambda a, b: a & b, ast.BitOr: lambda a, b: a | b}


def _eval_node(n) -> int:
    if isinstance(n, ast.Constant) and isinstance(n.value, int):
        return int(n.value)
    if isinstance(n, ast.BoolOp):
        values = [_eval_node(v) for v in n.values]
        return int(all(values)) if isinstance(n.op, ast.And) else int(any(values))
    if isinstance(n, ast.UnaryOp):
        v = _eval_node(n.operand)
        if isinstance(n.op, ast.Not):
            return int(not v)
        if isinstance(n.op, ast.USub):
            return -v
        if isinstance(n.op, ast.UAdd):
            return v
    if isinstance(n, ast.Compare) and len(n.ops) == 1 and type(n.ops[0]) in _CMP:
        return int(_CMP[type(n.ops[0])](_eval_node(n.left), _eval_node(n.comparators[0])))
    if isinstance(n, ast.BinOp) and type(n.op) in _ARITH:
        return _ARITH[type(n.op)](_eval_node(n.left), _eval_node(n.right))
    raise ValueError("not a preprocessor constant expression")


def preprocess(src: bytes) -> PreprocessedView:
    """The view of ``src`` the analysis parses (see the module docstring)."""
    has_conditionals = _has_conditionals(src)
    has_macros = b"__align__" in src or b"CUDART_CB" in src
    blank: list[tuple[int, int]] = []
    conditional: list[tuple[int, int]] = []
    if has_conditionals:
        _choose_branches(src, blank, conditional)
    if b"pragma" in src:
        _pragmas(src, blank)
    blank.extend(file_scope_invocations(src))
    out = bytearray(src)
    rewritten = rewrite_attributes(src, out)
    if not blank and not has_macros and not rewritten:
        return PreprocessedView(src, tuple(conditional))
    for a, b in blank:
        out[a:b] = src[a:b].translate(_BLANK_TABLE)
    if has_macros:
        for m in _INLINE_MACROS.finditer(src):
            out[m.start():m.end()] = b" " * (m.end() - m.start())
    return PreprocessedView(bytes(out), tuple(conditional))


def _pragmas(src: bytes, blank: list[tuple[int, int]]) -> None:
    """`#pragma` lines (`#pragma unroll` between a `for (...)` and its body is not C++ tree-sitter
    can read; no rule needs a pragma)."""
    for m in _PRAGMA.finditer(src):
        if _at_line_start(src, m.start()):
            blank.append((src.rfind(b"\n", 0, m.start()) + 1, _line_end(src, m.start())))


def _choose_branches(src: bytes, blank: list[tuple[int, int]], conditional: list[tuple[int, int]]) -> None:
    macros: dict[str, str | None] = {}
    # One frame per open #if: [enclosing code active, a branch already taken, this branch kept, kept from]
    stack: list[list] = []
    active = True
    pos = 0
    while True:
        m = _DIRECTIVE.search(src, pos)
        if m is None:
            break
        if not _at_line_start(src, m.start()):
            pos = m.end()
            continue
        start = src.rfind(b"\n", 0, m.start()) + 1
        end = _line_end(src, m.start())
        pos = end
        kind = m.group(1).decode()
        rest = src[m.start(2):end].decode("utf-8", "replace").replace("\\\n", " ")
        if kind in ("define", "undef"):
            if active:
                parts = rest.split(None, 1)
                if parts:
                    name = re.match(r"[A-Za-z_]\w*", parts[0])
                    if name is not None:
                        if kind == "undef":
                            macros.pop(name.group(0), None)
                        elif "(" in parts[0][name.end():name.end() + 1]:
                            macros[name.group(0)] = None  # a function-like macro: defined, no value
                        else:
                            value = _strip_comments(parts[1]) if len(parts) > 1 else ""
                            macros[name.group(0)] = value or "1"
            continue
        if kind in ("if", "ifdef", "ifndef"):
            if kind == "if":
                value = _evaluate(rest, macros)
            else:
                name = _strip_comments(rest).split()[0] if _strip_comments(rest) else ""
                known = name in macros or name in _ALWAYS_DEFINED or _amd_only(name, macros)
                value = int(name in macros or name in _ALWAYS_DEFINED) if known else _UNKNOWN
                if kind == "ifndef" and value is not _UNKNOWN:
                    value = int(not value)
            keep = active and (value is _UNKNOWN or bool(value))
            stack.append([active, keep, keep, end])
            active = keep
        elif kind in ("elif", "elifdef", "elifndef", "else") and stack:
            frame = stack[-1]
            outer, taken, kept, since = frame
            if kept:
                conditional.append((since, start))
            if not kept and outer:
                blank.append((since, start))
            if kind == "else":
                keep = outer and not taken
            elif kind == "elif":
                value = _evaluate(rest, macros)
                keep = outer and not taken and (value is _UNKNOWN or bool(value))
            else:  # elifdef / elifndef: "not defined" is never known (a -D or a header may define it)
                name = _strip_comments(rest).split()[0] if _strip_comments(rest) else ""
                known = name in macros or name in _ALWAYS_DEFINED
                keep = outer and not taken and not (kind == "elifndef" and known)
            frame[1] = taken or keep
            frame[2] = keep
            frame[3] = end
            active = keep
        elif kind == "endif" and stack:
            outer, taken, kept, since = stack.pop()
            if kept:
                conditional.append((since, start))
            elif outer:
                blank.append((since, start))
            active = outer
        else:
            continue  # a stray #else / #endif: leave the line to the parser
        blank.append((start, end))
    # An #if never closed (a half-typed file): whatever follows an untaken branch stays blank.
    while stack:
        outer, taken, kept, since = stack.pop()
        if not kept and outer:
            blank.append((since, len(src)))
    blank.sort()
