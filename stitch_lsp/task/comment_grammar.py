"""The ``# stitch:`` comment: what each entry means, read with ``ast`` (never run).

    # stitch: B=8, T=256, eps=1e-5, flash=False, x=[B,T,C] float32, config.n_embd=768
    # stitch: config=GPTConfig(n_embd=768, n_head=12, bias=True)

- ``name=[d0,d1,...] dtype`` (or ``(d0,...)``): a tensor; a dimension is a number, or a name / expression
  of names the comment defines (``[B,T,4*C]``, ``[B,config.n_embd]``); the dtype defaults to float32;
- ``name=number`` / ``True`` / ``False`` / ``None`` / ``'text'``: a scalar (an input such as ``T``, or an
  ``__init__`` argument); ``name=OTHER`` or an integer expression of earlier names (``C=4*D``) too;
- ``obj.field=value``: a field of a config object (``config.n_embd=768``);
- ``obj=Class(field=value, ...)``: a config object built from the file's own class: a dataclass's (or
  class body's) fields with their defaults, the keywords over them; a field the class does not have is
  reported. A class the file does not define gives the keywords alone.

Nothing raises: each entry that cannot be read is a one-line problem naming it.
"""

from __future__ import annotations

import ast
import re

from attrs import define, field

from stitch_lsp.task.shape_values import DTYPES

_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)?$")


@define
class Comment:
    tensors: dict[str, tuple[tuple[int, ...], str]] = field(factory=dict)  # name -> (shape, dtype)
    values: dict[str, str] = field(factory=dict)  # name (or obj.field) -> Python literal / expression
    problems: list[str] = field(factory=list)


def split_entries(text: str) -> list[str]:
    """Top-level comma-separated entries (commas inside brackets and quotes stay)."""
    out, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return [e.strip() for e in out if e.strip()]


def _class_fields(source: str, name: str) -> dict[str, str] | None:
    """The fields of the file's own class ``name`` with their defaults as source text (None: no such class)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            fields: dict[str, str] = {}
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    fields[stmt.target.id] = ast.unparse(stmt.value) if stmt.value is not None else ""
                elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                    fields[stmt.targets[0].id] = ast.unparse(stmt.value)
            return fields
    return None


class _Env:
    """Integers the comment defined so far, by name (``B``, ``config.n_embd``)."""

    def __init__(self) -> None:
        self.ints: dict[str, int] = {}

    def int_of(self, node: ast.AST) -> int | None:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name):
            return self.ints.get(node.id)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            return self.ints.get(f"{node.value.id}.{node.attr}")
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            v = self.int_of(node.operand)
            return -v if v is not None else None
        if isinstance(node, ast.BinOp):
            a, b = self.int_of(node.left), self.int_of(node.right)
            if a is None or b is None:
                return None
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            if isinstance(node.op, ast.FloorDiv) and b:
                return a // b
        return None


def _literal(node: ast.AST) -> str | None:
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return repr(value) if isinstance(value, (bool, int, float, str, type(None))) else None


def parse(text: str, source: str = "") -> Comment:
    """Read the entries of one comment's text (after ``# stitch:``); ``source``: the file, for its classes."""
    out = Comment()
    env = _Env()
    objects: dict[str, dict[str, str]] = {}
    entries = split_entries(text)
    # Sizes and objects first, then tensors: a shape may use a size defined after it.
    entries = [e for e in entries if not _is_tensor(e)] + [e for e in entries if _is_tensor(e)]
    for entry in entries:
        try:
            _entry(entry, source, env, out, objects)
        except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError) as exc:  # never a traceback
            out.problems.append(f"`# stitch:` cannot read `{entry}`: {exc}")
    for name, fields in objects.items():
        out.values[name] = "types.SimpleNamespace(" + ", ".join(f"{k}={v}" for k, v in fields.items()) + ")"
    return out


def _is_tensor(entry: str) -> bool:
    return "=" in entry and entry.split("=", 1)[1].strip()[:1] in ("[", "(")


