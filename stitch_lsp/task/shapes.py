"""Shapes and dtypes for a Region's inputs, from the sources DESIGN.md names, in its order.

1. ``get_inputs()`` in the file (read statically: ``torch.randn(8, 1024)`` and friends),
   with ``get_init_inputs()`` for ``__init__``'s arguments;
2. a ``# stitch: x=[8,1024] float32, w=[1024,1024] bf16, hidden=1024`` comment just above the selection;
3. a shape recorder run of the file (trusted workspaces; see ``recorded``);
4. ``settings.shapes`` (``{"x": "8x1024 float32"}``).

Never guesses: what no source gives is listed in ``missing``.
"""

from __future__ import annotations

import ast
import re

from attrs import define, field

from stitch_lsp.analysis.region.data import Region
from stitch_lsp.pipeline import TensorSpec
from stitch_lsp.task.shape_values import DTYPES, int_value

_COMMENT = re.compile(r"#\s*stitch:\s*(.*)$")
_ENTRY = re.compile(r"(\w+)\s*=\s*(\[[^\]]*\]|\(\s*[^)]*\)|[-+0-9.eE]+)\s*([A-Za-z0-9_]+)?")


@define
class ShapeResult:
    specs: dict[str, TensorSpec] = field(factory=dict)
    values: dict[str, str] = field(factory=dict)  # __init__ arguments / scalars: name -> Python literal
    scalars: dict[str, str] = field(factory=dict)  # selection inputs that are numbers (T, eps): name -> literal
    sources: dict[str, str] = field(factory=dict)  # name -> where it came from
    missing: list[str] = field(factory=list)
    problems: list[str] = field(factory=list)  # what a source got wrong (a `# stitch:` size it cannot read)

    @property
    def complete(self) -> bool:
        return not self.missing


def parse_dims(text: str) -> tuple[int, ...]:
    text = text.strip().strip("[]()").replace("x", ",").replace("×", ",")
    return tuple(int(p) for p in re.split(r"[,\s]+", text) if p)


def parse_spec(text: str) -> TensorSpec:
    """``"8x1024 float32"`` / ``"[8, 1024] bf16"`` -> TensorSpec."""
    m = re.match(r"\s*([\[(]?[0-9x×,\s]+[\])]?)\s*([A-Za-z0-9_]*)\s*$", text)
    if not m:
        raise ValueError(f"cannot read {text!r}: write it like '8x1024 float32'")
    dtype = DTYPES.get((m.group(2) or "float32").lower().removeprefix("torch."))
    if dtype is None:
        raise ValueError(f"unknown dtype {m.group(2)!r}")
    return TensorSpec(parse_dims(m.group(1)), dtype)


def comment_entries(lines: list[str], start_line: int) -> tuple[dict[str, TensorSpec], dict[str, str], int | None]:
    """The ``# stitch:`` comment lines right above ``start_line``: (specs, values, its line)."""
    specs, values, line_no, _ = read_comment(lines, start_line)
    return specs, values, line_no


def comment_block(lines: list[str], start_line: int) -> tuple[int, int]:
    """The lines ``[first, start_line)`` of the ``# stitch:`` comments right above ``start_line`` (empty if none)."""
    first = start_line
    while first > 0 and _COMMENT.search(lines[first - 1]) and lines[first - 1].strip().startswith("#"):
        first -= 1
    return first, start_line


def read_comment(lines: list[str], start_line: int) -> tuple[dict[str, TensorSpec], dict[str, str], int | None, list[str]]:
    """(specs, values, the comment's line, problems) of the ``# stitch:`` lines right above ``start_line``.

    The grammar is ``comment_grammar``'s: tensors, scalars, config objects. A dimension may be a
    name the comment defines (``B=8, x=[B,1024]``); one it does not define is a problem, reported
    rather than guessed.
    """
    from stitch_lsp.task.comment_grammar import parse

    texts: list[str] = []
    line_no = None
    i = start_line - 1
    while i >= 0 and lines[i].strip().startswith("#"):
        m = _COMMENT.search(lines[i])
        if m:
            line_no = i
            texts.insert(0, m.group(1))
        i -= 1
    parsed = parse(", ".join(texts), "\n".join(lines))
    specs = {name: TensorSpec(shape, dtype) for name, (shape, dtype) in parsed.tensors.items()}
    return specs, parsed.values, line_no, parsed.problems


def _size(token: str, values: dict[str, str]) -> int | None:
    """A dimension of a ``# stitch:`` shape written as a name or expression the comment defines."""
    env = {k: int(v) for k, v in values.items() if re.fullmatch(r"\d+", v)}
    try:
        size = int_value(ast.parse(token, mode="eval"), env)
    except SyntaxError:
        return None
    return size if size is not None and size > 0 else None


def _eval(node: ast.AST, env: dict[str, object]):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise ValueError(node.id)
    if isinstance(node, (ast.Tuple, ast.List)):
        return [_eval(e, env) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, env)
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, env), _eval(node.right, env)
        ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
               ast.FloorDiv: lambda: a // b, ast.Div: lambda: a / b, ast.Pow: lambda: a ** b}
        if type(node.op) in ops:
            return ops[type(node.op)]()
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
        return "torch." + node.attr
    raise ValueError(ast.dump(node))


