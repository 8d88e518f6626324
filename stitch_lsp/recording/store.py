"""Recordings under ``.stitch/recordings/`` → shapes for a selection (read only; nothing is run).

One JSON file per function (``<file>/<Class.method>.json``) holds, for each line the
first calls reached, what the locals were. A selection takes the snapshot at its
first line; where that line never ran (the ``else:`` of ``if self.flash:``), the
snapshot at the innermost enclosing statement that ran, whose live values are the
branch's inputs. ``__init__``'s recording gives the constructor's arguments (numbers,
and config objects as ``types.SimpleNamespace`` of their recorded fields). The
device a recording was made on does not matter: shapes, dtypes and scalars carry over.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from attrs import define, field

from stitch_lsp.recording.site._stitch_spans import function_spans

RECORDINGS = Path(".stitch") / "recordings"
_DTYPES = {"float32", "float16", "bfloat16", "float64", "int64", "int32", "int16", "int8", "uint8", "bool"}


@define
class Lookup:
    """What the recordings say about one selection."""

    found: bool = False
    file: str = ""  # the recording looked at, relative to the workspace
    line: int = 0  # 1-based line whose snapshot was used
    specs: dict[str, tuple[tuple[int, ...], str]] = field(factory=dict)  # tensor -> (shape, dtype)
    strides: dict[str, tuple[int, ...]] = field(factory=dict)
    devices: dict[str, str] = field(factory=dict)
    scalars: dict[str, str] = field(factory=dict)  # number / bool -> literal
    init_values: dict[str, str] = field(factory=dict)  # __init__ argument -> Python expression
    note: str = ""  # why not found, or what the user should know, one sentence

    def where(self) -> str:
        return f"recorded ({self.file}, line {self.line})" if self.found else ""


def recording_path(root: Path, rel_path: str, qualname: str) -> Path:
    return root / RECORDINGS / rel_path / f"{qualname}.json"


def _function_at(source: str, line1: int) -> tuple[str, int, int, str] | None:
    """The innermost function holding 1-based ``line1``: (qualname, first, last, sha)."""
    best = None
    for qualname, first, last, sha in function_spans(source).values():
        if first <= line1 <= last and (best is None or first >= best[1]):
            best = (qualname, first, last, sha)
    return best


def _read(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("lines"), dict) else None


def _enclosing_lines(source: str, line1: int, first: int, last: int) -> list[int]:
    """Lines of the statements enclosing ``line1`` inside the function, innermost first."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    chain: list[int] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt) and child.lineno <= line1 <= (child.end_lineno or child.lineno):
                if first <= child.lineno and child.lineno != line1:
                    chain.append(child.lineno)
                visit(child)

    visit(tree)
    return [ln for ln in reversed(chain) if first <= ln <= last]


def _literal(desc: dict) -> str | None:
    kind = desc.get("k")
    if kind in ("int", "bool"):
        return repr(desc.get("v"))
    if kind == "float":
        v = desc.get("v")
        return f"float({v!r})" if isinstance(v, str) else repr(v)
    if kind == "none":
        return "None"
    if kind == "str":
        return repr(desc.get("v"))
    if kind == "ints":
        return repr(list(desc.get("v") or []))
    return None


def _object_literal(desc: dict) -> str | None:
    """A recorded config object as ``types.SimpleNamespace(...)`` of its scalar fields."""
    if desc.get("k") != "object":
        return None
    fields = []
    for name, value in sorted((desc.get("attrs") or {}).items()):
        text = _literal(value) if isinstance(value, dict) else None
        if text is not None and name.isidentifier() and not name.startswith("_"):
            fields.append(f"{name}={text}")
    return f"types.SimpleNamespace({', '.join(fields)})"


def lookup(root: Path, rel_path: str, source: str, start_line: int, names: list[str],
           class_name: str | None, init_params: list[str]) -> Lookup:
    """The recorded values of ``names`` at 0-based ``start_line`` of ``rel_path``, and ``__init__``'s arguments."""
    out = Lookup()
    rec_root = root / RECORDINGS
    found = _function_at(source, start_line + 1)
    if found is None:
        out.note = "the selection is not inside a function"
        return out
    qualname, first, last, sha = found
    path = recording_path(root, rel_path, qualname)
    out.file = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
    data = _read(path)
    if data is None and path.exists():
        out.note = f"the recording {out.file} cannot be read: record again"
        return out
    if data is None:
        if not rec_root.is_dir() or not any(rec_root.rglob("*.json")):
            out.note = "no recording: run your program once with `stitch record -- python your_program.py`"
        else:
            out.note = (f"the recorded run never called {qualname} (looked at {out.file}): record a run that "
                        "calls it, or add a `# stitch:` comment")
        return out
    if data.get("sha") != sha:
        out.note = f"{qualname} changed since it was recorded ({out.file}): record again"
        return out
    snapshots = {int(k): v for k, v in data["lines"].items() if str(k).isdigit() and isinstance(v, dict)}
    line1 = start_line + 1
    chosen = line1 if line1 in snapshots else next((ln for ln in _enclosing_lines(source, line1, first, last)
                                                     if ln in snapshots), None)
    if chosen is None:
        earlier = [ln for ln in snapshots if ln < line1]
        chosen = max(earlier) if earlier else None
    if chosen is None:
        out.note = f"the recorded run never reached line {line1} of {qualname} (looked at {out.file})"
        return out
    out.found, out.line = True, chosen
    snap = snapshots[chosen]
    for name in names:
        desc = snap.get(name)
        if not isinstance(desc, dict):
            continue
        if desc.get("k") == "tensor":
            dtype = str(desc.get("dtype", "float32"))
            out.specs[name] = (tuple(int(d) for d in desc.get("shape", [])), dtype if dtype in _DTYPES else "float32")
            out.strides[name] = tuple(int(d) for d in desc.get("stride", []))
            out.devices[name] = str(desc.get("device", ""))
        elif desc.get("k") in ("int", "float", "bool"):
            out.scalars[name] = _literal(desc) or ""
    if class_name and init_params:
        init = _read(recording_path(root, rel_path, f"{qualname.rsplit('.', 1)[0]}.__init__"))
        init_lines = sorted(int(k) for k in (init or {}).get("lines", {}) if str(k).isdigit())
        if init_lines:
            first_snap = init["lines"][str(init_lines[0])]  # the arguments, before __init__ ran a line
            for pname in init_params:
                desc = first_snap.get(pname)
                if isinstance(desc, dict):
                    text = _literal(desc) or _object_literal(desc)
                    if text is not None:
                        out.init_values[pname] = text
    return out
