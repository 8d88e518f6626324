"""What the CUDA analysis finds in a file, as plain data (ranges in editor terms)."""

from __future__ import annotations

from attrs import evolve, frozen

from stitch_lsp.findings import Finding, Position, Range


@frozen
class ParamInfo:
    name: str
    # The declaration without its name, whitespace normalised: "const float* __restrict__".
    type_text: str
    is_pointer: bool
    # The pointee is const (``const float* p``), not the pointer (``float* const p``).
    is_const: bool
    is_restrict: bool
    range: Range


@frozen
class KernelInfo:
    """A ``__global__`` kernel or a ``__device__`` function (definition or prototype)."""

    name: str
    range: Range
    name_range: Range
    is_global: bool
    params: tuple[ParamInfo, ...]
    body_range: Range | None
    launch_bounds: str | None
    is_host: bool = False
    is_template: bool = False
    # False when this function's own text does not parse (its findings are paused).
    parse_ok: bool = True


@frozen
class LaunchInfo:
    """``kernel<<<grid, block, shared_mem, stream>>>(args)``."""

    kernel: str
    range: Range
    config_range: Range
    grid: str
    block: str
    shared_mem: str | None
    stream: str | None
    # The resolved thread count per block where the block size is a compile-time constant.
    block_threads: int | None = None


@frozen
class SharedDecl:
    name: str
    type_text: str
    # The array size as written (``"256"``, ``"BS / 32"``); None for scalars and ``extern`` arrays.
    size_text: str | None
    is_extern: bool
    range: Range
    function: str


@frozen
class BarrierInfo:
    name: str  # "__syncthreads", "__syncwarp", "block.sync", ...
    range: Range
    function: str


@frozen
class CudaAnalysis:
    path: str
    parse_ok: bool
    syntax_errors: tuple[Range, ...]
    kernels: tuple[KernelInfo, ...]
    device_functions: tuple[KernelInfo, ...]
    launches: tuple[LaunchInfo, ...]
    shared_decls: tuple[SharedDecl, ...]
    barriers: tuple[BarrierInfo, ...]
    findings: tuple[Finding, ...]
    # Findings a ``// stitch: ignore`` comment silenced (kept for `stitch check --show-ignored`).
    suppressed: tuple[Finding, ...] = ()


def shift_range(r: Range, lines: int) -> Range:
    return Range(Position(r.start.line + lines, r.start.character), Position(r.end.line + lines, r.end.character))


def shift_record(obj, lines: int):
    """A copy of a record with every Range inside it (nested records, tuples) moved down by ``lines``."""
    if lines == 0:
        return obj
    if isinstance(obj, Range):
        return shift_range(obj, lines)
    if isinstance(obj, tuple):
        return tuple(shift_record(x, lines) for x in obj)
    fields = getattr(type(obj), "__attrs_attrs__", None)
    if fields is None:
        return obj
    changes = {}
    for f in fields:
        value = getattr(obj, f.name)
        if isinstance(value, (Range, tuple)) or hasattr(type(value), "__attrs_attrs__"):
            moved = shift_record(value, lines)
            if moved is not value:
                changes[f.name] = moved
    return evolve(obj, **changes) if changes else obj
