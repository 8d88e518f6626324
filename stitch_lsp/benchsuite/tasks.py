"""Finding the task files of a suite and filtering them by level, tag and name.

Read statically (``ast``), never imported: listing a suite must not run its code
or need torch. A task's ``LEVEL``, ``TAGS`` and ``DTYPE`` are module constants
(see bench/tasks/README.md); files without them still run, with the level taken
from a KernelBench ``levelN`` directory name when there is one.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import re
from pathlib import Path

from attrs import define, field


@define
class BenchTask:
    name: str  # file stem, unique within the suite
    path: str
    level: int | None = None
    tags: list[str] = field(factory=list)
    dtype: str = ""  # "float32", "bfloat16", ... from DTYPE where set
    # From the suite's index.json (bench/task_table.py), where present.
    min_bytes: int | None = None
    flops: int | None = None
    expected_bound: str = ""  # memory | compute

    @property
    def category(self) -> str:
        return self.name.split("_", 1)[0] if "_" in self.name else ""


class TaskFileError(Exception):
    """A file that cannot be a task (syntax error, no Model / get_inputs)."""


_REQUIRED = ("Model", "get_inputs", "get_init_inputs")


def _constant(tree: ast.Module, name: str) -> object:
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == name:
                    try:
                        return ast.literal_eval(node.value)
                    except ValueError:
                        if isinstance(node.value, ast.Attribute):  # torch.float32
                            return node.value.attr
                        return None
    return None


def read_task(path: Path) -> BenchTask:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
        raise TaskFileError(f"{path.name}: not valid Python ({exc})") from exc
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = [name for name in _REQUIRED if name not in defined]
    if missing:
        raise TaskFileError(f"{path.name}: not a KernelBench task (no {', '.join(missing)})")
    level = _constant(tree, "LEVEL")
    if not isinstance(level, int):
        match = re.search(r"level_?(\d+)", str(path.parent), re.I)
        level = int(match.group(1)) if match else None
    tags = _constant(tree, "TAGS")
    dtype = _constant(tree, "DTYPE")
    tag_list = [str(t) for t in tags] if isinstance(tags, (tuple, list)) else []
    bound = "compute" if "compute-bound" in tag_list else "memory" if "memory-bound" in tag_list else ""
    return BenchTask(
        name=path.stem,
        path=str(path),
        level=level,
        tags=tag_list,
        dtype=dtype if isinstance(dtype, str) else "",
        expected_bound=bound,
    )


def _apply_index(tasks: list[BenchTask], directory: Path) -> None:
    try:
        index = json.loads((directory / "index.json").read_text(encoding="utf-8"))
        rows = {row["name"]: row for row in index.get("tasks", [])}
    except (OSError, ValueError, AttributeError, TypeError, KeyError):
        return
    for task in tasks:
        row = rows.get(task.name)
        if isinstance(row, dict):
            task.min_bytes = row.get("min_bytes") if isinstance(row.get("min_bytes"), int) else None
            task.flops = row.get("flops") if isinstance(row.get("flops"), int) else None
            task.expected_bound = task.expected_bound or str(row.get("bound", ""))


def discover(directory: Path) -> tuple[list[BenchTask], list[str]]:
    """Every task under ``directory`` (sorted by name), and a message per file skipped."""
    if not directory.is_dir():
        raise TaskFileError(f"{directory}: not a directory")
    tasks: list[BenchTask] = []
    skipped: list[str] = []
    seen: dict[str, Path] = {}
    for path in sorted(directory.rglob("*.py")):
        if path.name.startswith("_") or any(part.startswith((".", "_")) for part in path.relative_to(directory).parts[:-1]):
            continue
        try:
            task = read_task(path)
        except TaskFileError as exc:
            skipped.append(str(exc))
            continue
        if task.name in seen:
            skipped.append(f"{path}: same name as {seen[task.name]}; skipped")
            continue
        seen[task.name] = path
        tasks.append(task)
    tasks.sort(key=lambda t: t.name)
    _apply_index(tasks, directory)
    return tasks, skipped


@define
class TaskFilter:
    levels: list[int] = field(factory=list)  # any of
    tags: list[str] = field(factory=list)  # all of (a category prefix such as "norm" counts as a tag)
    globs: list[str] = field(factory=list)  # any of, on the name

    def accepts(self, task: BenchTask) -> bool:
        if self.levels and task.level not in self.levels:
            return False
        have = {t.lower() for t in task.tags} | {task.category.lower()}
        if any(tag.lower() not in have for tag in self.tags):
            return False
        if self.globs and not any(fnmatch.fnmatchcase(task.name, g) for g in self.globs):
            return False
        return True


def select(tasks: list[BenchTask], flt: TaskFilter) -> list[BenchTask]:
    return [t for t in tasks if flt.accepts(t)]


def part(tasks: list[BenchTask], index: int, count: int) -> list[BenchTask]:
    """The ``index``-th of ``count`` interleaved slices (1-based), for splitting a suite over runs."""
    if count < 1 or not 1 <= index <= count:
        raise ValueError(f"part {index}/{count}: want 1 <= I <= N")
    return tasks[index - 1 :: count]


def interleave(tasks: list[BenchTask]) -> list[BenchTask]:
    """Round-robin over the categories (gemm, norm, pw, red, ...), so that a run cut short by
    its time budget has covered every kind of task rather than only the first few by name."""
    groups: dict[str, list[BenchTask]] = {}
    for task in tasks:
        groups.setdefault(task.category, []).append(task)
    ordered: list[BenchTask] = []
    queues = list(groups.values())
    while any(queues):
        for q in queues:
            if q:
                ordered.append(q.pop(0))
    return ordered
