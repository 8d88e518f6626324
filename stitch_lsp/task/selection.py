"""From a file and a line range to a Task: region, shapes, task (shared by the editor and ``stitch fuse``)."""

from __future__ import annotations

from attrs import define, field

from stitch_lsp.task import shapes as shape_sources
from stitch_lsp.task.builder import TaskError, build_task
from stitch_lsp.analysis.python_region import Region, extract_region
from stitch_lsp.pipeline import Task
from stitch_lsp.settings import Settings


@define
class Prepared:
    region: Region
    task: Task | None = None
    problem: str = ""  # why there is no task, for the user
    missing_shapes: list[str] = field(factory=list)
    shapes: shape_sources.ShapeResult | None = None


def prepare(source: str, path: str, start_line: int, end_line: int, settings: Settings,
            recorded: shape_sources.ShapeResult | None = None) -> Prepared:
    """Lines are 0-based and inclusive."""
    region = extract_region(source, start_line, end_line, path)
    out = Prepared(region=region)
    if region.problems:
        out.problem = "; ".join(region.problems)
        return out
    shapes = shape_sources.resolve(region, source, settings.shapes, recorded)
    out.shapes = shapes
    out.missing_shapes = list(shapes.missing)
    try:
        out.task = build_task(region, shapes)
    except TaskError as exc:
        out.problem = str(exc)
    return out
