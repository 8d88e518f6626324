"""Which handwritten kernel is checked against which reference, and how it is launched.

A kernel is paired by ``// stitch:`` comment lines directly above it::

    // stitch: reference=ref/softmax_ref.py
    // stitch: grid=x.shape[0] block=256 args=x, out, x.shape[0], x.shape[1]
    __global__ void softmax_kernel(const float* x, float* out, int rows, int cols)

or by ``[[tool.stitch.pair]]`` tables in ``pyproject.toml`` (``kernel =
"path/file.cu:name"``, ``reference``, and optionally ``launch`` holding the same
``key=value`` text, or ``binding``). Keys:

- ``reference`` — a KernelBench-style Python file (``class Model``,
  ``get_inputs()``, optionally ``get_init_inputs()``); relative to the ``.cu``
  file's folder, else to the workspace root.
- ``grid``, ``block`` — Python expressions (ints or tuples) over the names of the
  reference's ``forward`` parameters, ``out``, ``block`` and ``cdiv(a, b)``.
  Defaults: ``block=256``, ``grid=cdiv(out.numel(), block)``.
- ``shared`` — dynamic shared memory in bytes (default 0).
- ``out`` — how to allocate the output (default ``torch.empty_like(<first input>)``);
  the binding returns it.
- ``args`` — the kernel's arguments in order, comma separated. Default: by name —
  a parameter named like a ``forward`` parameter gets that tensor, ``out`` (or the
  one pointer left over) the output, ``n`` / ``numel`` / ``size`` / ``count``
  ``out.numel()``.
- ``binding`` — instead of the launch keys: a Python file defining ``ModelNew``
  (for kernels that need several launches); it receives the compiled kernel.

Everything here is static (no imports, no execution): it is safe in an
untrusted workspace. Problems come back as Findings at the comment.
"""

from __future__ import annotations

import ast
import bisect
import difflib
import re
from pathlib import Path
from typing import Any, Iterable, Protocol, Sequence

from attrs import define, field, frozen

from stitch_lsp.findings import Finding, Fix, Position, Range, Severity, TextEdit

SOURCE = "stitch"
KEYS = ("reference", "grid", "block", "shared", "out", "args", "binding")
LAUNCH_KEYS = ("grid", "block", "shared", "out", "args")
OUTPUT_NAMES = ("out", "output", "y", "dst", "result", "res", "o")
SIZE_NAMES = ("n", "numel", "size", "count", "total", "num_elements", "n_elements", "len", "length")
# Names a launch expression may use besides forward's parameters.
HELPER_NAMES = {"out", "block", "cdiv", "torch", "math", "self", "len", "min", "max", "int", "abs", "round"}

_DIRECTIVE = re.compile(r"^(\s*)//\s*stitch:(.*)$")
_KEY = re.compile(r"([A-Za-z_][\w-]*)=(?!=)")


class ParamLike(Protocol):
    name: str
    type_text: str
    is_pointer: bool


class KernelLike(Protocol):
    """What pairing needs of a kernel (``analysis.cuda_model.KernelInfo`` fits)."""

    name: str
    range: Range
    name_range: Range
    params: Sequence[ParamLike]


@frozen
class Directive:
    """One ``key=value`` of a ``// stitch:`` comment, with where its parts are."""

    key: str
    value: str
    line: int
    key_range: Range
    value_range: Range


@frozen
class ReferenceInfo:
    """What is known statically about a reference file."""

    path: str
    source: str
    forward_params: tuple[str, ...]
    has_get_inputs: bool
    has_get_init_inputs: bool


@frozen
class KernelParam:
    name: str
    ctype: str  # "ptr", "i32", "i64", "u32", "u64", "f32", "f64", "bool"
    type_text: str


@define
class Pairing:
    """A kernel paired with a reference: all the binding generator and the job need."""

    kernel: str
    cu_path: str
    kernel_range: Range  # where the kernel's name is (hints, diagnostics)
    reference: ReferenceInfo
    anchor: Range  # the pairing comment (or the kernel name, for pyproject pairs)
    params: list[KernelParam] = field(factory=list)
    grid: str = ""
    block: str = "256"
    shared: str = "0"
    out: str = ""
    args: list[str] = field(factory=list)
    binding_path: str = ""
    binding_source: str = ""
    origin: str = "comment"  # comment | pyproject


