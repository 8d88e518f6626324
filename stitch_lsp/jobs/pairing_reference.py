"""A pairing's reference file: where ``reference=`` (or ``binding=``) points, and what is known about the
file without running it (``class Model``, ``forward``'s parameters, ``get_inputs``)."""

from __future__ import annotations

import ast
from pathlib import Path

from attrs import frozen


@frozen
class ReferenceInfo:
    """What is known statically about a reference file."""

    path: str
    source: str
    forward_params: tuple[str, ...]
    has_get_inputs: bool
    has_get_init_inputs: bool


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