def _module_env(tree: ast.Module) -> dict[str, object]:
    env: dict[str, object] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            try:
                env[stmt.targets[0].id] = _eval(stmt.value, env)
            except (ValueError, TypeError, ZeroDivisionError):
                pass
    return env


def _returned(tree: ast.Module, name: str) -> ast.AST | None:
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
            for s in stmt.body:
                if isinstance(s, ast.Return):
                    return s.value
    return None


def _tensor_spec(call: ast.AST, env: dict[str, object]) -> TensorSpec | None:
    """``torch.randn(8, 1024, dtype=torch.bfloat16)`` (also rand / ones / zeros / empty / randint)."""
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in ("cuda", "to", "contiguous"):
        inner = call.func.value
        spec = _tensor_spec(inner, env)
        if spec and call.func.attr == "to":
            for a in list(call.args) + [k.value for k in call.keywords]:
                try:
                    v = _eval(a, env)
                except ValueError:
                    continue
                if isinstance(v, str) and v.startswith("torch.") and v[6:] in DTYPES:
                    spec = TensorSpec(spec.shape, DTYPES[v[6:]])
        return spec
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
        return None
    fn = call.func.attr
    if fn not in ("randn", "rand", "ones", "zeros", "empty", "randint", "full"):
        return None
    args = list(call.args)
    if fn == "randint":
        args = args[2:] if len(args) >= 3 else args[1:]
    if fn == "full":
        args = args[:1]
    try:
        dims = [_eval(a, env) for a in args]
    except ValueError:
        return None
    if len(dims) == 1 and isinstance(dims[0], list):
        dims = dims[0]
    dtype = "int64" if fn == "randint" else "float32"
    for k in call.keywords:
        if k.arg == "dtype":
            try:
                v = _eval(k.value, env)
            except ValueError:
                return None
            dtype = DTYPES.get(str(v).removeprefix("torch."), dtype)
        if k.arg == "size":
            try:
                dims = list(_eval(k.value, env))
            except ValueError:
                return None
    if not all(isinstance(d, int) for d in dims):
        return None
    return TensorSpec(tuple(dims), dtype)


def from_get_inputs(source: str) -> tuple[list[TensorSpec | None], list[str]] | None:
    """(specs of ``get_inputs()``, literals of ``get_init_inputs()``), or None if the file has no get_inputs."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    env = _module_env(tree)
    ret = _returned(tree, "get_inputs")
    if ret is None:
        return None
    elems = ret.elts if isinstance(ret, (ast.List, ast.Tuple)) else [ret]
    specs = [_tensor_spec(e, env) for e in elems]
    init: list[str] = []
    iret = _returned(tree, "get_init_inputs")
    if isinstance(iret, (ast.List, ast.Tuple)):
        for e in iret.elts:
            try:
                init.append(repr(_eval(e, env)))
            except ValueError:
                init.append("")
    return specs, init


def resolve(region: Region, source: str, shapes_setting: dict[str, str] | None = None,
            recorded: ShapeResult | None = None, recording: ShapeResult | None = None) -> ShapeResult:
    """``recording``: what the user's own run saw (``stitch record``), taken before anything else."""
    out = ShapeResult()
    lines = source.splitlines()
    wanted = list(region.inputs)
    if recording is not None:
        for name in wanted:
            if name in recording.specs:
                out.specs[name] = recording.specs[name]
            elif name in recording.scalars:
                out.scalars[name] = recording.scalars[name]
            else:
                continue
            out.sources[name] = recording.sources.get(name, "recording")
        for name, value in recording.values.items():
            out.values[name] = value
            out.sources.setdefault(name, recording.sources.get(name, "recording"))
    # get_inputs() feeds a module's forward (KernelBench: Model.forward), not any function of the file.
    forward = region.function == "forward" and region.class_name is not None
    if forward and region.class_name != "Model" and re.search(r"^class\s+Model\b", source, re.M):
        forward = False
    got = from_get_inputs(source) if forward else None
    if got is not None:
        specs, init = got
        for name, spec in zip(region.function_params, specs):
            if spec is not None and name in wanted:
                out.specs[name] = spec
                out.sources[name] = "get_inputs"
        for (name, _default), value in zip(region.init_params, init):
            if value:
                out.values[name] = value
                out.sources[name] = "get_init_inputs"
    cspecs, cvalues, _, out.problems = read_comment(lines, region.range.start.line)
    for name, spec in cspecs.items():
        if name not in out.specs:
            out.specs[name] = spec
            out.sources[name] = "comment"
    for name, value in cvalues.items():
        out.values.setdefault(name, value)
        out.sources.setdefault(name, "comment")
    if recorded is not None:
        for name, spec in recorded.specs.items():
            if name not in out.specs:
                out.specs[name] = spec
                out.sources[name] = "recorder"
        for name, value in recorded.values.items():
            out.values.setdefault(name, value)
    for name, text in (shapes_setting or {}).items():
        if name in wanted and name not in out.specs:
            try:
                out.specs[name] = parse_spec(text)
                out.sources[name] = "settings"
            except ValueError:
                pass
    for name, default in region.init_params:
        if name not in out.values and default is not None:
            out.values[name] = default
            out.sources[name] = "default"
    for name in wanted:  # a number written in the comment (T=256, flash=False) is a scalar input
        if name not in out.specs and name not in out.scalars and _is_scalar_literal(out.values.get(name, "")):
            out.scalars[name] = out.values[name]
    out.missing = [n for n in wanted if n not in out.specs and n not in out.scalars]
    return out