def _entry(entry: str, source: str, env: _Env, out: Comment, objects: dict[str, dict[str, str]]) -> None:
    if "=" not in entry:
        out.problems.append(f"`# stitch:` `{entry}` is not `name=value`: write it like x=[8,1024] float32 or T=256")
        return
    name, rhs = (p.strip() for p in entry.split("=", 1))
    if not _NAME.match(name):
        out.problems.append(f"`# stitch:` `{name}` is not a name (in `{entry}`)")
        return
    if not rhs:
        out.problems.append(f"`# stitch:` `{entry}` has no value")
        return
    if rhs[0] in "[(":
        _tensor(name, rhs, entry, env, out)
        return
    try:
        node = ast.parse(rhs, mode="eval").body
    except SyntaxError:
        out.problems.append(f"`# stitch:` `{rhs}` in `{entry}` is not a value: write a number, True/False, "
                            "a shape like [B,1024] float32, or Class(field=value)")
        return
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and "." not in name:
        _object(name, node, entry, source, out, objects)
        return
    literal = _literal(node)
    size = env.int_of(node) if literal is None else None
    if literal is None and size is None:
        words = [w for w in re.findall(r"[A-Za-z_][\w.]*", rhs) if w not in env.ints]
        out.problems.append(f"`# stitch:` `{rhs}` in `{entry}` is not a value"
                            + (f" ({words[0]} is not defined earlier in the comment)" if words else ""))
        return
    value = literal if literal is not None else str(size)
    if literal is not None and type(ast.literal_eval(node)) is int:
        env.ints[name] = ast.literal_eval(node)
    elif size is not None:
        env.ints[name] = size
    out.values[name] = value
    if "." in name:
        obj, fld = name.split(".", 1)
        objects.setdefault(obj, {})[fld] = value


def _tensor(name: str, rhs: str, entry: str, env: _Env, out: Comment) -> None:
    close = "]" if rhs[0] == "[" else ")"
    end = rhs.find(close)
    if end < 0:
        out.problems.append(f"`# stitch:` `{entry}`: the shape has no closing `{close}`")
        return
    dims_text, rest = rhs[1:end], rhs[end + 1:].strip()
    dtype = DTYPES.get(rest.lower().removeprefix("torch."), None) if rest else "float32"
    if dtype is None:
        out.problems.append(f"`# stitch:` unknown dtype `{rest}` in `{entry}` (float32, bf16, fp16, int64, bool ...)")
        return
    sizes: list[int] = []
    for token in (t.strip() for t in split_entries(dims_text)):
        parts = re.split(r"[x×]", token) if re.fullmatch(r"\d+([x×]\d+)+", token) else [token]
        for part in parts:
            try:
                size = env.int_of(ast.parse(part, mode="eval").body)
            except SyntaxError:
                size = None
            if size is None or size <= 0:
                undefined = [w for w in re.findall(r"[A-Za-z_][\w.]*", part) if w not in env.ints]
                out.problems.append(f"`# stitch:` {name}={rhs[:end + 1]}: {part!r} is not a size"
                                    + (f" (add {undefined[0]}=<size> to the comment)" if undefined else ""))
                return
            sizes.append(size)
    out.tensors[name] = (tuple(sizes), dtype)


def _object(name: str, call: ast.Call, entry: str, source: str, out: Comment,
            objects: dict[str, dict[str, str]]) -> None:
    cls = call.func.id
    fields = _class_fields(source, cls) if source else None
    values: dict[str, str] = {}
    if fields is not None:
        for fld, default in fields.items():
            try:
                lit = _literal(ast.parse(default, mode="eval").body) if default else None
            except SyntaxError:
                lit = None
            if lit is not None:
                values[fld] = lit
    if call.args:
        out.problems.append(f"`# stitch:` `{entry}`: give {cls}'s fields by name ({cls}(n_embd=768, ...))")
        return
    for kw in call.keywords:
        if kw.arg is None:
            out.problems.append(f"`# stitch:` `{entry}`: `**` is not read; name each field")
            return
        if fields is not None and kw.arg not in fields:
            out.problems.append(f"`# stitch:` {cls} in this file has no field `{kw.arg}` (in `{entry}`)")
            return
        lit = _literal(kw.value)
        if lit is None:
            out.problems.append(f"`# stitch:` `{kw.arg}={ast.unparse(kw.value)}` in `{entry}` is not a number, "
                                "True/False, None or text")
            return
        values[kw.arg] = lit
    objects.setdefault(name, {}).update(values)
    for fld, lit in values.items():
        out.values.setdefault(f"{name}.{fld}", lit)
