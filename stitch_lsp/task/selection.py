"""From a file and a line range to a Task: region, shapes, task (shared by the editor and ``stitch fuse``)."""

from __future__ import annotations

from pathlib import Path

from attrs import define, field

from stitch_lsp.task import shapes as shape_sources
from stitch_lsp.task.builder import TaskError, build_task
from stitch_lsp.analysis.region.data import Region
from stitch_lsp.analysis.region.python_region import extract_region
from stitch_lsp.pipeline import Task, TensorSpec
from stitch_lsp.recording.store import Lookup, lookup
from stitch_lsp.settings import Settings


@define
class Prepared:
    region: Region
    task: Task | None = None
    problem: str = ""  # why there is no task, for the user
    missing_shapes: list[str] = field(factory=list)
    shapes: shape_sources.ShapeResult | None = None
    recording: Lookup | None = None  # what the workspace's recordings said (None: not looked)

    def shapes_from(self) -> str:
        """Where the selection's shapes came from, in a few words (the hover, the CLI)."""
        if self.shapes is None:
            return ""
        seen = []
        for name in self.region.inputs:
            src = self.shapes.sources.get(name)
            if src and src not in seen:
                seen.append(src)
        return "; ".join(seen)


def laid_out(shape: tuple[int, ...], strides: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """The recorded strides where they differ from the contiguous ones (a transposed or sliced tensor), else None.
    Dimensions of one element have no stride that matters."""
    if not strides or len(strides) != len(shape):
        return None
    expected, step = [], 1
    for d in reversed(shape):
        expected.append(step)
        step *= max(d, 1)
    expected.reverse()
    differs = any(st != ex for st, ex, d in zip(strides, expected, shape) if d > 1)
    return tuple(strides) if differs and all(st >= 0 for st in strides) else None


def recorded_shapes(found: Lookup) -> shape_sources.ShapeResult:
    out = shape_sources.ShapeResult()
    where = found.where()
    for name, (shape, dtype) in found.specs.items():
        out.specs[name] = TensorSpec(shape, dtype, laid_out(shape, found.strides.get(name)))
        out.sources[name] = where
    for name, value in found.scalars.items():
        out.scalars[name] = value
        out.sources[name] = where
    for name, value in found.init_values.items():
        out.values[name] = value
        out.sources[name] = where
    return out


def shapes_for(region: Region, source: str, settings: Settings, root: Path | None, path: str,
               recorded: shape_sources.ShapeResult | None = None,
               ) -> tuple[shape_sources.ShapeResult, Lookup | None]:
    """The selection's shapes, the workspace's recording first (``root``: where ``stitch record`` ran;
    ``path`` relative to it); and what the recordings said (None: no workspace to look in)."""
    found = None
    if root is not None and path:
        found = lookup(root, path, source, region.range.start.line, list(region.inputs), region.class_name,
                       [p for p, _ in region.init_params])
    recording = recorded_shapes(found) if found is not None and found.found else None
    return shape_sources.resolve(region, source, settings.shapes, recorded, recording), found


def workspace_path(root: Path | None, path: str) -> str:
    """``path`` relative to the workspace ``root`` (as recordings are keyed), or as it is when outside it."""
    if root is None:
        return path
    try:
        return str(Path(path).resolve().relative_to(Path(root).resolve()))
    except (ValueError, OSError):
        return path


def prepare(source: str, path: str, start_line: int, end_line: int, settings: Settings,
            recorded: shape_sources.ShapeResult | None = None, root: Path | None = None) -> Prepared:
    """Lines are 0-based and inclusive. ``root``: the workspace, whose recordings (``stitch record``) are
    looked at first; ``path`` is relative to it."""
    region = extract_region(source, start_line, end_line, path)
    out = Prepared(region=region)
    if region.problems:
        out.problem = "; ".join(region.problems)
        return out
    shapes, out.recording = shapes_for(region, source, settings, root, path, recorded)
    out.shapes = shapes
    out.missing_shapes = list(shapes.missing)
    try:
        out.task = build_task(region, shapes)
    except TaskError as exc:
        out.problem = str(exc)
        if out.recording is not None and out.recording.note and (shapes.missing or "__init__" in out.problem):
            out.problem += f" ({out.recording.note})"
    return out
