"""Reduction kernels: a group whose reductions share one domain (``reduction_domain``), with the
pointwise work before and after them, as one kernel (or, for a few long rows, a few).

Four shapes, chosen by where the rows lie and how many there are:

* Along the row (``rows`` and ``runs`` layouts: the innermost dimension is reduced): a warp or
  part of a block per row (``row_config``), threads stepping along the row's elements in 16-byte
  chunks. The row is held in registers, so softmax / LayerNorm / RMSNorm and whatever comes
  before and after them read each input once and write each output once; rows too long for
  registers are streamed (statistics in one pass, outputs in a second that walks the row
  backwards to find it in L2). Reductions that do not depend on one another share a pass and a
  barrier; a mean and the variance around it are one pass (per-thread sums around the thread's
  own first value, merged with Chan's formula as offsets from the row's first value). In the
  ``runs`` layout (BatchNorm's N x HW per channel) an element's address comes from the domain's
  index map; chunks stay inside one contiguous run.
* Split rows (fewer rows than SMs, each long: LayerNorm over a whole image, BatchNorm's channels,
  a loss summed to one number): each row is cut into parts, one block a part. One kernel per
  pass writes each part's partial results (sums, maxima, (count, mean, M2) triples); the last
  kernel folds them into the row's values and writes the outputs, walking the parts in reverse
  so the first blocks find the last-read parts in L2.
* Rows too long for a cluster or a team of blocks to hold, whose one pass feeds full outputs (GroupNorm over
  groups of megabytes): ``lagged_kernels``, every SM streaming tiles and writing a tile's outputs a few steps
  after its statistics, from a ring in shared memory.
* Across columns (``columns`` layout: the innermost dimension is kept, as in a softmax over the
  channels of NCHW or BatchNorm over a GEMM's batch): a warp takes 32 neighbouring rows, so every
  load is coalesced, and each row's elements are split over ``split`` warps that combine their
  partial results in shared memory; every pass, and the outputs, loop over the row again (from
  L1 / L2).

Everything reduces in fp32. Shapes are the Task's (concrete): sizes are compile-time constants. Which
shape a group takes is ``reductions.reduction_kernels``' choice (it reads this module's figures).

This module holds the shapes and their figures (how many threads a row, when to split a row, a cluster or a
team of blocks); the kernels themselves are in ``rows/`` (the row kernel and its roles, the column kernel),
which read the figures through this module, so a sweep or a test that sets one steers them too.
"""

from __future__ import annotations

import math

from attrs import define

MAX_ROW_ELEMS = 32  # per thread, held in registers
SUBWARP_MIN = 4  # threads of a row, at the fewest (rows of a few chunks share a warp)
CHUNKS_PER_THREAD = 4  # 16-byte chunks a row kernel's thread holds, where the row is long enough
SMS = 132  # the H100's; the split and column shapes aim to fill this many SMs
SPLIT_THREADS = 512  # threads of a block that takes one part of a split row
SPLIT_BLOCKS = 2 * 4 * SMS  # about two waves of split blocks (four 512-thread blocks an SM)
SPLIT_MIN_ELEMS = 1 << 20  # below this a split row's extra launches cost more than they win
# A split row reduced to values alone (a loss, a norm's statistics with no outputs to write): its blocks take
# the row's chunks in turn (block b the chunks b, b + parts, ...), so the GPU sweeps the row front to back
# together instead of each block streaming a region of its own.
SPLIT_INTERLEAVE = True
# Threads of each block of a cluster that holds a row, tried in order: 512-thread blocks with 64 registers fit
# two to an SM, so one block's loads run while the other combines its totals or stores (measured on an H100:
# KernelBench's L2 norm of rows of 65535 at 86% of the copy bandwidth, 80% with one 1024-thread block an SM).
CLUSTER_THREADS = (512, 1024)
CLUSTER_MAX = 8  # blocks in a cluster (the portable limit)
CLUSTER_ROW_ELEMS = 32  # elements each thread of a cluster's block holds in registers, at most
CLUSTER_REGISTERS = 64  # registers a thread of a cluster's block may take (blocks an SM = 64K / threads / this)
# Rows too long for a cluster's registers (softmax over 393216 values: 48 a thread of 8 blocks of 1024) are held
# in the blocks' shared memory instead, up to this many bytes a block (an H100 SM has 228 KB).
CLUSTER_SHARED_BYTES = 200 * 1024
# Team kernels (``team_for``): a team of TEAM_MAX blocks or fewer, one an SM, takes one row after another, each
# block a part; while it works on a row its part of the team's next row arrives in shared memory (bulk copies,
# double-buffered), so its SM's loads never stop for a barrier or a store. Measured on an H100
# (bench/results/memory_bound_h100/team_h100.md): KernelBench's L2 norm of rows of 65535 at 87-89% of the copy
# bandwidth in teams of 3, against 80-86% for a cluster of four blocks holding the row in registers; teams of 11
# (rows of 1 MB) and 132 (8 MB) ran at 80% and 49-59%, behind the cluster and the split kernels. With 23 to 46
# rows a team (level 2's GroupNorms of 60K) the tasks ran 4-7% slower: each team's first row waits for its
# copy, and teams' row counts differ by one.
TEAM_MAX = 4
TEAM_THREADS = 256  # 256 and 512 within 1-2% (256 ahead); 1024 2-3% behind
TEAM_BUFFERS = 2
TEAM_MIN_ROWS = 64  # rows each team takes, at the fewest
COL_SPLIT_MAX = 32  # warps that share a column's elements
COL_SPLIT_MIN = 8
COL_THREADS = SMS * 2048  # threads that fill an H100
COL_HOLD = True  # a column kernel's thread holds its share in registers where it is at most MAX_ROW_ELEMS