@define
class PairingResult:
    pairs: list[Pairing] = field(factory=list)
    findings: list[Finding] = field(factory=list)
    # Kernels that carry a pairing comment but could not be paired (for "why not verified" hints).
    broken: dict[str, str] = field(factory=dict)


# -- comment parsing -------------------------------------------------------------------------

def split_directives(text: str, line: int, offset: int) -> list[Directive]:
    """``key=value`` pairs of one comment's text (after ``stitch:``); values may hold spaces
    and commas; a key starts only outside brackets. Bare words (``ignore STX001``) are
    other tools' and are skipped."""
    starts: list[tuple[int, int, str]] = []  # (key start, value start, key)
    depth = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif depth == 0 and (i == 0 or text[i - 1].isspace() or text[i - 1] == ","):
            m = _KEY.match(text, i)
            if m:
                starts.append((i, m.end(), m.group(1)))
                i = m.end()
                continue
        i += 1
    out: list[Directive] = []
    for n, (k0, v0, key) in enumerate(starts):
        end = starts[n + 1][0] if n + 1 < len(starts) else len(text)
        raw = text[v0:end]
        value = raw.strip().rstrip(",").strip()
        lead = len(raw) - len(raw.lstrip())
        vstart = offset + v0 + lead
        out.append(
            Directive(
                key=key,
                value=value,
                line=line,
                key_range=Range.of(line, offset + k0, line, offset + k0 + len(key)),
                value_range=Range.of(line, vstart, line, vstart + len(value)),
            )
        )
    return out


def directives_above(lines: Sequence[str], kernel_line: int) -> list[Directive]:
    """The ``// stitch:`` directives in the comment block directly above ``kernel_line``
    (comment and blank lines; the first code line ends the block)."""
    found: list[Directive] = []
    i = kernel_line - 1
    while i >= 0:
        stripped = lines[i].strip()
        if not stripped:
            i -= 1
            continue
        if not stripped.startswith("//"):
            # ``template <...>`` / ``extern "C"`` belong to the kernel's declaration.
            if stripped.startswith(("template", 'extern "C"')) and not found:
                i -= 1
                continue
            break
        m = _DIRECTIVE.match(lines[i].rstrip("\r\n"))
        if m:
            body_offset = m.start(2)
            directives = split_directives(m.group(2), i, body_offset)
            found = directives + found
        i -= 1
    return found


def dangling_directives(lines: Sequence[str], kernel_lines: Iterable[int], marks: Sequence[int] | None = None) -> list[Finding]:
    """Pairing comments that sit above no kernel (a typo in ``__global__``, a moved kernel).
    ``marks``: the lines that mention ``stitch:`` (all lines when not given)."""
    claimed: set[int] = set()
    for kl in kernel_lines:
        for d in directives_above(lines, kl):
            claimed.add(d.line)
    findings: list[Finding] = []
    for i in marks if marks is not None else range(len(lines)):
        line = lines[i]
        m = _DIRECTIVE.match(line.rstrip("\r\n"))
        if not m or i in claimed:
            continue
        directives = split_directives(m.group(2), i, m.start(2))
        if any(_close_key(d.key) for d in directives):
            findings.append(
                Finding(
                    path="",
                    range=Range.of(i, len(m.group(1)), i, len(line.rstrip("\r\n"))),
                    severity=Severity.WARNING,
                    code="STITCH-PAIR",
                    message="this `// stitch:` pairing comment is not directly above a `__global__` kernel, so it pairs nothing",
                    source=SOURCE,
                )
            )
    return findings


def _close_key(key: str) -> str | None:
    if key in KEYS:
        return key
    close = difflib.get_close_matches(key.lower(), KEYS, n=1, cutoff=0.7)
    return close[0] if close else None


# -- references ------------------------------------------------------------------------------

_REFERENCES: dict[str, tuple[tuple[int, int], ReferenceInfo | str]] = {}


def inspect_reference(path: Path) -> ReferenceInfo | str:
    """Static facts about a reference file, or why it cannot be one (memoised by mtime and size:
    pairing runs on every analysis of the ``.cu`` file)."""
    try:
        st = path.stat()
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = None
    key = str(path)
    if stamp is not None:
        hit = _REFERENCES.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
    info = _inspect_reference(path)
    if stamp is not None:
        if len(_REFERENCES) > 256:
            _REFERENCES.clear()
        _REFERENCES[key] = (stamp, info)
    return info


