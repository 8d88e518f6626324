"""Region + shapes → a KernelBench-format Task under ``<workspace>/.stitch/tasks/<hash>/reference.py``.

The Task's ``Model`` re-creates exactly what the selection uses from the
enclosing module (submodules with the same hyper-parameters, parameters,
buffers), under the same attribute names, so ``self.norm.weight`` in the user's
file is ``norm.weight`` in the Task.
"""

from __future__ import annotations

import ast
import re
import textwrap

from stitch_lsp.task.shapes import ShapeResult
from stitch_lsp.analysis.region.data import Region
from stitch_lsp.pipeline import Task



class TaskError(Exception):
    """The Region cannot become a Task (the message says why, in the user's terms)."""


def _names_in(text: str) -> set[str]:
    return set(re.findall(r"\b[A-Za-z_]\w*\b", text))


def _bound_names(statement: str) -> list[str]:
    """The names an import statement binds (``import torch.nn.functional as F`` binds F, not torch)."""
    try:
        tree = ast.parse(textwrap.dedent(statement))
    except SyntaxError:
        return []
    out: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            out += [a.asname or a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level or node.module == "__future__":
                continue  # a relative import cannot resolve from .stitch/tasks/
            out += [a.asname or a.name for a in node.names if a.name != "*"]
    return out


def task_imports(import_lines: list[str], used: set[str]) -> list[str]:
    """The user's imports the Task needs: those that bind a name it uses, then ``import torch``.

    Chosen by the names each statement binds, never by its text: ``import
    torch.nn.functional as F`` binds ``F`` only, so a Task whose class derives
    from ``torch.nn.Module`` still needs ``import torch``.
    """
    kept = [textwrap.dedent(line) for line in import_lines if set(_bound_names(line)) & used]
    if "torch" not in {n for line in kept for n in _bound_names(line)}:
        kept.insert(0, "import torch")
    return kept


def build_task(region: Region, shapes: ShapeResult, *, name: str = "") -> Task:
    _check(region, shapes)
    init_lines, needed_names = _init_lines(region)
    for text in list(region.methods.values()) + list(region.helpers.values()):
        needed_names |= _names_in(text)
    needed_names |= _names_in(region.body)
    constants = []
    for cname, text in region.module_names.items():
        if text not in constants:  # `M, N = 8192, 4096` defines both
            constants.append(text)
        needed_names |= _names_in(text)
    values = _init_values(region, shapes, needed_names)
    imports = task_imports(region.imports, needed_names)
    if "types" in needed_names and not any("types" in _bound_names(line) for line in imports):
        imports.append("import types")  # a recorded config object: types.SimpleNamespace(...)
    task = Task(
        name=name or f"{region.function}_{region.range.start.line + 1}",
        source=_reference_source(region, shapes, imports, constants + values, init_lines),
        inputs=[shapes.specs[n] for n in region.inputs if n in shapes.specs],
        origin_path=region.path or None,
        origin_range=region.range,
        shape_source=",".join(sorted(set(shapes.sources.get(n, "") for n in region.inputs))),
        input_names=list(region.inputs),
        output_names=list(region.outputs) if not region.returns else ["<return>"],
    )
    return task


def _check(region: Region, shapes: ShapeResult) -> None:
    """What stops the selection becoming a Task before anything is written: the region's problems, then
    the shapes'."""
    if region.problems:
        raise TaskError("; ".join(region.problems))
    if shapes.problems:
        raise TaskError("; ".join(shapes.problems))
    if shapes.missing:
        raise TaskError("no shapes for " + ", ".join(shapes.missing)
                        + ": record your program (stitch record -- python ...), or add a `# stitch: name=[dims] dtype` "
                          "comment above the selection")


def _init_lines(region: Region) -> tuple[list[str], set[str]]:
    """The statements of the Task's ``__init__`` (after ``super().__init__()``) and the names they use."""
    needed_names: set[str] = set()
    if region.init_statements or not region.self_needs:
        # Every __init__ statement the used attributes need, in the file's order (locals, ModuleDicts,
        # lambdas over them, buffers registered inside a branch).
        init_lines = list(region.init_statements.values())
        for text in init_lines:
            needed_names |= _names_in(text)
        return init_lines, needed_names
    # __init__'s own locals first (``inner = hidden * 4``): the re-created attributes may use them.
    init_lines = [textwrap.dedent(text) for text in region.init_locals.values()]
    for text in region.init_locals.values():
        needed_names |= _names_in(text)
    for need in region.self_needs:
        if need.kind == "buffer":
            init_lines.append(f"self.register_buffer({need.name!r}, {need.init_source})")
        elif need.kind in ("module", "parameter", "attribute"):
            init_lines.append(f"self.{need.name} = {need.init_source}")
        else:
            raise TaskError(f"self.{need.name} is not set in __init__")
        needed_names |= _names_in(need.init_source)
    return init_lines, needed_names


def _init_values(region: Region, shapes: ShapeResult, needed_names: set[str]) -> list[str]:
    """``name = value`` for each ``__init__`` argument the Task needs; ``needed_names`` grows by the names
    each value uses (a later argument may be needed by an earlier one's value)."""
    values = []
    for pname in [p for p, _ in region.init_params]:
        if pname in needed_names:
            if pname not in shapes.values:
                raise TaskError(f"__init__'s {pname} is needed to re-create the module: record your program "
                                f"(stitch record -- python ...), or add `{pname}=<value>` to the `# stitch:` comment")
            values.append(f"{pname} = {shapes.values[pname]}")
            needed_names |= _names_in(shapes.values[pname])
    return values


def _input_expressions(region: Region, shapes: ShapeResult) -> list[str]:
    """``get_inputs()``'s expressions, one per input of the selection."""
    inputs = []
    for n in region.inputs:
        if n in shapes.scalars:  # a number the selection reads (T, eps): traced as a constant
            inputs.append(shapes.scalars[n])
            continue
        spec = shapes.specs[n]
        inputs.append(_tensor_expression(spec.shape, spec.dtype, spec.strides))
    return inputs


def _tensor_expression(shape: tuple[int, ...], dtype: str, strides: tuple[int, ...] | None = None) -> str:
    """A random tensor of ``shape`` and ``dtype``; laid out with ``strides`` (the user's program passed a
    transposed or sliced view there) over a buffer just large enough, so the candidate is judged and timed on the
    layout it will meet."""
    if strides is not None:
        size = 1 + sum((d - 1) * st for d, st in zip(shape, strides) if d > 0)
        base = _tensor_expression((size,), dtype)
        return f"{base}.as_strided({tuple(shape)!r}, {tuple(strides)!r})"
    dims = ", ".join(str(d) for d in shape)
    if dtype in ("int64", "int32"):
        return f"torch.randint(0, 16, ({dims}{',' if len(shape) == 1 else ''}), dtype=torch.{dtype})"
    if dtype == "bool":
        return f"torch.rand({dims}) > 0.5"
    return f"torch.randn({dims}, dtype=torch.{dtype})"


def _reference_source(region: Region, shapes: ShapeResult, imports: list[str], definitions: list[str],
                      init_lines: list[str]) -> str:
    """The Task's ``reference.py``: the imports, the file's constants and the ``__init__`` arguments'
    values (``definitions``), the helpers, ``Model`` and the KernelBench input functions."""
    body = region.body
    if not region.returns:
        outs = region.outputs
        body += "\nreturn " + (outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ",)")
    forward_args = ", ".join(["self"] + region.inputs)
    init_block = "\n".join(["super().__init__()"] + init_lines)
    inputs = _input_expressions(region, shapes)
    where = f"{region.path}:{region.range.start.line + 1}-{region.range.end.line + 1}" if region.path else "a selection"
    return "\n".join([
        f'"""Stitch fuse task: {where} ({region.class_name + "." if region.class_name else ""}{region.function})."""',
        *imports,
        "",
        *definitions,
        "",
        "",
        # The file's own functions and classes the selection needs: tracing inlines them.
        *[text + "\n\n" for text in region.helpers.values()],
        # torch.nn.Module, not nn.Module: the user's file need not bind `nn`.
        "class Model(torch.nn.Module):",
        "    def __init__(self):",
        textwrap.indent(init_block, " " * 8),
        "",
        *[textwrap.indent(text, " " * 4) + "\n" for text in region.methods.values()],
        f"    def forward({forward_args}):",
        textwrap.indent(body, " " * 8),
        "",
        "",
        "def get_inputs():",
        f"    return [{', '.join(inputs)}]",
        "",
        "",
        "def get_init_inputs():",
        "    return []",
        "",
    ])