@define
class RowConfig:
    """How a row kernel maps rows to threads."""

    threads: int  # threads per row: a power of two up to 1024 (part of a warp, a warp, part of a block, or all of it)
    block: int  # threads per block, a multiple of ``threads``
    streamed: bool  # loop over the row once per pass (re-read from L2) instead of holding it in registers
    # Ask L2 for the row one wave ahead while this one is reduced (a block that holds a long row in
    # registers is often alone on its SM). Off by default: on an H100 it gained nothing for
    # cross-entropy (32000 bf16) and cost 15% for logsumexp (32000 fp32).
    prefetch: bool = False


def row_config(row_len: int, vec: int, rows: int, inputs: int = 1) -> RowConfig:
    """A warp per row while a lane holds at most 32 values; else part of a block (or all of it).

    With one full-size input a thread holds CHUNKS_PER_THREAD chunks of 16 bytes (bf16
    RMSNorm: 128 threads a 4096 row; logsumexp: 512 a 16384 row); with several, at most 16
    values (each value is then several loads). Both measured on an H100 (bench/row_kernel_sweep.py).
    Rows that need more than 32 values a thread at 1024 threads are streamed: statistics
    in one pass, outputs in a second that reads the row back (mostly from L2).
    """
    chunks = math.ceil(row_len / vec)
    if math.ceil(chunks / 32) * vec <= MAX_ROW_ELEMS:
        # Rows of fewer than 32 chunks share a warp (a minimum over 64 channels: 16 threads a row), so that
        # every lane loads: a warp a row left half the lanes idle and half the bytes a warp could have in flight.
        rt = 32
        while rt > SUBWARP_MIN and rt // 2 >= chunks:
            rt //= 2
        return RowConfig(rt, 256, False)
    rt = 64
    if inputs <= 1:
        while rt < 1024 and math.ceil(chunks / rt) > CHUNKS_PER_THREAD:
            rt *= 2
    else:
        while rt < 1024 and math.ceil(chunks / rt) * vec > 16:
            rt *= 2
    streamed = math.ceil(chunks / rt) * vec > MAX_ROW_ELEMS
    return RowConfig(rt, max(rt, 256), streamed)


@define
class Split:
    """A row cut into ``parts`` of ``chunk`` elements, a block each (``chunk`` a multiple of VEC)."""

    parts: int
    chunk: int
    threads: int = SPLIT_THREADS
    shared: bool = False  # a cluster's blocks hold their parts in shared memory (else in registers)
    team: bool = False  # a team kernel's parts (``team_for``)


