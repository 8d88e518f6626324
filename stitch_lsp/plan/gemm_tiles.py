"""Tiles for the GEMM family: the candidates, the default by shape class, and the measured choice cached.

A tile is ``[BM, BN, BK, GROUP_M, num_warps, num_stages]``. With no measurement for a problem the
kernel takes the table's tile for its class (fp32 3xTF32 or half precision; one or two accumulators;
few rows or many), which was the fastest of the candidates on an H100 over the bench shapes. A tuning
run (``stitch fuse --tune-gemm``, or the background job after a fuse) times every candidate on the user's
GPU and caches the fastest per (GPU, shape, dtype, epilogue) in ``.stitch/gemm_tiles.json``; later
generations use it. Nothing here runs a kernel (the timing is the worker's, ``worker/gemm_tune_handler``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import Callable

from attrs import define, evolve, field

from stitch_lsp.plan.gemm_spec import GemmSpec
from stitch_lsp.contract.gemm_tune import TuneReply, tile_label

Tile = list[int]  # BM, BN, BK, GROUP_M, num_warps, num_stages[, persistent programs]

CACHE_FILE = "gemm_tiles.json"
CACHE_VERSION = 1

# Tried by a tuning run: the shapes a Hopper tensor-core GEMM does well with, at a depth that fits
# shared memory (fp32 operands take twice the bytes of half ones, so half the BK). Half precision also
# tries 128x128 at three stages (96 KiB): two programs fit an SM, so one's epilogue overlaps the other's
# main loop, which counts where K is short; and the wide tiles' accumulators (128 fp32 registers a thread)
# leave a heavy epilogue (erf) no room: it spills there (ptxas, sm_90), not at 128x128.
CANDIDATES: dict[str, list[Tile]] = {
    "fp32": [[128, 128, 32, 8, 8, 3], [128, 256, 32, 8, 8, 3], [256, 128, 32, 8, 8, 3], [128, 64, 32, 8, 4, 4],
             [64, 128, 32, 8, 4, 4], [128, 128, 16, 8, 8, 4], [64, 64, 32, 8, 4, 4]],
    "half": [[128, 256, 64, 8, 8, 3], [256, 128, 64, 8, 8, 3], [128, 128, 64, 8, 8, 4], [128, 128, 64, 8, 8, 3],
             [128, 128, 64, 8, 4, 4], [64, 256, 64, 8, 4, 4], [128, 64, 64, 8, 4, 4], [64, 128, 64, 8, 4, 4]],
}
# Where K is short (at most this many BK steps a tile), half precision also tries each of its first three
# candidates persistent: one program an SM (two for 128x128 at three stages) looping over the tiles, so
# the next tile's loads start under this one's epilogue (erf GELU at K = 1024 ran 1.53x cuBLAS one tile a
# program). Counted for an H100's 132 SMs; any count computes the same, a tuning run measures it.
PERSISTENT_MAX_STEPS = 32
PERSISTENT_SMS = 132

# The default for each class, until a tuning run measures the problem itself: the fastest candidate on an
# H100 (bench/results/gemm_family_h100.md) over the bench and KernelBench shapes of the class.
TABLE: dict[tuple[str, int, str], Tile] = {
    ("fp32", 1, "tall"): [128, 64, 32, 8, 4, 4],  # 7 of 9 fp32 shapes; the others within 5%
    ("fp32", 1, "short"): [128, 64, 32, 8, 4, 4],  # 128 rows: best at N = 16384, 11% off at N = 32768
    ("fp32", 2, "tall"): [128, 128, 32, 8, 8, 3],  # two accumulators (GEGLU)
    ("fp32", 2, "short"): [64, 128, 32, 8, 4, 4],
    ("half", 1, "tall"): [128, 256, 64, 8, 8, 3],
    ("half", 1, "short"): [64, 256, 64, 8, 4, 4],
    ("half", 2, "tall"): [128, 128, 64, 8, 8, 4],  # two accumulators (SwiGLU)
    ("half", 2, "short"): [64, 128, 64, 8, 4, 4],
}
SHORT_ROWS = 256  # at most this many rows: half-height tiles, or too few programs fill the GPU


def dtype_class(spec: GemmSpec) -> str:
    return "fp32" if spec.dtype == "float32" else "half"


def _pow2_at_least(x: int) -> int:
    p = 16
    while p < x:
        p *= 2
    return p


def fit(tile: Tile, spec: GemmSpec) -> Tile:
    """``tile`` shrunk to the problem (no block wider than the next power of two of its dimension)."""
    bm, bn, bk, group_m, warps, stages = tile[:6]
    bm = min(bm, _pow2_at_least(spec.m))
    bn = min(bn, _pow2_at_least(spec.n))
    bk = min(bk, _pow2_at_least(spec.k))
    if spec.reduces_rows:  # one tile spans the row; the accumulators' registers cap the rows a tile takes
        bn = _pow2_at_least(spec.n)
        bm = min(bm, 64 if bn > 128 else 128)
        warps = max(warps, 8 if bm * bn >= 128 * 128 else 4)
    if bm * bn <= 64 * 64:
        warps = min(warps, 4)
    return [bm, bn, bk, group_m, warps, stages] + list(tile[6:])


def _persistent(tile: Tile, spec: GemmSpec) -> Tile | None:
    bm, bn, bk, _, _, stages = tile[:6]
    if dtype_class(spec) != "half" or spec.reduces_rows or math.ceil(spec.k / bk) > PERSISTENT_MAX_STEPS:
        return None
    tiles = math.ceil(spec.m / bm) * math.ceil(spec.n / bn)
    programs = PERSISTENT_SMS * (2 if bm * bn <= 128 * 128 and stages <= 3 else 1)
    return tile[:6] + [programs] if tiles > programs else None


def table_tile(spec: GemmSpec) -> Tile:
    """The class's tile; where it would leave more than half the SMs idle, the first smaller tile that
    does not (or the smallest): a GEMM of a few hundred rows is a matter of latency, not of throughput."""
    tile = _class_tile(spec)
    if _programs(tile, spec) * 2 >= FILL_SMS:
        return tile
    fills = [fit(t, spec) for t in _fill_tiles(tile, spec)]
    return next((t for t in fills if _programs(t, spec) * 2 >= FILL_SMS), fills[-1] if fills else tile)


def _class_tile(spec: GemmSpec) -> Tile:
    rows = "short" if spec.m <= SHORT_ROWS else "tall"
    return fit(TABLE[(dtype_class(spec), min(len(spec.accs), 2), rows)], spec)


def _programs(tile: Tile, spec: GemmSpec) -> int:
    return math.ceil(spec.m / tile[0]) * math.ceil(spec.n / tile[1])


# Where the table's tile leaves most SMs idle (a GPT block at an editor's sizes: 512 x 256 outputs at 128 x 64
# is 16 programs on 132 SMs), a tuning run also tries smaller tiles: more programs, each a shorter loop's worth
# of latency. Each halves a side of the last until the grid fills the GPU or the tile is 32 x 32.
FILL_SMS = 132


def _fill_tiles(tile: Tile, spec: GemmSpec) -> list[Tile]:
    if spec.reduces_rows:
        return []
    out: list[Tile] = []
    bm, bn = tile[0], tile[1]
    while _programs([bm, bn], spec) < FILL_SMS and max(bm, bn) > 32:
        if bm >= bn:
            bm //= 2
        else:
            bn //= 2
        warps = 4 if bm * bn >= 64 * 64 else 2
        out.append([bm, bn, tile[2], tile[3], warps, tile[5]])
    return out


def candidates(spec: GemmSpec) -> list[Tile]:
    """Distinct tiles to time for ``spec``, the table's first."""
    out: list[Tile] = []
    for tile in [table_tile(spec)] + CANDIDATES[dtype_class(spec)] + _fill_tiles(_class_tile(spec), spec):
        t = fit(tile, spec)
        if len(spec.accs) > 1:
            t = fit([t[0], max(16, t[1] // 2)] + t[2:], spec) if t[0] * t[1] > 128 * 128 else t
        if t not in out:
            out.append(t)
    for t in list(out[:3]) + [t for t in out[3:] if t[:2] == [128, 128] and t[5] == 3]:
        p = _persistent(t, spec)
        if p is not None and p not in out:
            out.append(p)
    return out


def epilogue_key(spec: GemmSpec) -> str:
    """What the epilogue computes (ops, operands' shapes and dtypes, outputs), not what it is named."""
    rename: dict[str, str] = {}

    def name(x: str) -> str:
        return rename.setdefault(x, f"v{len(rename)}")

    for n in spec.inputs():
        name(n)
    parts = [[a.b_trans, a.offset, bool(a.bias), a.bias_shape, a.alpha, a.beta] for a in spec.accs]
    for e in spec.epilogue:
        parts.append([e.op, e.kwargs_json, e.shape, e.dtype, _renamed(e.args_json, name)])
    parts.append([[r.shape, r.dtype] for _, r in sorted(spec.reads.items(), key=lambda kv: name(kv[0]))])
    parts.append([[s, d] for s, d in zip(spec.output_shapes, spec.output_dtypes)])
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def _renamed(args_json: str, name: Callable[[str], str]) -> str:
    def walk(v):
        if isinstance(v, dict) and "$" in v:
            return {"$": name(v["$"])}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        return v

    return json.dumps(walk(json.loads(args_json)))


def problem_key(spec: GemmSpec, gpu: str) -> str:
    """The cache key: GPU, shape, dtype and precision, accumulators and transposes, epilogue."""
    trans = "".join("T" if a.b_trans else "N" for a in spec.accs)
    return (f"{gpu}|{spec.m}x{spec.n}x{spec.k}|{spec.dtype}|{spec.precision or 'one-pass'}"
            f"|{'T' if spec.a_trans else 'N'}{trans}|{epilogue_key(spec)}")


@define
class TileEntry:
    tile: Tile
    kernel_us: float
    gpu: str
    measured: dict[str, float] = field(factory=dict)  # "BMxBNxBK/GROUP_M/warps/stages" -> median µs
    library_us: float | None = None  # cuBLAS through torch for the same GEMM(s), no epilogue
    when: float = 0.0


class TileCache:
    """``.stitch/gemm_tiles.json`` in a workspace: measured tiles by problem key."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._entries: dict[str, TileEntry] | None = None

    @classmethod
    def in_workspace(cls, root: Path | str) -> "TileCache":
        return cls(Path(root) / ".stitch" / CACHE_FILE)

    def entries(self) -> dict[str, TileEntry]:
        if self._entries is None:
            self._entries = {}
            if self.path is not None:
                try:
                    data = json.loads(self.path.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    data = {}
                if data.get("version") == CACHE_VERSION:
                    for key, raw in data.get("entries", {}).items():
                        try:
                            self._entries[key] = TileEntry(**raw)
                        except TypeError:
                            continue  # written by another version: measured again on the next tuning run
        return self._entries

    def get(self, key: str) -> TileEntry | None:
        return self.entries().get(key)

    def put(self, key: str, entry: TileEntry) -> None:
        entries = self.entries()
        entries[key] = entry
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"version": CACHE_VERSION, "entries": {k: {
            "tile": e.tile, "kernel_us": e.kernel_us, "gpu": e.gpu, "measured": e.measured,
            "library_us": e.library_us, "when": e.when} for k, e in sorted(entries.items())}}
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(tmp, self.path)


@define
class GemmOptions:
    """How the template Coder treats GEMMs.

    ``mode``: "auto" (the family takes fp32 GEMMs, where 3xTF32 beats cuBLAS's fp32 GEMM unless a
    tuning run measured otherwise; half-precision ones only where a tuning run measured the fused
    kernel faster than cuBLAS plus the epilogue's own pass, and the epilogue is one cuBLASLt cannot
    fuse), "triton" (every GEMM it can take), "cublas" (none: GEMMs stay on cuBLAS through torch).
    """

    mode: str = "auto"
    gpu: str = ""
    cache: TileCache | None = None
    # Below this many FLOPs a GEMM stays on cuBLAS: a Triton launch costs more host time than it saves.
    min_flops: float = 2e8

    def choose(self, spec: GemmSpec) -> GemmSpec | None:
        if self.mode == "cublas":
            return None
        entry = self.cache.get(problem_key(spec, self.gpu)) if self.cache is not None and self.gpu else None
        if self.mode == "auto":
            if spec.flops < self.min_flops:
                return None
            if spec.dtype != "float32":
                # On an H100 the family's one-pass bf16 GEMM ran at 85-95% of cuBLAS's speed: its fused
                # epilogue wins only where it saves more than that, which only a measurement tells.
                if not _lt_cannot_fuse(spec) or entry is None or entry.library_us is None:
                    return None
                if entry.kernel_us > entry.library_us + tail_us(spec):
                    return None
            elif entry is not None and entry.library_us is not None and entry.kernel_us > entry.library_us:
                return None  # measured: cuBLAS alone was faster than the fused kernel
        if entry is not None:
            return evolve(spec, tile=list(entry.tile), tile_source="cache")
        return evolve(spec, tile=table_tile(spec), tile_source="table")


COPY_GBS = 3000.0  # H100 device-to-device copy (DESIGN.md), for the epilogue pass cuBLAS would need after it


def tail_us(spec: GemmSpec) -> float:
    """What the epilogue's own pass would cost after a cuBLAS GEMM: read its output, read what it loads,
    write its results, at the copy bandwidth."""
    size = {"float32": 4, "bfloat16": 2, "float16": 2}.get(spec.dtype, 4)
    moved = spec.m * spec.n * size * len(spec.accs)
    moved += sum(math.prod(r.shape) * size for r in spec.reads.values())
    moved += sum(math.prod(s) * size for s in spec.output_shapes)
    return moved / (COPY_GBS * 1e3)


# cuBLASLt's own epilogues (torch._addmm_activation): bias + ReLU, bias + tanh-GELU; a bare GEMM or a bias.
_LT_OPS = {"aten.relu.default", "aten.gelu.default"}


def _lt_cannot_fuse(spec: GemmSpec) -> bool:
    """The epilogue holds something cuBLAS(Lt) cannot apply itself, so a half-precision GEMM gains from
    the family (it has no 3xTF32 speed-up to offer there)."""
    if len(spec.accs) > 1 or spec.reads:
        return True
    ops = [e for e in spec.epilogue if e.op != "aten._to_copy.default"]
    if not ops:
        return False
    if len(ops) == 1 and ops[0].op in _LT_OPS:
        kw = json.loads(ops[0].kwargs_json)
        return ops[0].op == "aten.gelu.default" and kw.get("approximate", "none") != "tanh"
    return True


def record(reply: TuneReply, cache: TileCache, gpu: str) -> list[str]:
    """Keep each problem's fastest tile; lines saying what was measured."""
    lines = []
    for result in reply.results:
        if not result.best:
            lines.append(f"{result.key}: no tile ran ({'; '.join(sorted(set(result.errors.values())))[:200]})")
            continue
        cache.put(result.key, TileEntry(tile=list(result.best), kernel_us=float(result.best_us or 0.0), gpu=gpu,
                                        measured=dict(result.timings_us), library_us=result.library_us,
                                        when=stamp()))
        lib = f", cuBLAS alone {result.library_us:.0f} µs" if result.library_us is not None else ""
        lines.append(f"{result.key.split('|', 1)[1]}: {tile_label(result.best)} {result.best_us:.0f} µs{lib}")
    return lines


def mode_override(mode: str) -> str:
    """``STITCH_GEMM`` (auto | triton | cublas), where set, over the settings' mode: for benchmarks."""
    return os.environ.get("STITCH_GEMM") or mode


def default_options() -> GemmOptions:
    """Without a workspace: the table's tiles, mode "auto" (or ``STITCH_GEMM``)."""
    return GemmOptions(mode=mode_override("auto"))


def stamp() -> float:
    return time.time()
