"""What the CUDA analysis finds in a file, as plain data (ranges in editor terms)."""

from __future__ import annotations

from attrs import frozen

from stitch_lsp.findings import Finding, Fix, Position, Range, TextEdit


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
    # Per grid axis, the parameters (by position) a block-derived index is checked against
    # (`if (i < n)`): the kernel expects a partial last block along that axis.
    tail_bounds: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # The kernel walks its data in a grid-stride loop (any grid size covers every element).
    grid_stride: bool = False


@frozen
class GridDivision:
    """A grid extent written as a truncating division (``n / 256``) where the launch is set up."""

    range: Range  # the division, where it is written (a `dim3` declaration may serve several launches)
    text: str
    dividend: str
    divisor: str
    rounded_up: str  # the same extent rounded up, in the file's own names
    axis: str = "x"
    factors: tuple[str, ...] = ()  # the dividend and, for a product, its factors


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
    # Grid extents that round down, unless the function checks that they divide evenly.
    truncations: tuple[GridDivision, ...] = ()
    # The kernel's arguments as written.
    args: tuple[str, ...] = ()


@frozen
class FlowStep:
    """One step of a host function that matters for launch error checks, in source order."""

    kind: str  # "launch" | "check" | "call" (a call of a named function) | "ref" (a name passed as a value)
    name: str  # the kernel, callee or name passed; "" for checks
    range: Range | None = None  # the launch
    fix: Fix | None = None  # for a launch: insert a check after it
    header: str | None = None  # the header that check needs (added by the fix where the file lacks it)


@frozen
class FunctionFlow:
    """What a function does about kernel launch errors (STC009 follows calls across the file)."""

    name: str
    is_host: bool
    returns_status: bool  # returns a cudaError_t: its callers can check
    steps: tuple[FlowStep, ...]


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


# Moving records down when lines are inserted above them. Written out per type (not
# with a generic attrs walk): after an edit near the top of a large file every
# function's cached result moves, and this is the hot path then.

def shift_range(r: Range, d: int) -> Range:
    return Range(Position(r.start.line + d, r.start.character), Position(r.end.line + d, r.end.character))


def shift_param(p: ParamInfo, d: int) -> ParamInfo:
    return ParamInfo(p.name, p.type_text, p.is_pointer, p.is_const, p.is_restrict, shift_range(p.range, d))


def shift_kernel(k: KernelInfo, d: int) -> KernelInfo:
    return KernelInfo(
        name=k.name, range=shift_range(k.range, d), name_range=shift_range(k.name_range, d),
        is_global=k.is_global, params=tuple(shift_param(p, d) for p in k.params),
        body_range=shift_range(k.body_range, d) if k.body_range is not None else None,
        launch_bounds=k.launch_bounds, is_host=k.is_host, is_template=k.is_template, parse_ok=k.parse_ok,
        tail_bounds=k.tail_bounds, grid_stride=k.grid_stride,
    )


def shift_fix(fix: Fix | None, d: int) -> Fix | None:
    if fix is None:
        return None
    return Fix(fix.title, tuple(TextEdit(shift_range(e.range, d), e.new_text) for e in fix.edits))


def shift_launch(l: LaunchInfo, d: int) -> LaunchInfo:
    return LaunchInfo(l.kernel, shift_range(l.range, d), shift_range(l.config_range, d), l.grid, l.block,
                      l.shared_mem, l.stream, l.block_threads,
                      tuple(GridDivision(shift_range(t.range, d), t.text, t.dividend, t.divisor, t.rounded_up, t.axis,
                                         t.factors) for t in l.truncations), l.args)


def shift_flow(f: FunctionFlow, d: int) -> FunctionFlow:
    if not any(s.range is not None for s in f.steps):
        return f  # no launches: nothing in it has a place
    return FunctionFlow(f.name, f.is_host, f.returns_status, tuple(
        s if s.range is None else FlowStep(s.kind, s.name, shift_range(s.range, d), shift_fix(s.fix, d), s.header)
        for s in f.steps))


def shift_shared(s: SharedDecl, d: int) -> SharedDecl:
    return SharedDecl(s.name, s.type_text, s.size_text, s.is_extern, shift_range(s.range, d), s.function)


def shift_barrier(b: BarrierInfo, d: int) -> BarrierInfo:
    return BarrierInfo(b.name, shift_range(b.range, d), b.function)


def shift_finding(f: Finding, d: int) -> Finding:
    fix = shift_fix(f.fix, d)
    return Finding(path=f.path, range=shift_range(f.range, d), severity=f.severity, code=f.code, message=f.message,
                   source=f.source, doc_url=f.doc_url, fix=fix, related=f.related)