def _inspect_reference(path: Path) -> ReferenceInfo | str:
    try:
        source = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return f"reference `{path}` does not exist"
    except IsADirectoryError:
        return f"reference `{path}` is a folder, not a Python file"
    except (OSError, UnicodeDecodeError) as exc:
        return f"reference `{path}` cannot be read: {exc}"
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        return f"reference `{path.name}` does not parse: line {exc.lineno}: {exc.msg}"
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        return f"reference `{path.name}` defines no `class Model` (KernelBench format: Model, get_inputs, get_init_inputs)"
    forward = next(
        (n for n in model.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "forward"), None
    )
    if forward is None:
        return f"`Model` in `{path.name}` has no `forward` method"
    args = forward.args
    params = [a.arg for a in args.posonlyargs + args.args][1:]
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    if "get_inputs" not in functions:
        return f"reference `{path.name}` has no `get_inputs()`: Stitch needs it to make test inputs"
    return ReferenceInfo(
        path=str(path),
        source=source,
        forward_params=tuple(params),
        has_get_inputs=True,
        has_get_init_inputs="get_init_inputs" in functions,
    )


def resolve_reference(value: str, cu_path: Path, root: Path | None) -> Path:
    candidate = Path(value).expanduser()
    if candidate.is_absolute():
        return candidate
    here = cu_path.parent / candidate
    if here.exists() or root is None:
        return here
    at_root = root / candidate
    return at_root if at_root.exists() else here


# -- kernel parameters -----------------------------------------------------------------------

_CTYPES = [
    (re.compile(r"\b(bool)\b"), "bool"),
    (re.compile(r"\b(double)\b"), "f64"),
    (re.compile(r"\b(float)\b"), "f32"),
    (re.compile(r"\b(unsigned\s+long\s+long|uint64_t|size_t|unsigned\s+long)\b"), "u64"),
    (re.compile(r"\b(long\s+long|int64_t|long|ptrdiff_t|Py_ssize_t)\b"), "i64"),
    (re.compile(r"\b(unsigned(\s+int)?|uint32_t)\b"), "u32"),
    (re.compile(r"\b(int|int32_t)\b"), "i32"),
]


def param_ctype(param: ParamLike) -> str | None:
    if param.is_pointer or "*" in param.type_text:
        return "ptr"
    text = param.type_text
    for pattern, ctype in _CTYPES:
        if pattern.search(text):
            return ctype
    return None


# -- pairing ---------------------------------------------------------------------------------

@define
class _Spec:
    """The pairing keys of one kernel, from a comment or a pyproject table."""

    values: dict[str, str]
    ranges: dict[str, Range]  # value ranges, for findings
    anchor: Range
    origin: str


