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
untrusted workspace. Problems come back as Findings at the comment. The comment's
grammar is ``pairing_comment``'s; what a reference file holds, ``pairing_reference``'s.
"""

from __future__ import annotations

import ast
import bisect
import difflib
import re
from pathlib import Path
from typing import Any, Protocol, Sequence

from attrs import define, field, frozen

from stitch_lsp.findings import Finding, Fix, Position, Range, Severity, TextEdit
from stitch_lsp.jobs.pairing_comment import (
    KEYS, SOURCE, Directive, close_key, dangling_directives, directives_above, split_directives,
)
from stitch_lsp.jobs.pairing_reference import ReferenceInfo, inspect_reference, resolve_reference

LAUNCH_KEYS = ("grid", "block", "shared", "out", "args")
OUTPUT_NAMES = ("out", "output", "y", "dst", "result", "res", "o")
SIZE_NAMES = ("n", "numel", "size", "count", "total", "num_elements", "n_elements", "len", "length")
# Names a launch expression may use besides forward's parameters.
HELPER_NAMES = {"out", "block", "cdiv", "torch", "math", "self", "len", "min", "max", "int", "abs", "round"}


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


@define
class _Report:
    """Findings for one ``.cu`` file, and the kernels that could not be paired."""

    path: str
    result: PairingResult

    def finding(self, rng: Range, message: str, severity: Severity = Severity.ERROR, fix: Fix | None = None) -> None:
        self.result.findings.append(Finding(path=self.path, range=rng, severity=severity, code="STITCH-PAIR",
                                            message=message, source=SOURCE, fix=fix))

    def broken(self, kernel: str, why: str) -> None:
        self.result.broken[kernel] = why


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
    # Most files have no pairing at all: find the lines that could hold one first (cheap),
    # and look above a kernel only when such a line precedes it.
    marks = [i for i, line in enumerate(lines) if "stitch:" in line]
    if not marks and not pyproject_pairs:
        return result
    report = _Report(str(path), result)
    near = _kernels_below(marks, kernels)
    for dangling in dangling_directives(lines, [k.range.start.line for k in near], marks):
        report.finding(dangling.range, dangling.message, Severity.WARNING)

    specs: dict[str, _Spec] = {}
    for kernel in near:
        spec = _comment_spec(kernel, directives_above(lines, kernel.range.start.line), report)
        if spec is not None:
            specs[kernel.name] = spec
    by_name = {k.name: k for k in kernels}
    for entry in pyproject_pairs:
        _add_pyproject_spec(entry, path, root, by_name, specs, report)

    for name, spec in specs.items():
        pairing, problems = _build(path, by_name[name], spec, root)
        for rng, msg in problems:
            report.finding(rng, msg)
        if pairing is None:
            report.broken(name, problems[0][1] if problems else "pairing failed")
        else:
            result.pairs.append(pairing)
    return result


def _kernels_below(marks: Sequence[int], kernels: Sequence[KernelLike]) -> list[KernelLike]:
    """The kernels that are the first to start after one of the ``marks`` lines, in the given order."""
    starts = sorted((k.range.start.line, n) for n, k in enumerate(kernels))
    lines_only = [line for line, _ in starts]
    picked = {starts[j][1] for j in (bisect.bisect_right(lines_only, m) for m in marks) if j < len(starts)}
    return [kernels[n] for n in sorted(picked)]


# -- a kernel's keys, from its comment or from pyproject.toml --------------------------------

def _comment_spec(kernel: KernelLike, directives: list[Directive], report: _Report) -> _Spec | None:
    """The pairing keys of the comment above ``kernel``. None when there is none, it is another tool's,
    or it has a problem (reported)."""
    if not directives:
        return None
    values, ranges, unknown = _known_keys(directives, report)
    mine = _unknown_keys(kernel, unknown, bool(values), report)
    if not mine or kernel.name in report.result.broken:
        return None
    first = directives[0]
    anchor = Range(Position(first.line, 0), Position(directives[-1].line, directives[-1].value_range.end.character))
    if "reference" not in values:
        msg = "pairing comment without `reference=path/to/ref.py`: nothing to check this kernel against"
        report.finding(anchor, msg)
        report.broken(kernel.name, msg)
        return None
    return _Spec(values, ranges, anchor, "comment")


def _known_keys(directives: list[Directive], report: _Report) -> tuple[dict[str, str], dict[str, Range], list[Directive]]:
    """The pairing keys' values and value ranges (the last of a repeated key counts), and the other keys."""
    values: dict[str, str] = {}
    ranges: dict[str, Range] = {}
    unknown: list[Directive] = []
    for d in directives:
        if d.key in KEYS:
            if d.key in values:
                report.finding(d.key_range, f"`{d.key}` is given twice; the last one counts", Severity.WARNING)
            values[d.key] = d.value
            ranges[d.key] = d.value_range
        else:
            unknown.append(d)
    return values, ranges, unknown


