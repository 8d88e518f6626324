"""What a GEMM tile-tuning run asks a worker, and what it answers (plain data, no torch).

The template Coder builds a ``TuneCase`` per GEMM kernel (its Triton source, the tensors it takes, the
tiles to try); the worker (``stitch_lsp.worker.gemm_tune_handler``) compiles every tile in parallel
processes, times each on the GPU, times cuBLAS on the same GEMM(s) for comparison, and answers with
the medians. ``gemm_tiles.TileCache`` keeps the fastest per problem.
"""

from __future__ import annotations

from attrs import define, field


@define
class TuneTile:
    tile: list[int]  # BM, BN, BK, GROUP_M, num_warps, num_stages
    grid: list[int]
    meta: dict[str, int]  # the kernel's constexpr arguments and launch options


@define
class LibraryGemm:
    """One GEMM as cuBLAS would run it through torch (``x @ w.T + b`` for a linear layer's weight)."""

    m: int
    n: int
    k: int
    b_trans: bool
    bias: bool = False


@define
class TuneCase:
    key: str  # gemm_tiles.problem_key
    name: str  # the kernel's name in ``source``
    source: str
    inputs: list[tuple[list[int], str]] = field(factory=list)  # (shape, dtype) per tensor argument
    outputs: list[tuple[list[int], str]] = field(factory=list)
    tiles: list[TuneTile] = field(factory=list)
    dtype: str = "float32"
    library: list[LibraryGemm] = field(factory=list)


@define
class TuneRequest:
    cases: list[TuneCase] = field(factory=list)
    parallel: int = 0  # compile processes; 0 = the CPU count, at most 16
    budget_s: float = 600.0  # stop timing new tiles after this long


@define
class TuneResult:
    key: str
    timings_us: dict[str, float] = field(factory=dict)  # tile label -> median µs
    best: list[int] = field(factory=list)
    best_us: float | None = None
    library_us: float | None = None
    compile_s: dict[str, float] = field(factory=dict)  # tile label -> seconds (in a compile process)
    errors: dict[str, str] = field(factory=dict)  # tile label -> why it failed


@define
class TuneReply:
    ok: bool
    results: list[TuneResult] = field(factory=list)
    gpu: str = ""
    message: str = ""
    seconds: float = 0.0


def tile_label(tile: list[int]) -> str:
    bm, bn, bk, group_m, warps, stages = tile[:6]
    persistent = f"/p{tile[6]}" if len(tile) > 6 and tile[6] else ""
    return f"{bm}x{bn}x{bk}/g{group_m}/w{warps}/s{stages}{persistent}"
