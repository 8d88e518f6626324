"""What accepting a fused kernel changes: new files under ``kernels_dir`` and the edited selection.

Plain data (``FuseEdit``); the editor turns it into a versioned WorkspaceEdit and
``stitch fuse --apply`` writes it. Only built for a passing verdict.
"""

from __future__ import annotations

import re
from pathlib import Path

from attrs import define, field

from stitch_lsp.coders import workspace_module
from stitch_lsp.findings import Position, Range, TextEdit
from stitch_lsp.op_graph import OpGraph
from stitch_lsp.pipeline import Task
from stitch_lsp.settings import Settings

LOADER_MODULE = "_stitch_loader"


@define
class FuseEdit:
    origin_path: str
    files: dict[str, str] = field(factory=dict)  # workspace-relative path -> text (created or replaced)
    edits: list[TextEdit] = field(factory=list)  # on the origin file
    module: str = ""  # dotted module the user's file imports
    func_name: str = ""


def loader_source() -> str:
    """The runtime loader's text, copied into the workspace so the user's program needs no Stitch."""
    import stitch_lsp.runtime as runtime

    path = Path(runtime.__file__).with_name("loader.py")
    return path.read_text(encoding="utf-8")


def loader_import(package: bool) -> str:
    """The generated module's import of the copied loader (beside it in a package, or on the path)."""
    names = "load_kernel, load_triton, prefetch_kernels"
    return f"from .{LOADER_MODULE} import {names}" if package else f"from {LOADER_MODULE} import {names}"


def names_for(task: Task, settings: Settings) -> tuple[str, str]:
    """(workspace-relative module path, function name) for a task's fused kernel."""
    func = f"fused_{re.sub(r'[^0-9a-zA-Z_]', '_', task.name)}_{task.key()[:8]}"
    return f"{settings.kernels_dir.strip('/')}/{func}.py", func


def edit_files(outcome, settings: Settings, module_path: str, func_name: str, gemm=None) -> dict[str, str]:
    """``gemm``: the GemmOptions the candidate was generated with (the same kernels and tiles)."""
    plan = outcome.plan
    package = module_path.rsplit("/", 1)[0] if "/" in module_path else ""
    text = workspace_module(
        plan.graph, gemm, getattr(outcome, "channels_last", None),
        loader_import=loader_import(bool(package)),
        func_name=func_name,
        header=(f"Fused by Stitch from {outcome.task.origin_path}. "
                f"{outcome.verdict.summary if outcome.verdict else ''}").strip(),
        attention=getattr(outcome, "attention", True),
    )
    files = {module_path: text}
    if package:
        files[f"{package}/{LOADER_MODULE}.py"] = loader_source()
        files[f"{package}/__init__.py"] = '"""Kernels fused by Stitch (generated; safe to commit)."""\n'
    return files


def call_arguments(graph: OpGraph, task: Task) -> list[str]:
    """The expressions, in the user's code, for each graph input of the fused function."""
    args = []
    for i in graph.inputs:
        if i.role in ("param", "buffer"):
            args.append(f"self.{i.path}")
        else:
            args.append(task.input_names[i.index])
    return args


def build_edit(task: Task, graph: OpGraph, source: str, files: dict[str, str], module_path: str,
               func_name: str, *, indent: str, returns: bool) -> FuseEdit:
    """Replace the selection with a call and import the fused function at the top of the file."""
    module = module_path.removesuffix(".py").replace("/", ".")
    call = f"{func_name}({', '.join(call_arguments(graph, task))})"
    if returns:
        line = f"{indent}return {call}"
    else:
        outs = task.output_names
        line = f"{indent}{', '.join(outs)}{',' if len(outs) == 1 and graph.output_is_tuple else ''} = {call}"
    rng = task.origin_range
    lines = source.splitlines()
    end_char = len(lines[rng.end.line]) if rng.end.line < len(lines) else rng.end.character
    replace = TextEdit(Range(Position(rng.start.line, 0), Position(rng.end.line, end_char)), line)
    import_line = _import_insert_line(lines)
    imp = TextEdit(Range(Position(import_line, 0), Position(import_line, 0)), f"from {module} import {func_name}\n")
    return FuseEdit(origin_path=task.origin_path or "", files=dict(files), edits=[imp, replace],
                    module=module, func_name=func_name)


def _import_insert_line(lines: list[str]) -> int:
    last = -1
    for i, line in enumerate(lines):
        if re.match(r"(import|from)\s+\S", line):
            last = i
        elif line and not line[0].isspace() and not line.startswith(("#", '"', "'")) and last >= 0:
            break
    return last + 1 if last >= 0 else 0


def apply_text_edits(text: str, edits: list[TextEdit]) -> str:
    """Apply non-overlapping edits (any order) to ``text``; lines and characters are 0-based."""
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))

    def offset(p: Position) -> int:
        if p.line >= len(lines):
            return len(text)
        return offsets[p.line] + min(p.character, len(lines[p.line].rstrip("\r\n")))

    for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        a, b = offset(e.range.start), offset(e.range.end)
        text = text[:a] + e.new_text + text[b:]
    return text