def _unknown_keys(kernel: KernelLike, unknown: list[Directive], mine: bool, report: _Report) -> bool:
    """Report the keys that look like misspelt pairing keys (all of them, once the comment is ours);
    True when the comment is a pairing comment."""
    for d in unknown:
        close = close_key(d.key)
        if close is None and not mine:
            continue  # another tool's directive
        if close is not None:
            fix = Fix(title=f"Change `{d.key}` to `{close}`", edits=(TextEdit(d.key_range, close),))
            report.finding(d.key_range, f"unknown pairing key `{d.key}`; did you mean `{close}`?", fix=fix)
        else:
            report.finding(d.key_range, f"unknown pairing key `{d.key}`; known keys: {', '.join(KEYS)}")
        mine = True
        report.broken(kernel.name, f"the pairing comment has an unknown key `{d.key}`")
    return mine


def _add_pyproject_spec(entry: Any, path: Path, root: Path | None, by_name: dict[str, KernelLike],
                        specs: dict[str, _Spec], report: _Report) -> None:
    """A ``[[tool.stitch.pair]]`` table naming a kernel of this file, unless a comment already pairs it."""
    kernel_ref = str(getattr(entry, "kernel", "") or "")
    file_part, _, name = kernel_ref.rpartition(":")
    if not name or not file_part or not _same_file(file_part, path, root):
        return
    if name not in by_name:
        close = difflib.get_close_matches(name, list(by_name), n=1)
        hint = f"; did you mean `{close[0]}`?" if close else ""
        report.finding(Range.of(0, 0, 0, 0),
                       f"pyproject.toml pairs kernel `{name}`, which this file does not define{hint}", Severity.WARNING)
        return
    if name in specs:
        return  # the comment above the kernel wins over pyproject
    values = {"reference": str(getattr(entry, "reference", "") or "")}
    if getattr(entry, "binding", ""):
        values["binding"] = str(entry.binding)
    anchor = by_name[name].name_range
    ranges: dict[str, Range] = {}
    launch = str(getattr(entry, "launch", "") or "")
    if launch:
        for d in split_directives(launch, anchor.start.line, 0):
            if d.key not in LAUNCH_KEYS:
                close = close_key(d.key)
                hint = f"; did you mean `{close}`?" if close else ""
                report.finding(anchor, f"pyproject.toml launch for `{name}`: unknown key `{d.key}`{hint}")
                continue
            values[d.key] = d.value
            ranges[d.key] = anchor
    specs[name] = _Spec(values, ranges, anchor, "pyproject")


def _same_file(file_part: str, path: Path, root: Path | None) -> bool:
    target = Path(file_part)
    if not target.is_absolute() and root is not None:
        target = root / target
    try:
        return target.resolve() == path.resolve()
    except OSError:
        return False


# -- a kernel's keys checked into a Pairing --------------------------------------------------

Problems = list[tuple[Range, str]]


def _where(spec: _Spec, key: str) -> Range:
    return spec.ranges.get(key, spec.anchor)