def split_for(rows: int, row_len: int, vec: int, blocks: int, *, passes: int = 1, full_outputs: bool = True,
              streamed: bool = False, threads: int = SPLIT_THREADS) -> Split | None:
    """Parts per row when the unsplit kernel's ``blocks`` blocks leave so many SMs idle that reading the rows
    once more (each pass reads them, then the outputs' pass) costs less.

    Counted in full passes over the data: unsplit, a row held in registers is read once, a streamed one once
    per pass and once more for the outputs, and that at the share of SMs its blocks occupy; split, every pass
    reads it and the outputs read it once more, with every SM busy.
    """
    if blocks >= SMS or rows * row_len < SPLIT_MIN_ELEMS:
        return None
    unsplit = (passes + full_outputs if streamed else 1) + full_outputs
    split_cost = passes + 2 * full_outputs
    if split_cost >= 0.9 * unsplit * SMS / max(blocks, 1):
        return None
    # Each part at least four 16-byte chunks a thread, so a block's fixed costs stay small.
    most = max(1, row_len // (4 * threads * vec))
    parts = min(most, math.ceil(SPLIT_BLOCKS / rows))
    if parts < 2:
        return None
    chunk = math.ceil(math.ceil(row_len / parts) / vec) * vec
    parts = math.ceil(row_len / chunk)
    return Split(parts, chunk, threads) if parts >= 2 else None


def cluster_for(rows: int, row_len: int, vec: int, *, passes: int = 1, full_outputs: bool = True,
                blocks: int = 0, streamed: bool = True, threads: int | None = None,
                elem_bytes: int = 0) -> Split | None:
    """A cluster of 2 to 8 blocks per row where one block cannot hold a row in registers but a cluster can,
    and reading the row once (every block of the cluster holding its part) costs less than the unsplit
    kernel's passes over it, counted as in ``split_for``. Rows too long for the cluster's registers are held
    in its blocks' shared memory where ``elem_bytes`` (an element's bytes over the full-size inputs) of a
    part fit in CLUSTER_SHARED_BYTES."""
    if not streamed:
        return None
    def chunk_of(parts: int) -> int:
        return math.ceil(math.ceil(row_len / parts) / vec) * vec

    # The first block size (in CLUSTER_THREADS' order) whose threads each hold at most CLUSTER_ROW_ELEMS of a part.
    sizes = [(t, parts) for t in ((threads,) if threads else CLUSTER_THREADS) for parts in (2, 4, CLUSTER_MAX)]
    fits = [(t, parts) for t, parts in sizes if math.ceil(chunk_of(parts) / vec / t) * vec <= CLUSTER_ROW_ELEMS]
    shared = not fits
    if shared:
        # Every thread's chunks of every full-size input, in shared memory.
        fits = [(t, parts) for t, parts in sizes if elem_bytes
                and math.ceil(chunk_of(parts) / vec / t) * vec * t * elem_bytes <= CLUSTER_SHARED_BYTES]
    if not fits:
        return None
    threads, parts = fits[-1] if shared else fits[0]
    chunk = chunk_of(parts)
    unsplit = (passes + full_outputs + full_outputs) * SMS / max(1, min(blocks, SMS))
    cluster = (1 + full_outputs) * SMS / max(1, min(rows * parts, SMS))
    if cluster >= 0.9 * unsplit:
        return None
    return Split(math.ceil(row_len / chunk), chunk, threads, shared=shared)


def stage_floats(chunk: int) -> int:
    """Floats of shared memory that stage a part of ``chunk`` fp32 elements: the 16-byte aligned span around it
    (up to 3 elements before, 3 after), in whole 16-byte words."""
    return (chunk + 8 + 3) // 4 * 4


def team_for(rows: int, row_len: int, vec: int, *, leaves: int, streamed: bool) -> Split | None:
    """A team of 2 to TEAM_MAX blocks per row (``_RowKernel`` role ``team``) where one block cannot hold a row in
    registers, and the fewest parts that double-buffer ``leaves`` fp32 full-size inputs in CLUSTER_SHARED_BYTES
    of shared memory are at most TEAM_MAX; with at least TEAM_MIN_ROWS rows for each team (one an SM's worth of
    blocks) to take in turn."""
    if not streamed or leaves < 1:
        return None
    for parts in range(2, TEAM_MAX + 1):
        chunk = math.ceil(math.ceil(row_len / parts) / vec) * vec
        if TEAM_BUFFERS * leaves * 4 * stage_floats(chunk) <= CLUSTER_SHARED_BYTES:
            break
    else:
        return None
    parts = math.ceil(row_len / chunk)
    if parts < 2 or rows < TEAM_MIN_ROWS * (SMS // parts):
        return None
    return Split(parts, chunk, TEAM_THREADS, team=True)