def pair_kernels(
    path: Path,
    lines: Sequence[str],
    kernels: Sequence[KernelLike],
    *,
    root: Path | None = None,
    pyproject_pairs: Sequence[Any] = (),
) -> PairingResult:
    """Pair the kernels of one ``.cu`` file. ``kernels``: the analysis' ``__global__`` kernels."""
    result = PairingResult()
    path_str = str(path)

    def finding(rng: Range, message: str, severity: Severity = Severity.ERROR, fix: Fix | None = None) -> Finding:
        return Finding(path=path_str, range=rng, severity=severity, code="STITCH-PAIR", message=message, source=SOURCE, fix=fix)

    # Most files have no pairing at all: find the lines that could hold one first (cheap),
    # and look above a kernel only when such a line precedes it.
    marks = [i for i, line in enumerate(lines) if "stitch:" in line]
    if not marks and not pyproject_pairs:
        return result
    starts = sorted((k.range.start.line, n) for n, k in enumerate(kernels))
    lines_only = [line for line, _ in starts]
    picked = {starts[j][1] for j in (bisect.bisect_right(lines_only, m) for m in marks) if j < len(starts)}
    near = [kernels[n] for n in sorted(picked)]
    for dangling in dangling_directives(lines, [k.range.start.line for k in near], marks):
        result.findings.append(finding(dangling.range, dangling.message, Severity.WARNING))

    specs: dict[str, _Spec] = {}
    for kernel in near:
        directives = directives_above(lines, kernel.range.start.line)
        if not directives:
            continue
        values: dict[str, str] = {}
        ranges: dict[str, Range] = {}
        mine = False
        unknown: list[Directive] = []
        for d in directives:
            if d.key in KEYS:
                mine = True
                if d.key in values:
                    result.findings.append(finding(d.key_range, f"`{d.key}` is given twice; the last one counts", Severity.WARNING))
                values[d.key] = d.value
                ranges[d.key] = d.value_range
            else:
                unknown.append(d)
        for d in unknown:
            close = _close_key(d.key)
            if close is None and not mine:
                continue  # another tool's directive
            if close is not None:
                fix = Fix(title=f"Change `{d.key}` to `{close}`", edits=(TextEdit(d.key_range, close),))
                result.findings.append(finding(d.key_range, f"unknown pairing key `{d.key}`; did you mean `{close}`?", fix=fix))
            else:
                result.findings.append(finding(d.key_range, f"unknown pairing key `{d.key}`; known keys: {', '.join(KEYS)}"))
            mine = True
            result.broken[kernel.name] = f"the pairing comment has an unknown key `{d.key}`"
        if not mine or kernel.name in result.broken:
            continue
        first = directives[0]
        anchor = Range(Position(first.line, 0), Position(directives[-1].line, directives[-1].value_range.end.character))
        if "reference" not in values:
            msg = "pairing comment without `reference=path/to/ref.py`: nothing to check this kernel against"
            result.findings.append(finding(anchor, msg))
            result.broken[kernel.name] = msg
            continue
        specs[kernel.name] = _Spec(values, ranges, anchor, "comment")

    by_name = {k.name: k for k in kernels}
    for entry in pyproject_pairs:
        kernel_ref = str(getattr(entry, "kernel", "") or "")
        file_part, _, name = kernel_ref.rpartition(":")
        if not name or not file_part:
            continue
        target = Path(file_part)
        if not target.is_absolute() and root is not None:
            target = root / target
        try:
            same = target.resolve() == path.resolve()
        except OSError:
            same = False
        if not same:
            continue
        if name not in by_name:
            close = difflib.get_close_matches(name, list(by_name), n=1)
            hint = f"; did you mean `{close[0]}`?" if close else ""
            result.findings.append(
                finding(Range.of(0, 0, 0, 0), f"pyproject.toml pairs kernel `{name}`, which this file does not define{hint}", Severity.WARNING)
            )
            continue
        if name in specs:
            continue  # the comment above the kernel wins over pyproject
        values = {"reference": str(getattr(entry, "reference", "") or "")}
        if getattr(entry, "binding", ""):
            values["binding"] = str(entry.binding)
        launch = str(getattr(entry, "launch", "") or "")
        anchor = by_name[name].name_range
        ranges: dict[str, Range] = {}
        if launch:
            directives = split_directives(launch, anchor.start.line, 0)
            for d in directives:
                if d.key not in LAUNCH_KEYS:
                    close = _close_key(d.key)
                    hint = f"; did you mean `{close}`?" if close else ""
                    result.findings.append(finding(anchor, f"pyproject.toml launch for `{name}`: unknown key `{d.key}`{hint}"))
                    continue
                values[d.key] = d.value
                ranges[d.key] = anchor
        specs[name] = _Spec(values, ranges, anchor, "pyproject")

    for name, spec in specs.items():
        kernel = by_name[name]
        pairing, problems = _build(path, kernel, spec, root)
        for rng, msg in problems:
            result.findings.append(finding(rng, msg))
        if pairing is None:
            result.broken[name] = problems[0][1] if problems else "pairing failed"
        else:
            result.pairs.append(pairing)
    return result