def _build(path: Path, kernel: KernelLike, spec: _Spec, root: Path | None) -> tuple[Pairing | None, Problems]:
    values = spec.values
    if getattr(kernel, "is_template", False):
        return None, [(kernel.name_range, f"`{kernel.name}` is a template: pair a non-template wrapper kernel (or an explicit instantiation behind `extern \"C\"`) instead")]

    ref_path = resolve_reference(values["reference"], path, root)
    info = inspect_reference(ref_path)
    if isinstance(info, str):
        return None, [(_where(spec, "reference"), info)]

    params, problems = _kernel_params(kernel)
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
        problem = _attach_binding(pairing, values["binding"], path, root)
        if problem is not None:
            return None, [(_where(spec, "binding"), problem)]
        return pairing, []

    inputs = list(info.forward_params)
    if not inputs:
        return None, [(_where(spec, "reference"), f"`Model.forward` in `{Path(info.path).name}` takes no inputs")]
    problems = _set_launch(pairing, kernel, spec, inputs) + _launch_names(spec, inputs)
    if problems:
        return None, problems
    return pairing, []


def _kernel_params(kernel: KernelLike) -> tuple[list[KernelParam], Problems]:
    params: list[KernelParam] = []
    problems: Problems = []
    for p in kernel.params:
        ctype = param_ctype(p)
        if ctype is None:
            problems.append((kernel.name_range, f"parameter `{p.name}` of `{kernel.name}` has type `{p.type_text}`, which Stitch cannot pass from Python (pointers, integers, float, double, bool)"))
        params.append(KernelParam(p.name, ctype or "?", p.type_text))
    return params, problems


def _attach_binding(pairing: Pairing, value: str, path: Path, root: Path | None) -> str | None:
    """Read the ``binding=`` file into ``pairing``; why it cannot be one, or None."""
    bpath = resolve_reference(value, path, root)
    try:
        source = bpath.read_text(encoding="utf-8")
        ast.parse(source)
    except (OSError, UnicodeDecodeError) as exc:
        return f"binding `{value}` cannot be read: {exc}"
    except SyntaxError as exc:
        return f"binding `{bpath.name}` does not parse: line {exc.lineno}: {exc.msg}"
    if "ModelNew" not in source:
        return f"binding `{bpath.name}` defines no `ModelNew`"
    pairing.binding_path, pairing.binding_source = str(bpath), source
    return None


def _set_launch(pairing: Pairing, kernel: KernelLike, spec: _Spec, inputs: list[str]) -> Problems:
    """The launch keys, or their defaults, into ``pairing``; an ``args`` that does not fit the kernel."""
    values = spec.values
    params = pairing.params
    problems: Problems = []
    pairing.block = values.get("block", "256")
    pairing.grid = values.get("grid", "cdiv(out.numel(), block)")
    pairing.shared = values.get("shared", "0")
    pairing.out = values.get("out", f"torch.empty_like({inputs[0]})")

    if "args" in values:
        args = split_args(values["args"])
        if len(args) != len(params):
            sig = ", ".join(f"{p.type_text} {p.name}" for p in params)
            problems.append((_where(spec, "args"), f"signature mismatch: `{kernel.name}({sig})` takes {len(params)} parameter{'s' * (len(params) != 1)}, `args=` passes {len(args)}"))
        pairing.args = args
    else:
        mapped, why = default_args(params, inputs)
        if mapped is None:
            problems.append((spec.anchor, why))
        else:
            pairing.args = mapped
    return problems


def _launch_names(spec: _Spec, inputs: list[str]) -> Problems:
    """Launch expressions that do not parse, or use a name that is neither an input nor a helper."""
    problems: Problems = []
    known = set(inputs) | HELPER_NAMES
    for key in ("grid", "block", "shared", "out", "args"):
        text = spec.values.get(key)
        if text is None:
            continue
        expr = text if key != "args" else f"({text},)"
        try:
            tree = ast.parse(expr, mode="eval")
        except SyntaxError as exc:
            problems.append((_where(spec, key), f"`{key}=` is not a Python expression: {exc.msg}"))
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id not in known:
                close = difflib.get_close_matches(node.id, sorted(known), n=1)
                hint = f"; did you mean `{close[0]}`?" if close else ""
                problems.append((_where(spec, key), f"`{key}=` uses `{node.id}`, which is not a parameter of `Model.forward({', '.join(inputs)})`{hint}"))
    return problems


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