def _is_scalar_literal(text: str) -> bool:
    try:
        value = ast.literal_eval(text.strip()) if text.strip() else None
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return False
    return isinstance(value, (bool, int, float))


def comment_template(region: Region, known: ShapeResult | None = None) -> str:
    """A ``# stitch:`` line for the quick fix: known shapes as they are, the rest consistent with the selection.

    Sizes no source gives are named dimensions with a default (``B=8, D=1024,
    x=[B,D] float32, w=[D,N] float32``) so the line parses as inserted and the
    user changes each size in one place; see ``shape_template``.
    """
    from stitch_lsp.task.shape_template import template_shapes

    given = {n: (s.shape, s.dtype) for n, s in (known.specs.items() if known else [])}
    symbols, shapes = template_shapes(region, given, known.values if known else None)
    # Sizes and __init__ arguments the user already wrote in a comment stay (the template replaces it).
    kept = {n: v for n, v in (known.values.items() if known else [])
            if known.sources.get(n) == "comment" and n not in symbols}
    parts = [f"{name}={value}" for name, value in kept.items()]
    parts += [f"{name}={size}" for name, size in symbols.items()]
    parts += [f"{name}={value}" for name, value in config_fields(region, known, set(symbols) | set(kept)).items()]
    for name in region.inputs:
        if name not in shapes:
            continue  # an int (a size): among the symbols above
        shape, dtype = shapes[name]
        parts.append(f"{name}=[{','.join(str(d) for d in shape)}] {dtype}")
    return f"{region.indent}# stitch: " + ", ".join(parts)


def config_fields(region: Region, known: ShapeResult | None, have: set[str]) -> dict[str, object]:
    """Fields of config objects (``config.n_embd``) the re-created ``__init__`` statements read, for
    ``__init__`` arguments no source gives: each with a starting value by what its name says."""
    from stitch_lsp.task.template_dims import attribute_default

    given = set(known.values) if known is not None else set()
    params = [p for p, default in region.init_params if p not in given and default is None]
    out: dict[str, object] = {}
    # The file's classes the Task copies read the same argument names (``CausalSelfAttention(config)``).
    for text in list(region.init_statements.values()) + list(region.helpers.values()):
        for obj, attr in re.findall(r"(?<![\w.])([A-Za-z_]\w*)\.([A-Za-z_]\w*)", text):
            name = f"{obj}.{attr}"
            if obj in params and name not in have and name not in out:
                out[name] = attribute_default(name)
    for text in region.init_statements.values():  # plain arguments (``bias`` of ``... if bias else None``)
        for word in re.findall(r"(?<![\w.])([A-Za-z_]\w*)(?![\w.])", text):
            if word in params and word not in have and word not in out and not any(k.startswith(word + ".") for k in out | dict.fromkeys(have)):
                out[word] = attribute_default(word)
    return out


def record(region: Region, source: str, *, python: str = "", timeout_s: float = 60.0, cancel=None) -> tuple[ShapeResult | None, str]:
    """Shapes from running the file's entry point under the recorder, in a child process.

    Only for trusted workspaces (the caller checks): this runs the user's code. Returns
    (result or None, why not).
    """
    import subprocess
    import sys as _sys

    from stitch_lsp.serde import from_json, to_json
    from stitch_lsp.child_env import worker_env
    from stitch_lsp.contract import SHAPE_RECORDER
    from stitch_lsp.contract.trace import RecordReply, RecordRequest

    request = RecordRequest(path=region.path or "<file>", source=source, class_name=region.class_name,
                            function=region.function, line=region.range.start.line, names=list(region.inputs))
    proc = subprocess.Popen([python or _sys.executable, "-m", SHAPE_RECORDER],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=worker_env(), start_new_session=True)
    unregister = cancel.on_cancel(proc.kill) if cancel is not None else (lambda: None)
    try:
        out, err = proc.communicate(to_json(request), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None, f"the shape recorder took longer than {timeout_s:.0f} s"
    finally:
        unregister()
    if proc.returncode != 0:
        tail = err.strip().splitlines()[-1] if err.strip() else f"exit status {proc.returncode}"
        return None, f"the shape recorder failed: {tail}"
    reply = from_json(out, RecordReply)
    if not reply.ok:
        return None, reply.message
    result = ShapeResult()
    for name, (shape, dtype) in reply.shapes.items():
        result.specs[name] = TensorSpec(tuple(shape), DTYPES.get(dtype, dtype))
        result.sources[name] = "recorder"
    result.values.update(reply.values)
    return result, ""