def _build(path: Path, kernel: KernelLike, spec: _Spec, root: Path | None) -> tuple[Pairing | None, list[tuple[Range, str]]]:
    values, ranges = spec.values, spec.ranges
    problems: list[tuple[Range, str]] = []
    where = lambda key: ranges.get(key, spec.anchor)  # noqa: E731

    if getattr(kernel, "is_template", False):
        return None, [(kernel.name_range, f"`{kernel.name}` is a template: pair a non-template wrapper kernel (or an explicit instantiation behind `extern \"C\"`) instead")]

    ref_path = resolve_reference(values["reference"], path, root)
    info = inspect_reference(ref_path)
    if isinstance(info, str):
        return None, [(where("reference"), info)]

    params: list[KernelParam] = []
    for p in kernel.params:
        ctype = param_ctype(p)
        if ctype is None:
            problems.append((kernel.name_range, f"parameter `{p.name}` of `{kernel.name}` has type `{p.type_text}`, which Stitch cannot pass from Python (pointers, integers, float, double, bool)"))
        params.append(KernelParam(p.name, ctype or "?", p.type_text))
    if problems:
        return None, problems

    pairing = Pairing(
        kernel=kernel.name,
        cu_path=str(path),
        kernel_range=kernel.name_range,
        reference=info,
        anchor=spec.anchor,
        params=params,
        origin=spec.origin,
    )
    if "binding" in values:
        bpath = resolve_reference(values["binding"], path, root)
        try:
            source = bpath.read_text(encoding="utf-8")
            ast.parse(source)
        except (OSError, UnicodeDecodeError) as exc:
            return None, [(where("binding"), f"binding `{values['binding']}` cannot be read: {exc}")]
        except SyntaxError as exc:
            return None, [(where("binding"), f"binding `{bpath.name}` does not parse: line {exc.lineno}: {exc.msg}")]
        if "ModelNew" not in source:
            return None, [(where("binding"), f"binding `{bpath.name}` defines no `ModelNew`")]
        pairing.binding_path, pairing.binding_source = str(bpath), source
        return pairing, []

    inputs = list(info.forward_params)
    if not inputs:
        return None, [(where("reference"), f"`Model.forward` in `{Path(info.path).name}` takes no inputs")]
    pairing.block = values.get("block", "256")
    pairing.grid = values.get("grid", "cdiv(out.numel(), block)")
    pairing.shared = values.get("shared", "0")
    pairing.out = values.get("out", f"torch.empty_like({inputs[0]})")

    if "args" in values:
        args = split_args(values["args"])
        if len(args) != len(params):
            sig = ", ".join(f"{p.type_text} {p.name}" for p in params)
            problems.append((where("args"), f"signature mismatch: `{kernel.name}({sig})` takes {len(params)} parameter{'s' * (len(params) != 1)}, `args=` passes {len(args)}"))
        pairing.args = args
    else:
        mapped, why = default_args(params, inputs)
        if mapped is None:
            problems.append((spec.anchor, why))
        else:
            pairing.args = mapped

    known = set(inputs) | HELPER_NAMES
    for key in ("grid", "block", "shared", "out", "args"):
        text = values.get(key)
        if text is None:
            continue
        expr = text if key != "args" else f"({text},)"
        try:
            tree = ast.parse(expr, mode="eval")
        except SyntaxError as exc:
            problems.append((where(key), f"`{key}=` is not a Python expression: {exc.msg}"))
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id not in known:
                close = difflib.get_close_matches(node.id, sorted(known), n=1)
                hint = f"; did you mean `{close[0]}`?" if close else ""
                problems.append((where(key), f"`{key}=` uses `{node.id}`, which is not a parameter of `Model.forward({', '.join(inputs)})`{hint}"))
    if problems:
        return None, problems
    return pairing, []


def split_args(text: str) -> list[str]:
    """Split at top-level commas."""
    parts: list[str] = []
    depth = 0
    cur = ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def default_args(params: Sequence[KernelParam], inputs: Sequence[str]) -> tuple[list[str] | None, str]:
    """Map kernel parameters to forward's inputs by name (see the module docstring)."""
    args: list[str | None] = []
    used_out = False
    for p in params:
        if p.name in inputs:
            args.append(p.name)
        elif p.ctype == "ptr" and p.name.lower() in OUTPUT_NAMES and not used_out:
            args.append("out")
            used_out = True
        elif p.ctype in ("i32", "i64", "u32", "u64") and p.name.lower() in SIZE_NAMES:
            args.append("out.numel()")
        else:
            args.append(None)
    missing = [i for i, a in enumerate(args) if a is None]
    # The one pointer nobody claimed is the output.
    if not used_out and len(missing) >= 1:
        ptrs = [i for i in missing if params[i].ctype == "ptr"]
        if len(ptrs) == 1:
            args[ptrs[0]] = "out"
            missing.remove(ptrs[0])
    if missing:
        names = ", ".join(f"`{params[i].name}`" for i in missing)
        example = ", ".join(a if a is not None else f"<{params[i].name}>" for i, a in enumerate(args))
        return None, (
            f"cannot tell what to pass for {names} from `forward({', '.join(inputs)})`: "
            f"add `// stitch: args={example}`"
        )
    return [a for a in args if a is not None], ""
