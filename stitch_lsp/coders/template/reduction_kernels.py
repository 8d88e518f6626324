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
"""

from __future__ import annotations

import math
import re

from attrs import define, field

from stitch_lsp.plan import op_table
from stitch_lsp.plan.fusion import Group, domain, reduction_dims
from stitch_lsp.plan.reduction_domain import Domain
from stitch_lsp.coders.template.cuda_common import PREAMBLE
from stitch_lsp.coders.template.emitter import Emitter, Unsupported, _round_to as _round
from stitch_lsp.coders.template.kernels import KernelSpec, _c_type, _finish, _vec_for, _Writer
from stitch_lsp.op_graph import OpNode

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

_IDENTITY = {"sum": "0.f", "mean": "0.f", "gather": "0.f", "max": "__int_as_float(0xff800000)",
             "min": "__int_as_float(0x7f800000)", "prod": "1.f", "argmax": "__int_as_float(0xff800000)",
             "argmin": "__int_as_float(0x7f800000)"}
_COMBINE = {"sum": "({a} + {b})", "mean": "({a} + {b})", "gather": "({a} + {b})", "max": "stitch_max_nan({a}, {b})",
            "min": "stitch_min_nan({a}, {b})", "prod": "({a} * {b})"}
_ARG_MERGE = {"argmax": "stitch_argmax_merge", "argmin": "stitch_argmin_merge"}
_NO_POS = "2147483647"  # the position an empty argmax holds (any real one wins a tie against it)


class _RowEmitter(Emitter):
    """An Emitter that remembers which variables hold one value per row (they are loop-invariant)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.row_vars: set[str] = set()

    def value(self, name: str, ix: str) -> str:
        out = super().value(name, ix)
        if ix == "row":
            self.row_vars.add(out)
        return out


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


def _variance_pairs(reductions: list[str], index: dict[str, OpNode]) -> dict[str, str]:
    """``{r2: r1}`` where r1 = mean(s) and r2 = mean or sum of (s - r1)^2 over the same rows.

    Such a pair is computed in one pass, as (count, mean, M2) per thread merged across the row.
    """
    def ref(arg) -> str | None:
        return arg["$"] if isinstance(arg, dict) and "$" in arg else None

    def through_views(name: str | None) -> str | None:
        while name is not None:
            node = index[name]
            if node.op in ("aten.view.default", "aten.reshape.default", "aten.alias.default",
                           "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims") and \
                    index[ref(node.args[0])].numel == node.numel:
                name = ref(node.args[0])
                continue
            return name
        return None

    pairs: dict[str, str] = {}
    for r2 in reductions:
        n2 = index[r2]
        if op_table.REDUCTION_OPS.get(n2.op) not in ("sum", "mean"):
            continue
        _, sq = reduction_dims(n2, index)
        if sq.op == "aten.mul.Tensor" and ref(sq.args[0]) and ref(sq.args[0]) == ref(sq.args[1]):
            diff = index[ref(sq.args[0])]
        elif sq.op == "aten.pow.Tensor_Scalar" and ref(sq.args[0]) and sq.args[1] == 2:
            diff = index[ref(sq.args[0])]
        else:
            continue
        if diff.op != "aten.sub.Tensor" or len(diff.args) > 2 or diff.kwargs.get("alpha", 1) != 1:
            continue
        r1 = through_views(ref(diff.args[1]))
        if r1 not in reductions or r1 in pairs or op_table.REDUCTION_OPS.get(index[r1].op) != "mean":
            continue
        dims1, src1 = reduction_dims(index[r1], index)
        dims2, _ = reduction_dims(n2, index)
        if src1.name != ref(diff.args[0]) or dims1 != dims2 or src1.shape != sq.shape or index[r1].dtype != "float32":
            continue
        pairs[r2] = r1
    return pairs


@define
class _Analysis:
    """What every shape of reduction kernel needs to know about a group."""

    reductions: list[str]
    dom: Domain
    depends: dict[str, set[str]]
    row_nodes: set[str]
    full_outs: list[str]
    row_outs: list[str]
    passes: list[list[str]]
    var_of: dict[str, str]  # r1 (mean) -> r2 (variance around it)
    full_leaves: list[str] = field(factory=list)


def analyse(group: Group, index: dict[str, OpNode]) -> _Analysis:
    members = set(group.nodes)
    reductions = [n for n in group.nodes if op_table.classify(index[n].op, index[n].dtype) == "reduction"]
    if not reductions:
        raise Unsupported("no reduction in the group")
    dom = domain(index[reductions[0]], index)
    for r in reductions:
        d = domain(index[r], index)
        if d.key() != dom.key():
            raise Unsupported("reductions over different rows in one group")
        _, src = reduction_dims(index[r], index)
        if src.name not in members and src.name not in group.inputs:
            raise Unsupported("reduction of a value outside the group")
        exact_ints = op_table.REDUCTION_OPS[index[r].op] in op_table.INDEX_REDUCTIONS or index[r].dtype in ("int64", "int32")
        if exact_ints and dom.row_len >= 1 << 24:
            raise Unsupported("a position or a count over rows of 2**24 elements or more (fp32 counts exactly below)")
    rows, numel = dom.rows, dom.numel
    depends: dict[str, set[str]] = {}  # member -> the reductions it depends on
    for n in group.nodes:
        node = index[n]
        deps = set().union(*(depends.get(r, set()) for r in node.refs()))
        if n in reductions:
            deps = deps | {n}
        if deps:
            depends[n] = deps
    row_nodes = set()
    for n in group.nodes:
        if n in depends and index[n].numel != numel:
            if index[n].numel != rows:
                raise Unsupported(f"{n} has {index[n].numel} elements: neither a row nor a row value")
            row_nodes.add(n)
    for o in group.outputs:
        if index[o].numel not in (numel, rows) or (index[o].numel == rows and o not in row_nodes and rows != numel):
            raise Unsupported(f"output {o} is neither a full tensor nor one value per row")
    full_outs = [o for o in group.outputs if o not in row_nodes]
    row_outs = [o for o in group.outputs if o in row_nodes]
    # Passes: reductions that do not depend on one another share a pass (one loop over a streamed
    # row, one barrier); a mean and the variance around it share one as well.
    pairs = _variance_pairs(reductions, index)
    passes: list[list[str]] = []
    for r in reductions:
        if r in pairs:
            continue
        deps = depends.get(r, set()) - {r}
        # A reduction's value may feed another's source only through a later pass.
        if passes and not any(d in passes[-1] or pairs.get(d) in passes[-1] for d in deps):
            passes[-1].append(r)
        else:
            passes.append([r])
    var_of = {r1: r2 for r2, r1 in pairs.items()}
    full_leaves = [l for l in group.inputs if index[l].numel == numel]
    return _Analysis(reductions, dom, depends, row_nodes, full_outs, row_outs, passes, var_of, full_leaves)


def _partials(rpass: list[str], moments: dict, poss: dict, first: int = 0):
    """Each reduction of a pass with the offset of its partial results and their form: ``moments`` (count, mean,
    M2), ``position`` (value, position as float bits) or ``value``, packed in pass order from ``first``."""
    k = first
    for r in rpass:
        form = "moments" if r in moments else "position" if r in poss else "value"
        yield r, k, form
        k += {"moments": 3, "position": 2, "value": 1}[form]


def _slots(a: _Analysis, index: dict[str, OpNode], r: str) -> int:
    """Partial-result floats a reduction takes: a (count, mean, M2) triple, a (value, position) pair, or one."""
    if r in a.var_of:
        return 3
    return 2 if op_table.REDUCTION_OPS[index[r].op] in op_table.INDEX_REDUCTIONS else 1


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


def _row_vec(a: _Analysis, index: dict[str, OpNode]) -> int:
    identity = [index[l].dtype for l in a.full_leaves] + [index[o].dtype for o in a.full_outs]
    # A chunk stays in one contiguous run of the row (the whole row in the rows layout).
    return _vec_for(identity or ["float32"], a.dom.run if a.dom.layout == "runs" else a.dom.row_len)


class _RowKernel:
    """One kernel that walks rows along their elements.

    ``role``: ``whole`` (the group in one kernel), ``partials`` (split rows: pass ``upto`` over one part,
    its partial results written; earlier passes folded from their partials) or ``finish`` (split rows:
    every pass folded from its partials, then the outputs of one part).
    """

    def __init__(self, group: Group, index: dict[str, OpNode], name: str, a: _Analysis,
                 config: RowConfig | None = None, split: Split | None = None, role: str = "whole",
                 upto: int = 0) -> None:
        self.group, self.index, self.name, self.a = group, index, name, a
        self.split, self.role, self.upto = split, role, upto
        self.interleaved = False  # see SPLIT_INTERLEAVE; decided in build()
        self.base = re.sub(r"_p\d+$", "", name)
        w = self.w = _Writer(group, index, name, emitter=_RowEmitter)
        dom = a.dom
        w.domain = dom.numel
        w.vec = _row_vec(a, index)
        self.vec = w.vec
        self.nch = dom.row_len // self.vec  # chunks of VEC per row (VEC divides the row)
        if split is not None:
            # A cluster's blocks hold their parts in registers; split kernels walk theirs.
            cfg = RowConfig(split.threads, split.threads, role != "cluster")
        else:
            cfg = config or row_config(dom.row_len, self.vec, dom.rows, len(a.full_leaves))
        if cfg.threads < 1 or cfg.threads & (cfg.threads - 1) or cfg.block % cfg.threads or cfg.block > 1024:
            raise ValueError(f"bad row config {cfg}")
        self.cfg = cfg
        # Passes computed from elements here, and those folded from partial results written before.
        if role in ("whole", "cluster", "team"):
            self.folded, self.counted = [], list(range(len(a.passes)))
        elif role == "partials":
            self.folded, self.counted = list(range(upto)), [upto]
        else:
            self.folded, self.counted = list(range(len(a.passes))), []

    # -- names of the buffers that carry partial results between the kernels of a split row ------

    def ws(self, p: int) -> str:
        return f"{self.base}_ws{p}"

    def ws_slots(self, p: int) -> int:
        return sum(_slots(self.a, self.index, r) for r in self.a.passes[p])

    # -- the kernel -------------------------------------------------------------------------------

    def build(self) -> KernelSpec:
        a, index, w, group = self.a, self.index, self.w, self.group
        dom, vec = a.dom, self.vec
        rows, row_len = dom.rows, dom.row_len
        rt, block = self.cfg.threads, self.cfg.block
        split = self.split
        looped = self.cfg.streamed
        chunk = split.chunk if split else row_len
        items = math.ceil(math.ceil(chunk / vec) / rt)
        rows_per_block = block // rt
        partial = rows_per_block > 1 and rows % rows_per_block != 0  # the last block has rows past the end
        em = self.em = _reduction_emitter(w, a, group, index, indexed_rows=dom.layout != "rows")
        held = self.role == "cluster" and split.shared
        if held:
            w.held, w.held_threads = "stitch_held", block
        em.emit(f"const int lane = threadIdx.x % {rt};")
        if self.role == "team":
            em.emit(f"const int part = (int)(blockIdx.x % {split.parts});")
            em.emit(f"const int jbeg = part * {split.chunk};")
            em.emit(f"const int jn = min({split.chunk}, {row_len} - jbeg);")
        elif split is not None:
            # The finish kernel takes the parts in reverse: the first blocks find the last-read parts in L2.
            # Without full outputs it writes one value per row: a block per row, as its first part.
            if self.role != "finish":
                vrow = "(long long)blockIdx.x"
            elif a.full_outs:
                vrow = "(long long)(gridDim.x - 1 - blockIdx.x)"
            else:
                vrow = f"(long long)blockIdx.x * {split.parts}"
            em.emit(f"const long long vrow = {vrow};")
            em.emit(f"const long long row = vrow / {split.parts};")
            em.emit(f"const int part = (int)(vrow % {split.parts});")
            em.emit(f"const int jbeg = part * {split.chunk};")
            em.emit(f"const int jn = min({split.chunk}, {row_len} - jbeg);")
        elif rows_per_block > 1:
            em.emit(f"const long long row0 = (long long)blockIdx.x * {rows_per_block} + threadIdx.x / {rt};")
            if partial:
                # Threads past the last row work on the last row (they take part in barriers) and store nothing.
                em.emit(f"const bool live = row0 < {rows}LL;")
                em.emit(f"const long long row = live ? row0 : {rows - 1}LL;")
            else:
                em.emit("const long long row = row0;")
        else:
            em.emit("const long long row = (long long)blockIdx.x;")
        if dom.layout == "rows" and self.role != "team":  # a team kernel names its rows in its loop
            em.emit(f"const long long rbase = row * {row_len}LL;")
        self.prefixes, self.guards, self.positions = [], [], []
        jn = "jn" if split else str(row_len)
        # Interleaved parts (SPLIT_INTERLEAVE): only where the pass's partial results do not depend on which
        # elements a part holds beyond their values (sums, maxima: no counts, no positions, no outputs).
        self.interleaved = (SPLIT_INTERLEAVE and split is not None and self.role == "partials" and looped
                            and not a.full_outs and not a.var_of
                            and not any(op_table.REDUCTION_OPS[index[r].op] in op_table.INDEX_REDUCTIONS
                                        or op_table.REDUCTION_OPS[index[r].op] == "gather" for r in a.reductions))
        if self.interleaved:
            items = math.ceil(math.ceil(row_len / vec) / (split.parts * rt))
            if items * split.parts * rt * vec >= 2 ** 31:
                self.interleaved = False
                items = math.ceil(math.ceil(chunk / vec) / rt)
            else:
                jn = str(row_len)
        self.items, self.jn = items, jn

        if not looped:
            whole_parts = split is None or split.parts * split.chunk == row_len
            for k in range(items):
                if split is None:
                    exact = (k + 1) * rt <= self.nch
                else:
                    exact = whole_parts and (k + 1) * rt * vec <= split.chunk
                guard = "" if exact else f"j{k} < {jn}"
                em.emit(f"const int j{k} = ({k * rt} + lane) * {vec};")
                self.prefixes.append(w.declare_chunk(k, self.element(f"({guard} ? j{k} : 0)" if guard else f"j{k}")))
                self.guards.append(guard)
                self.positions.append(f"j{k}")
            if self.cfg.prefetch and a.full_leaves and dom.layout == "rows":
                em.emit(f"const int pf = stitch_nsm() * {rows_per_block};  // rows one wave ahead")
                em.emit(f"if (row + pf < {rows}LL) {{")
                for leaf in a.full_leaves:
                    for k in range(items):
                        em.emit(f"  stitch_prefetch_l2({w.param_of[leaf]} + c{k} + (long long)pf * {row_len}LL);")
                em.emit("}")

        slots = sum(1 + 2 * (r in a.var_of) + (op_table.REDUCTION_OPS[index[r].op] in op_table.INDEX_REDUCTIONS)
                    for p in a.passes for r in p)
        self.warps_per_row = rt // 32
        if self.warps_per_row > 1:
            em.emit(f"__shared__ float red[{max(slots, 1)}][{block // 32}];")
            em.emit(f"__shared__ int redi[{max(slots, 1)}][{block // 32}];")
        if self.role == "cluster":
            # Each block's share of the row's values, read by the cluster's other blocks.
            em.emit(f"__shared__ float cx[{max(slots, 1)}];")
            em.emit(f"__shared__ float cxf[{max(slots, 1)}];  // the cluster's totals, folded")
            em.emit("stitch_cluster_bind(cx);")
        self.slot = 0
        nch = self.nch
        if split is not None:
            em.emit(f"const int nchk = jn / {vec};")
            self.cnt = f"(float)(lane < nchk ? ((nchk - 1 - lane) / {rt} + 1) * {vec} : 0)"
        elif nch % rt == 0:
            self.cnt = f"{items * vec}.f"
        else:
            self.cnt = f"(float)(lane < {nch} ? (({nch - 1} - lane) / {rt} + 1) * {vec} : 0)"

        if self.role == "team":
            self.open_rows()
        for p, rpass in enumerate(a.passes):
            if p in self.folded:
                self.fold_pass(p, rpass)
            elif p in self.counted:
                self.count_pass(p, rpass, looped)
        stores: list[str] = []
        if self.role == "partials":
            body = em.lines
        else:
            if self.role == "team":
                self.hoist_row_values()
            if looped:
                self.open_loop(reverse=True)
                self.prefixes, self.guards = ["e0_"], [""]
            group_outputs = group.outputs
            group.outputs = a.full_outs
            for k, prefix in enumerate(self.prefixes):
                stores += w.store(k, prefix, self.guards[k])
            group.outputs = group_outputs
            # Full outputs keep their positions in the parameter list; re-map store targets.
            stores = [_retarget(s, a.full_outs, group.outputs) for s in stores]
            if partial and stores:
                stores = ["if (live) {"] + ["  " + s for s in stores] + ["}"]
            if looped:
                em.lines += [em.indent + s for s in stores]
                stores = []
                self.close_loop()
            for o in a.row_outs:
                val = em.value(o, "row")
                o_idx = group.outputs.index(o)
                cond = "lane == 0" + (" && live" if partial else "") + (" && part == 0" if split else "")
                stores.append(f"if ({cond}) out{o_idx}[row] = stitch_from_float<{_c_type(index[o].dtype)}>({val});")
            body = em.lines
        if self.role == "cluster":
            stores.append("stitch_cluster_sync();  // no block leaves while another may read its shared memory")
        team = self.role == "team"
        if team:
            stores = ["  " + s for s in stores] + ["  __syncthreads();  // this buffer is free for the row after next",
                                                 "}"]
        body = _row_reciprocals(body, em.row_vars, "    " if team else "  ") + ["  " + s for s in stores]
        shared = 4 * w.held_slots * vec * block if held else 0
        if held:
            body.insert(0, f"  STITCH_HELD(stitch_held, {shared // 4});  // this block's part of the row")
        if team:
            shared = 4 * TEAM_BUFFERS * len(self.staged) * stage_floats(split.chunk)
            body[:0] = [f"  STITCH_HELD(stitch_stage, {shared // 4});  // this block's parts of two rows",
                        f"  __shared__ stitch_bar_t stitch_bars[{TEAM_BUFFERS}];"]
        params, outputs, scratch = self.parameters()
        cluster = f"__cluster_dims__({split.parts}, 1, 1) " if self.role == "cluster" else ""
        # Blocks of a cluster hold their part in registers: more than one an SM lets one block's loads
        # run while another combines its totals or stores.
        fit = 65536 // (block * CLUSTER_REGISTERS) if self.role == "cluster" else 1
        resident = f", {fit}" if fit > 1 else ""
        src = PREAMBLE + f"""
extern "C" __global__ void {cluster}__launch_bounds__({block}{resident}) {self.name}({self.signature(params, outputs)}) {{
{chr(10).join(body)}
}}
"""
        # exp's fast unit is within 2 ulp + |x| * 2^-24 relative: far inside the fp32 tolerance.
        src = re.sub(r"(?<![\w.])expf\(", "__expf(", src)
        src = _finish(src, group, index)
        if team:
            grid = rows * split.parts  # at most: the launch takes as many teams as the GPU holds at once
        elif split is not None:
            grid = rows * split.parts if self.role in ("partials", "cluster") or a.full_outs else rows
        else:
            grid = math.ceil(rows / rows_per_block)
        how_rows = "a warp" if rt == 32 else f"{rt} threads"
        if team:
            note = (f"{len(group.nodes)} ops, {rows} rows of {row_len}, a team of {split.parts} blocks of {rt} "
                    f"threads per row ({split.chunk} elements a block, staged in shared memory by bulk copies a row "
                    f"ahead: {shared // 1024} KB a block), {vec}-wide, the team's totals combined through global "
                    f"memory")
        elif self.role == "cluster":
            where = f"shared memory ({shared // 1024} KB a block)" if held else "registers"
            note = (f"{len(group.nodes)} ops, {rows} rows of {row_len}" + (f" ({dom.layout})" if dom.layout != "rows" else "")
                    + f", a cluster of {split.parts} blocks of {rt} threads per row holding it in {where}, "
                    f"{vec}-wide, combined through distributed shared memory")
        elif split is not None:
            what = {"partials": f"pass {self.upto + 1} of {len(a.passes)}: partial results of",
                    "finish": "the outputs of"}[self.role]
            note = (f"{len(group.nodes)} ops, {rows} rows of {row_len} ({dom.layout}) split into {split.parts} "
                    f"parts of {split.chunk}, {rt} threads a part, {vec}-wide; {what} each part")
        else:
            note = (f"{len(group.nodes)} ops, {rows} rows of {row_len}"
                    + (f" ({dom.layout})" if dom.layout != "rows" else "")
                    + f", {how_rows} per row, {vec}-wide"
                    + (", streamed (statistics in one pass, outputs in a second)" if looped else ""))
        return KernelSpec(name=self.name, source=src, kind="row_reduction", params=params + outputs,
                          outputs=outputs, grid=grid, block=block, note=note, scratch=scratch, shared=shared,
                          team=split.parts if team else 0, zeroed=[self.sync_name()] if team else [])

    def sync_name(self) -> str:
        return f"{self.base}_sync"

    def open_rows(self) -> None:
        """A team kernel's loop over its rows: each block reads its part of this row where it lies in shared memory
        while the part of the team's next row arrives in the other buffer (bulk copies)."""
        em, w, a, split = self.em, self.w, self.a, self.split
        row_len, rows, parts = a.dom.row_len, a.dom.rows, split.parts
        self.staged = list(a.full_leaves)
        width = self.stage_width = stage_floats(split.chunk)
        n = len(self.staged)
        em.emit(f"const long long teams = gridDim.x / {parts};")
        em.emit(f"if (threadIdx.x == 0) {{ stitch_stage_init(stitch_bars, {TEAM_BUFFERS}, {n}); "
                f"if (blockIdx.x / {parts} < {rows}) {{ {self.stage_copies(f'blockIdx.x / {parts}', '0')} }} }}")
        em.emit("__syncthreads();")
        em.emit("int sit = 0;")
        em.emit(f"for (long long row = blockIdx.x / {parts}; row < {rows}LL; row += teams, ++sit) {{")
        em.indent += "  "
        em.emit("const int sb = sit & 1;")
        em.emit(f"if (threadIdx.x == 0 && row + teams < {rows}LL) {{ {self.stage_copies('row + teams', 'sb ^ 1')} }}")
        em.emit("stitch_stage_wait(&stitch_bars[sb], (sit >> 1) & 1);")
        em.emit(f"const long long vrow = row * {parts} + part;")
        em.emit(f"const long long rbase = row * {row_len}LL;")
        em.emit("const long long pbase = rbase + jbeg;")
        for i, leaf in enumerate(self.staged):
            arr = f"stage{i}"
            em.emit(f"const float* {arr} = stitch_stage + (sb * {n} + {i}) * {width} + "
                    f"stitch_stage_shift({w.param_of[leaf]} + pbase);")
            w.team_stage[leaf] = arr

    def stage_copies(self, row: str, buf: str) -> str:
        """Thread 0's bulk copies of every staged input's part of ``row`` into buffer ``buf``."""
        w, n, row_len = self.w, len(self.staged), self.a.dom.row_len
        return " ".join(f"stitch_stage_row(stitch_stage + (({buf}) * {n} + {i}) * {self.stage_width}, "
                        f"{w.param_of[l]} + ({row}) * {row_len}LL + jbeg, jn, &stitch_bars[{buf}]);"
                        for i, l in enumerate(self.staged))

    def hoist_row_values(self) -> None:
        """The row values the outputs use (a norm's square root, a variance's reciprocal square root), computed
        once per row before the outputs' loop instead of once per element in it; its divisions by them become
        products with a reciprocal (``_row_reciprocals``)."""
        em, a = self.em, self.a
        for n in self.group.nodes:
            if n in a.row_nodes and n not in em.row_values:
                em.row_values[n] = em.value(n, "row")
                em.row_vars.add(em.row_values[n])

    def team_exchange(self, p: int, rpass, accs, moments, poss) -> None:
        """The block's totals of pass ``p`` to the team's buffer, the team's barrier, then every thread folds the
        team's totals, in part order (every block gets the same values)."""
        em, parts = self.em, self.split.parts
        slots = self.ws_slots(p)
        count = f"team_sync + row * {len(self.a.passes)} + {p}"
        em.emit(f"if (threadIdx.x == 0) {{ float* po = ws{p} + vrow * {slots}; "
                + self.stores_of(rpass, accs, moments, poss, lambda k: f"po[{k}]")
                + f" stitch_team_arrive({count}); stitch_team_wait({count}, {parts}); }}")
        em.emit("__syncthreads();")
        self.reset(rpass, accs, moments, poss)
        # Written in this launch by other SMs: read through L2, never L1.
        folds = self.merges(rpass, accs, moments, poss, lambda k: f"__ldcg(pq + {k})")
        em.emit(f"for (int q = 0; q < {parts}; ++q) {{ const float* pq = ws{p} + (row * {parts} + q) * {slots}; "
                + " ".join(folds) + " }")

    def parameters(self) -> tuple[list[str], list[str], dict]:
        """(input names, output names, shapes of the buffers this kernel writes that no graph node names)."""
        params = list(self.w.leaves) + [self.ws(p) for p in self.folded]
        if self.role == "team":
            rows, parts, npass = self.a.dom.rows, self.split.parts, len(self.a.passes)
            scratch = {self.ws(p): ([rows * parts * self.ws_slots(p)], "float32") for p in range(npass)}
            scratch[self.sync_name()] = ([rows * npass], "int32")  # arrivals a row and pass, zeroed each launch
            return params, list(scratch) + list(self.group.outputs), scratch
        if self.role == "partials":
            p = self.upto
            ws = self.ws(p)
            return params, [ws], {ws: ([self.a.dom.rows * self.split.parts * self.ws_slots(p)], "float32")}
        return params, list(self.group.outputs), {}

    def signature(self, params: list[str], outputs: list[str]) -> str:
        w, index = self.w, self.index
        out = [f"const {_c_type(index[l].dtype)}* __restrict__ {w.param_of[l]}" for l in w.leaves]
        out += [f"const float* __restrict__ ws{p}" for p in self.folded]
        if self.role == "team":
            # Written by every block of the team and read by all of them: no read-only (non-coherent) loads.
            out += [f"float* ws{p}" for p in range(len(self.a.passes))] + ["int* team_sync"]
            out += [f"{_c_type(index[o].dtype)}* __restrict__ out{k}" for k, o in enumerate(self.group.outputs)]
        elif self.role == "partials":
            out.append("float* __restrict__ wsout")
        else:
            out += [f"{_c_type(index[o].dtype)}* __restrict__ out{k}" for k, o in enumerate(self.group.outputs)]
        return ", ".join(out)

    def element(self, j: str) -> str:
        """The linear index of the row's element at position ``j`` of this thread's part."""
        pos = f"jbeg + {j}" if self.split and not self.interleaved else j
        if self.a.dom.layout == "rows":
            return f"rbase + {pos}"
        return self.a.dom.element("row", f"({pos})")

    def open_loop(self, reverse: bool = False) -> None:
        em, w = self.em, self.w
        rt, vec, items = self.cfg.threads, self.vec, self.items
        # One chunk of VEC per iteration; the memo is scoped to the loop body.
        em.emit("#pragma unroll 4")
        if reverse:
            # The output pass walks the row backwards: the chunks read last in the statistics pass
            # are the likeliest still in L2.
            em.emit(f"for (int it = {items - 1}; it >= 0; --it) {{")
        else:
            em.emit(f"for (int it = 0; it < {items}; ++it) {{")
        em.indent += "  "
        if self.interleaved:
            em.emit(f"const int j0 = ((it * {self.split.parts} + part) * {rt} + lane) * {vec};")
        else:
            em.emit(f"const int j0 = (it * {rt} + lane) * {vec};")
        if self.split or items * rt > self.nch:
            em.emit(f"if (j0 >= {self.jn}) {'continue' if reverse else 'break'};")
        em.memo = {}
        w.vec_loaded = {}
        w.declare_chunk(0, self.element("j0"))
        self.positions = ["j0"]

    def close_loop(self) -> None:
        em = self.em
        em.indent = em.indent[:-2]
        em.emit("}")
        em.memo = {}
        self.w.vec_loaded = {}

    # -- passes -----------------------------------------------------------------------------------

    def init_pass(self, rpass: list[str]) -> tuple[dict, dict, dict, dict]:
        em, index, a = self.em, self.index, self.a
        accs: dict[str, str] = {}
        moments: dict[str, tuple[str, ...]] = {}  # r1 -> (shift, origin, s1, s2), then (n, mu, m2, origin)
        picks: dict[str, str] = {}
        poss: dict[str, str] = {}  # argmax / argmin -> the position variable
        for r in rpass:
            node = index[r]
            how = op_table.REDUCTION_OPS[node.op]
            acc = accs[r] = em.fresh("acc")
            if how == "gather":
                # Sum of the one element whose position in the row is the index (0 elsewhere): exact.
                picks[r] = em.fresh("pick")
                em.emit(f"const long long {picks[r]} = (long long){em.value(node.args[2]['$'], 'row')};")
            em.emit(f"float {acc} = {_IDENTITY[how]};")
            if how in op_table.INDEX_REDUCTIONS:
                poss[r] = em.fresh("pos")
                em.emit(f"int {poss[r]} = {_NO_POS};")
            if r in a.var_of:
                moments[r] = ()
        return accs, moments, picks, poss

    def count_pass(self, p: int, rpass: list[str], looped: bool) -> None:
        """Pass ``p`` from the row's elements (this thread's share), combined across the row's threads."""
        em, index = self.em, self.index
        accs, moments, picks, poss = self.init_pass(rpass)
        slot = self.slot
        if moments:
            # The one-pass variance sums around the thread's first value (the shift); means travel
            # as offsets from the row's first value (the origin), so merging them loses nothing
            # to a large common offset.
            em.emit(f"const long long kr{slot} = {self.row_origin()};")
            if looped:
                em.emit(f"const long long kq{slot} = {self.element(f'(lane < {self.nchunks()} ? lane * {self.vec} : 0)')};")
        for r in list(moments):
            _, src = reduction_dims(index[r], index)
            shift, origin = em.fresh("shift"), em.fresh("origin")
            if self.role == "team":
                # Loaded first: a team's next row waits on this row's statistics, so the load's latency is better
                # spent under the pass than after it.
                em.emit(f"const float {origin} = {em.value(src.name, f'kr{slot}')};")
                em.memo = {}
            if looped:
                em.emit(f"const float {shift} = {em.value(src.name, f'kq{slot}')};")
                em.memo = {}
            else:
                em.emit(f"const float {shift} = {em.value(src.name, self.prefixes[0] + '0')};")
            s1, s2 = em.fresh("s1_"), em.fresh("s2_")
            em.emit(f"float {s1} = 0.f, {s2} = 0.f;")
            moments[r] = (shift, origin, s1, s2)

        def accumulate(k: int, prefix: str, guard: str) -> None:
            for r, how, src in pass_sources(rpass, index):
                acc = accs[r]
                for v in range(self.vec):
                    ix = f"{prefix}{v}"
                    val = em.value(src.name, ix)
                    pos = self.position(k, v)
                    if r in picks:
                        val = f"({pos} == {picks[r]} ? {val} : 0.f)"
                    if r in poss:
                        call = f"{_ARG_MERGE[how]}({acc}, {poss[r]}, {val}, (int)({pos}));"
                        em.emit(f"if ({guard}) {call}" if guard else call)
                        continue
                    fold_element(em, how, acc, val, guard, moments[r][:1] + moments[r][2:] if r in moments else None)

        if looped:
            self.open_loop()
            accumulate(0, "e0_", "")
            self.close_loop()
        else:
            for k, prefix in enumerate(self.prefixes):
                accumulate(k, prefix, self.guards[k])
        for r in list(moments):
            shift, origin, s1, s2 = moments[r]
            # Loaded here, after the pass, so that it holds no register through the loop.
            _, src = reduction_dims(index[r], index)
            if self.role != "team":
                em.emit(f"const float {origin} = {em.value(src.name, f'kr{slot}')};")
            n_, mu, m2 = em.fresh("n"), em.fresh("mu"), em.fresh("m2_")
            em.emit(f"float {n_}, {mu}, {m2};")
            em.emit(f"stitch_moments_local({self.cnt}, {s1}, {s2}, {shift} - {origin}, {n_}, {mu}, {m2});")
            moments[r] = (n_, mu, m2, origin)
        self.combine(rpass, accs, moments, poss)
        if self.role == "partials":
            self.write_partials(rpass, accs, moments, poss)
        else:
            if self.role == "team":
                self.team_exchange(p, rpass, accs, moments, poss)
            self.finalize(rpass, accs, moments, poss)

    def fold_pass(self, p: int, rpass: list[str]) -> None:
        """Pass ``p``'s row values from the partial results its kernel wrote, one per part."""
        em, index = self.em, self.index
        accs, moments, picks, poss = self.init_pass(rpass)
        rt, parts, slots = self.cfg.threads, self.split.parts, self.ws_slots(p)
        for r in list(moments):
            _, src = reduction_dims(index[r], index)
            n_, mu, m2, origin = em.fresh("n"), em.fresh("mu"), em.fresh("m2_"), em.fresh("origin")
            em.emit(f"float {n_} = 0.f, {mu} = 0.f, {m2} = 0.f;")
            em.emit(f"const float {origin} = {em.value(src.name, self.row_origin())};")
            moments[r] = (n_, mu, m2, origin)
        em.emit(f"for (int q = lane; q < {parts}; q += {rt}) {{")
        em.emit(f"  const float* pq = ws{p} + (row * {parts} + q) * {slots};")
        for line in self.merges(rpass, accs, moments, poss, lambda k: f"pq[{k}]"):
            em.emit("  " + line)
        em.emit("}")
        self.combine(rpass, accs, moments, poss)
        self.finalize(rpass, accs, moments, poss)

    def combine(self, rpass, accs, moments, poss) -> None:
        """Every thread of the row ends with the row's combined value: warp shuffles, then shared memory."""
        em, index = self.em, self.index
        first_slot = self.slot
        slot = first_slot
        shfl = "__shfl_xor_sync(0xffffffffu, {v}, o)"
        top = min(16, self.cfg.threads // 2)  # rows that share a warp exchange within their lanes only
        for r in rpass:
            how = op_table.REDUCTION_OPS[index[r].op]
            acc = accs[r]
            em.emit("#pragma unroll")
            if r in moments:
                n_, mu, m2, _ = moments[r]
                em.emit(f"for (int o = {top}; o > 0; o >>= 1) stitch_moments_merge({n_}, {mu}, {m2}, "
                        f"{shfl.format(v=n_)}, {shfl.format(v=mu)}, {shfl.format(v=m2)});")
                if self.warps_per_row > 1:
                    em.emit(f"if ((threadIdx.x & 31) == 0) {{ red[{slot}][threadIdx.x >> 5] = {n_}; "
                            f"red[{slot + 1}][threadIdx.x >> 5] = {mu}; red[{slot + 2}][threadIdx.x >> 5] = {m2}; }}")
                slot += 3
                continue
            if r in poss:
                em.emit(f"for (int o = {top}; o > 0; o >>= 1) {_ARG_MERGE[how]}({acc}, {poss[r]}, "
                        f"{shfl.format(v=acc)}, {shfl.format(v=poss[r])});")
                if self.warps_per_row > 1:
                    em.emit(f"if ((threadIdx.x & 31) == 0) {{ red[{slot}][threadIdx.x >> 5] = {acc}; "
                            f"redi[{slot}][threadIdx.x >> 5] = {poss[r]}; }}")
                slot += 1
                continue
            em.emit(f"for (int o = {top}; o > 0; o >>= 1) {acc} = {_COMBINE[how].format(a=acc, b=shfl.format(v=acc))};")
            if self.warps_per_row > 1:
                em.emit(f"if ((threadIdx.x & 31) == 0) red[{slot}][threadIdx.x >> 5] = {acc};")
            slot += 1
        if self.warps_per_row > 1:
            wpr = self.warps_per_row
            em.emit("__syncthreads();")
            # Every warp of the row reads the row's partials and folds them with shuffles.
            part = f"((threadIdx.x >> 5) & ~{wpr - 1}) + (threadIdx.x & {wpr - 1})"
            s = first_slot
            for r in rpass:
                how = op_table.REDUCTION_OPS[index[r].op]
                acc = accs[r]
                if r in moments:
                    n_, mu, m2, _ = moments[r]
                    em.emit(f"{n_} = red[{s}][{part}]; {mu} = red[{s + 1}][{part}]; {m2} = red[{s + 2}][{part}];")
                    em.emit("#pragma unroll")
                    em.emit(f"for (int o = {wpr // 2}; o > 0; o >>= 1) stitch_moments_merge({n_}, {mu}, {m2}, "
                            f"{shfl.format(v=n_)}, {shfl.format(v=mu)}, {shfl.format(v=m2)});")
                    s += 3
                    continue
                if r in poss:
                    em.emit(f"{acc} = red[{s}][{part}]; {poss[r]} = redi[{s}][{part}];")
                    em.emit("#pragma unroll")
                    em.emit(f"for (int o = {wpr // 2}; o > 0; o >>= 1) {_ARG_MERGE[how]}({acc}, {poss[r]}, "
                            f"{shfl.format(v=acc)}, {shfl.format(v=poss[r])});")
                    s += 1
                    continue
                em.emit(f"{acc} = red[{s}][{part}];")
                em.emit("#pragma unroll")
                em.emit(f"for (int o = {wpr // 2}; o > 0; o >>= 1) "
                        f"{acc} = {_COMBINE[how].format(a=acc, b=shfl.format(v=acc))};")
                s += 1
        if self.role == "cluster":
            self.cluster_exchange(rpass, accs, moments, poss, first_slot)
        self.slot = slot

    def cluster_exchange(self, rpass, accs, moments, poss, first_slot: int) -> None:
        """Each block's totals to its shared memory; the first warp folds all the cluster's, in rank order, and
        hands the result to the block's other threads through shared memory. On an H100 every thread reading the
        cluster's shared memory held KernelBench's InstanceNorm at 82% of the copy bandwidth, the first warp alone
        reaches 89% (bench/results/memory_bound_h100/team_h100.md)."""
        em, parts = self.em, self.split.parts
        em.emit("if (threadIdx.x == 0) { " + self.stores_of(rpass, accs, moments, poss, lambda k: f"cx[{k}]", first_slot)
                + " }")
        em.emit("stitch_cluster_sync();")
        em.emit("if (threadIdx.x < 32) {")
        self.reset(rpass, accs, moments, poss, "  ")
        folds = self.merges(rpass, accs, moments, poss, lambda k: f"stitch_cluster_ld(cx + {first_slot + k}, q)")
        em.emit("  #pragma unroll")
        em.emit(f"  for (int q = 0; q < {parts}; ++q) {{ " + " ".join(folds) + " }")
        em.emit("  if (threadIdx.x == 0) { "
                + self.stores_of(rpass, accs, moments, poss, lambda k: f"cxf[{k}]", first_slot) + " }")
        em.emit("}")
        em.emit("__syncthreads();")
        em.emit(" ".join(f"{v} = {f'__float_as_int(cxf[{k}])' if bits else f'cxf[{k}]'};"
                         for v, k, bits in self.packed(rpass, accs, moments, poss, first_slot)))

    def reset(self, rpass, accs, moments, poss, indent: str = "") -> None:
        """The pass's values back to their identities, before folding partial results into them."""
        for r, _, form in _partials(rpass, moments, poss):
            how = op_table.REDUCTION_OPS[self.index[r].op]
            if form == "moments":
                n_, mu, m2, _ = moments[r]
                self.em.emit(f"{indent}{n_} = 0.f; {mu} = 0.f; {m2} = 0.f;")
            elif form == "position":
                self.em.emit(f"{indent}{accs[r]} = {_IDENTITY[how]}; {poss[r]} = {_NO_POS};")
            else:
                self.em.emit(f"{indent}{accs[r]} = {_IDENTITY[how]};")

    def merges(self, rpass, accs, moments, poss, at) -> list[str]:
        """Statements folding one set of partial results (``at(k)``: C for the k-th float) into the pass's values."""
        out = []
        for r, k, form in _partials(rpass, moments, poss):
            how = op_table.REDUCTION_OPS[self.index[r].op]
            if form == "moments":
                n_, mu, m2, _ = moments[r]
                out.append(f"stitch_moments_merge({n_}, {mu}, {m2}, {at(k)}, {at(k + 1)}, {at(k + 2)});")
            elif form == "position":
                out.append(f"{_ARG_MERGE[how]}({accs[r]}, {poss[r]}, {at(k)}, __float_as_int({at(k + 1)}));")
            else:
                out.append(f"{accs[r]} = {_COMBINE[how].format(a=accs[r], b=at(k))};")
        return out

    def packed(self, rpass, accs, moments, poss, first: int = 0) -> list[tuple[str, int, bool]]:
        """The pass's values as partial results: (variable, offset of its float from ``first``, whether it is a
        position carried as the float's bits), in packing order."""
        out = []
        for r, k, form in _partials(rpass, moments, poss, first):
            if form == "moments":
                out += [(v, k + i, False) for i, v in enumerate(moments[r][:3])]
            elif form == "position":
                out += [(accs[r], k, False), (poss[r], k + 1, True)]
            else:
                out.append((accs[r], k, False))
        return out

    def stores_of(self, rpass, accs, moments, poss, at, first: int = 0) -> str:
        """One statement storing the pass's values as partial results (``at(k)``: C for the k-th float)."""
        return " ".join(f"{at(k)} = {f'__int_as_float({v})' if bits else v};"
                        for v, k, bits in self.packed(rpass, accs, moments, poss, first))

    def write_partials(self, rpass, accs, moments, poss) -> None:
        em = self.em
        em.emit(f"if (threadIdx.x == 0) {{ float* po = wsout + vrow * {self.ws_slots(self.upto)}; "
                + self.stores_of(rpass, accs, moments, poss, lambda k: f"po[{k}]") + " }")

    def finalize(self, rpass, accs, moments, poss) -> None:
        em, index, a = self.em, self.index, self.a
        row_len = a.dom.row_len
        for r in rpass:
            node = index[r]
            how = op_table.REDUCTION_OPS[node.op]
            acc = accs[r]
            if r in moments:
                n_, mu, m2, origin = moments[r]
                em.emit(f"{acc} = {origin} + {mu};")
                r2 = a.var_of[r]
                acc2 = em.fresh("acc")
                scale = f" * {op_table.c_float(1.0 / row_len)}" if op_table.REDUCTION_OPS[index[r2].op] == "mean" else ""
                # Rounding can leave M2 a hair below zero for a constant row; NaN stays NaN.
                em.emit(f"float {acc2} = stitch_max_nan({m2}, 0.f){scale};")
                em.row_values[r2] = _rounded(em, acc2, index[r2].dtype)
                em.row_vars.add(em.row_values[r2])
            elif r in poss:
                em.emit(f"{acc} = (float){poss[r]};")
                em.row_values[r] = acc
                em.row_vars.add(acc)
                continue
            elif how == "mean":
                em.emit(f"{acc} *= {op_table.c_float(1.0 / row_len)};")
            em.row_values[r] = _rounded(em, acc, node.dtype)
            em.row_vars.add(em.row_values[r])

    def row_origin(self) -> str:
        """The index of the row's first element (the origin means are kept relative to)."""
        return "rbase" if self.a.dom.layout == "rows" else self.a.dom.element("row", "0")

    def nchunks(self) -> str:
        return "nchk" if self.split else str(self.nch)

    def position(self, k: int, v: int) -> str:
        """The position in the row of lane ``v`` of this thread's chunk ``k``."""
        base = self.positions[k] if k < len(self.positions) else f"j{k}"
        pos = f"{base} + {v}" if v else base
        return f"(jbeg + {pos})" if self.split and not self.interleaved else f"({pos})"


def pass_sources(rpass: list[str], index: dict[str, OpNode]):
    """Each reduction of a pass with its kind (``op_table.REDUCTION_OPS``) and the node whose elements it reduces."""
    for r in rpass:
        node = index[r]
        yield r, op_table.REDUCTION_OPS[node.op], reduction_dims(node, index)[1]


def fold_element(em: Emitter, how: str, acc: str, val: str, guard: str, sums: tuple | None = None) -> None:
    """One element into a reduction: its offset from the shift into the sums (s1, s2) where ``sums`` is
    (shift, s1, s2) (a mean and the variance around it), else combined into ``acc``; nothing where ``guard`` fails."""
    if sums is not None:
        shift, s1, s2 = sums
        d = em.fresh("d")
        em.emit(f"const float {d} = {f'{guard} ? {val} - {shift} : 0.f' if guard else f'{val} - {shift}'};")
        em.emit(f"{s1} += {d}; {s2} = fmaf({d}, {d}, {s2});")
        return
    combined = _COMBINE[how].format(a=acc, b=val)
    em.emit(f"{acc} = {guard} ? {combined} : {acc};" if guard else f"{acc} = {combined};")


def _reduction_emitter(w: _Writer, a: _Analysis, group: Group, index: dict[str, OpNode], indexed_rows: bool):
    """The Emitter of a reduction kernel. ``indexed_rows``: elements reach their row through the domain's index
    map (rows that are not the last dims). The pointwise kernels' cheaper forms (2-ulp divides, one-instruction
    clamps, SiLU / sigmoid without the IEEE division's slow path) serve the prologue and epilogue; values that feed
    a comparison stay exact."""
    em = w.em
    em.vector_hint = w.hint
    em.row_len = a.dom.row_len
    if indexed_rows:
        em.row_domain = a.dom
    em.fast_math = True
    em.round_products = True
    em.half_outputs = all(index[o].dtype in ("bfloat16", "float16") for o in group.outputs)
    em.mark_exact()
    em.row_nodes = a.row_nodes
    em.indent = "  "
    return em


def _rounded(em: Emitter, acc: str, dtype: str) -> str:
    """The reduction's value rounded to its dtype, as eager rounds it (in place)."""
    if dtype not in ("float32", "int64", "bool"):
        em.emit(f"{acc} = {_round(acc, dtype)};")
    return acc


def _row_reciprocals(lines: list[str], row_vars: set[str], top: str = "  ") -> list[str]:
    """``x / d`` with ``d`` one value per row becomes ``x * (1 / d)``, the reciprocal taken once per row.

    Within 1.5 ulp of the quotient; a full-precision division per element costs about ten instructions.
    """
    division = re.compile(r"\(([\w\[\]]+) / (\w+)\)|stitch_div(?:_fast)?\(([\w\[\]]+), (\w+)\)")
    wanted = {m.group(2) or m.group(4) for line in lines for m in division.finditer(line)} & row_vars
    if not wanted:
        return lines
    out = list(lines)
    for d in sorted(wanted):
        # After the statement that gives d its final value (row values are assigned at the top level).
        defs = [i for i, line in enumerate(out) if re.search(rf"(?<![\w\[])(?:float )?{d} [*+]?= ", line)]
        if not defs:
            continue
        at = max(defs)
        indent = re.match(r"\s*", out[at]).group(0)
        if indent != top:
            continue  # defined inside a loop or a branch: leave the division alone
        out.insert(at + 1, f"{indent}const float rcp_{d} = 1.f / {d};")
        for i in range(at + 2, len(out)):
            out[i] = re.sub(rf"\(([\w\[\]]+) / {d}\)|stitch_div(?:_fast)?\(([\w\[\]]+), {d}\)",
                            lambda m: f"({m.group(1) or m.group(2)} * rcp_{d})", out[i])
    return out


def _retarget(line: str, local: list[str], full: list[str]) -> str:
    """Stores were written with output numbers among ``local``; use numbers among ``full``."""
    def sub(m: re.Match) -> str:
        k = int(m.group(1))
        return f"out{full.index(local[k])} +" if k < len(local) else m.group(0)
    return re.sub(r"out(\d+) \+", sub, line)


# ---------------------------------------------------------------------------------------------- columns


def column_kernel(group: Group, index: dict[str, OpNode], name: str, a: _Analysis | None = None) -> KernelSpec:
    """Rows that lie side by side (the innermost dimension kept): a warp takes 32 x VEC neighbouring rows.

    A thread holds VEC neighbouring rows (one 16-byte load per element position, coalesced across the
    warp). Each row's elements are split over ``split`` warps (more when there are few rows, to fill the
    GPU); a pass accumulates the thread's share, writes it to shared memory, and every thread of the row
    folds the row's shares in the same order, so all hold the same value. Later passes and the outputs loop
    over the rows again: a block's rows (32 x VEC x row length) come back from L1 / L2; or, where a thread's
    share is at most MAX_ROW_ELEMS values (RMSNorm over 64 channels: 8 positions of 4 rows), the thread holds
    it in registers and reads it once.
    """
    a = a or analyse(group, index)
    dom = a.dom
    rows, row_len = dom.rows, dom.row_len
    w = _Writer(group, index, name, emitter=_RowEmitter)
    w.domain = dom.numel
    identity = [index[l].dtype for l in a.full_leaves] + [index[o].dtype for o in a.full_outs]
    vec = _vec_for(identity or ["float32"], dom.inner)
    nslots = sum(_slots(a, index, r) for p in a.passes for r in p)
    while vec > 1 and 4 * nslots * 32 * vec > 32 * 1024:
        vec //= 2
    w.vec = vec
    em = _reduction_emitter(w, a, group, index, indexed_rows=True)
    def shape(vec: int) -> tuple[int, int]:
        """(blocks, warps a block): at least 8 warps (256 threads) where the rows are long enough, more while
        the GPU is not full, as many as the shared memory for the partial results allows."""
        groups = math.ceil(rows / (32 * vec))
        split = 1
        while split < COL_SPLIT_MAX and split * 2 <= row_len and (split < COL_SPLIT_MIN
                                                                 or groups * 32 * split < COL_THREADS):
            split *= 2
        while split > 1 and 4 * nslots * split * 32 * vec > 40 * 1024:
            split //= 2
        return groups, split

    col_groups, split = shape(vec)
    # Fewer rows a thread where that is what fills the GPU (a GEMM's 8192 columns): wide loads matter less
    # than idle SMs.
    while vec > 1 and col_groups * 32 * split < COL_THREADS // 2:
        vec //= 2
        col_groups, split = shape(vec)
    w.vec = vec
    block = 32 * split
    width = 32 * vec
    # A thread's elements held in registers: the passes and the outputs read them from there, not from L1 / L2
    # (which let half of RMSNorm's second reads through to DRAM on an H100).
    held = COL_HOLD and row_len % split == 0 and row_len // split * vec <= MAX_ROW_ELEMS
    declared: set[int] = set()
    em.emit(f"const long long r0 = ((long long)blockIdx.x * 32 + (threadIdx.x & 31)) * {vec};")
    em.emit("const int ty = threadIdx.x >> 5;")
    em.emit(f"const bool live = r0 < {rows}LL;")
    em.emit(f"const long long row = live ? r0 : {rows - vec}LL;")
    em.emit(f"__shared__ float part[{max(nslots, 1)}][{split}][{width}];")
    lanes: list[dict[str, str]] = [dict() for _ in range(vec)]  # row values of each of the thread's rows

    def on_lane(v: int) -> None:
        em.row_values = lanes[v]
        em.memo = {}

    def open_elements() -> None:
        em.emit("#pragma unroll 4")
        em.emit(f"for (int j = ty; j < {row_len}; j += {split}) {{")
        em.indent += "  "
        em.memo = {}
        w.vec_loaded = {}
        w.declare_chunk(0, dom.element("row", "j"))

    def close_elements() -> None:
        em.indent = em.indent[:-2]
        em.emit("}")
        em.memo = {}
        w.vec_loaded = {}

    def elements():
        """Each element position of the thread, as k (its chunk e{k}_ and position j{k} or j): a loop, or
        (``held``) the thread's positions one after another, loaded the first time."""
        if not held:
            open_elements()
            yield 0
            close_elements()
            return
        for k in range(row_len // split):
            if k not in declared:
                em.emit(f"const int j{k} = ty + {k * split};")
                w.declare_chunk(k, dom.element("row", f"j{k}"))
                declared.add(k)
            yield k

    slot = 0
    for rpass in a.passes:
        accs: dict[str, list[str]] = {}
        moments: dict[str, list[tuple[str, ...]]] = {}
        poss: dict[str, list[str]] = {}
        for r in rpass:
            how = op_table.REDUCTION_OPS[index[r].op]
            if how == "gather":
                raise Unsupported("gather along a dimension that is not the last")
            accs[r] = [em.fresh("acc") for _ in range(vec)]
            em.emit(f"float {', '.join(f'{x} = {_IDENTITY[how]}' for x in accs[r])};")
            if how in op_table.INDEX_REDUCTIONS:
                poss[r] = [em.fresh("pos") for _ in range(vec)]
                em.emit(f"int {', '.join(f'{x} = {_NO_POS}' for x in poss[r])};")
            if r in a.var_of:
                _, src = reduction_dims(index[r], index)
                moments[r] = []
                for v in range(vec):
                    on_lane(v)
                    origin, s1, s2, n_ = em.fresh("origin"), em.fresh("s1_"), em.fresh("s2_"), em.fresh("cnt")
                    first = dom.element("row", "0")
                    em.emit(f"const float {origin} = {em.value(src.name, f'({first} + {v})')};")
                    em.emit(f"float {s1} = 0.f, {s2} = 0.f, {n_} = 0.f;")
                    moments[r].append((origin, s1, s2, n_))
        def accumulate(k: int) -> None:
            for v in range(vec):
                on_lane(v)
                for r in rpass:
                    val = em.value(reduction_dims(index[r], index)[1].name, f"e{k}_{v}")
                    how = op_table.REDUCTION_OPS[index[r].op]
                    if r in moments:
                        origin, s1, s2, n_ = moments[r][v]
                        d = em.fresh("d")
                        em.emit(f"const float {d} = {val} - {origin}; {s1} += {d}; {s2} = fmaf({d}, {d}, {s2}); "
                                f"{n_} += 1.f;")
                    elif r in poss:
                        em.emit(f"{_ARG_MERGE[how]}({accs[r][v]}, {poss[r][v]}, {val}, {f'j{k}' if held else 'j'});")
                    else:
                        em.emit(f"{accs[r][v]} = {_COMBINE[how].format(a=accs[r][v], b=val)};")

        # The compiler's unrolling keeps several loads in flight, argmax / argmin's selecting merges included
        # (four loads a thread issued by hand before the merges ran at 81% of the copy bandwidth on an H100
        # where this loop runs at 87%: bench/results/memory_bound_h100).
        for k in elements():
            accumulate(k)
        first = slot
        at = "[ty][{v} * 32 + (threadIdx.x & 31)]"
        for r in rpass:
            for v in range(vec):
                cell = at.format(v=v)
                if r in moments:
                    origin, s1, s2, n_ = moments[r][v]
                    mu, m2 = em.fresh("mu"), em.fresh("m2_")
                    em.emit(f"float {mu}, {m2};")
                    em.emit(f"stitch_moments_local({n_}, {s1}, {s2}, 0.f, {n_}, {mu}, {m2});")
                    em.emit(f"part[{slot}]{cell} = {n_}; part[{slot + 1}]{cell} = {mu}; part[{slot + 2}]{cell} = {m2};")
                    moments[r][v] = (origin, n_, mu, m2)
                elif r in poss:
                    em.emit(f"part[{slot}]{cell} = {accs[r][v]}; part[{slot + 1}]{cell} = __int_as_float({poss[r][v]});")
                else:
                    em.emit(f"part[{slot}]{cell} = {accs[r][v]};")
            slot += _slots(a, index, r)
        em.emit("__syncthreads();")
        s = first
        for r in rpass:
            how = op_table.REDUCTION_OPS[index[r].op]
            for v in range(vec):
                on_lane(v)
                acc = accs[r][v]
                cell = f"[q][{v} * 32 + (threadIdx.x & 31)]"
                if r in moments:
                    origin, n_, mu, m2 = moments[r][v]
                    em.emit(f"{n_} = 0.f; {mu} = 0.f; {m2} = 0.f;")
                    em.emit(f"for (int q = 0; q < {split}; ++q) stitch_moments_merge({n_}, {mu}, {m2}, "
                            f"part[{s}]{cell}, part[{s + 1}]{cell}, part[{s + 2}]{cell});")
                    em.emit(f"{acc} = {origin} + {mu};")
                    r2 = a.var_of[r]
                    acc2 = em.fresh("acc")
                    scale = (f" * {op_table.c_float(1.0 / row_len)}"
                             if op_table.REDUCTION_OPS[index[r2].op] == "mean" else "")
                    em.emit(f"float {acc2} = stitch_max_nan({m2}, 0.f){scale};")
                    lanes[v][r2] = _rounded(em, acc2, index[r2].dtype)
                    em.row_vars.add(acc2)
                elif r in poss:
                    em.emit(f"{acc} = {_IDENTITY[how]}; {poss[r][v]} = {_NO_POS};")
                    em.emit(f"for (int q = 0; q < {split}; ++q) {_ARG_MERGE[how]}({acc}, {poss[r][v]}, "
                            f"part[{s}]{cell}, __float_as_int(part[{s + 1}]{cell}));")
                    em.emit(f"{acc} = (float){poss[r][v]};")
                    lanes[v][r] = acc
                    em.row_vars.add(acc)
                    continue
                else:
                    em.emit(f"{acc} = {_IDENTITY[how]};")
                    em.emit(f"for (int q = 0; q < {split}; ++q) {acc} = {_COMBINE[how].format(a=acc, b=f'part[{s}]{cell}')};")
                    if how == "mean":
                        em.emit(f"{acc} *= {op_table.c_float(1.0 / row_len)};")
                lanes[v][r] = _rounded(em, acc, index[r].dtype)
                em.row_vars.add(acc)
            s += _slots(a, index, r)
    for k in (elements() if a.full_outs else ()):
        vals: dict[str, list[str]] = {o: [] for o in a.full_outs}
        for v in range(vec):
            on_lane(v)
            for o in a.full_outs:
                vals[o].append(em.value(o, f"e{k}_{v}"))
        em.emit("if (live) {")
        for o in a.full_outs:
            arr = em.fresh("st")
            em.emit(f"  const float {arr}[{vec}] = {{{', '.join(vals[o])}}}; "
                    f"stitch_stv<{vec}>(out{group.outputs.index(o)} + c{k}, {arr});")
        em.emit("}")
    for o in a.row_outs:
        outs = []
        for v in range(vec):
            on_lane(v)
            outs.append(em.value(o, "row"))
        arr = em.fresh("st")
        em.emit(f"if (ty == 0 && live) {{ const float {arr}[{vec}] = {{{', '.join(outs)}}}; "
                f"stitch_stv<{vec}>(out{group.outputs.index(o)} + row, {arr}); }}")
    body = _row_reciprocals(em.lines, em.row_vars)
    src = PREAMBLE + f"""
extern "C" __global__ void __launch_bounds__({block}) {name}({w.signature()}) {{
{chr(10).join(body)}
}}
"""
    src = re.sub(r"(?<![\w.])expf\(", "__expf(", src)
    src = _finish(src, group, index)
    return KernelSpec(name=name, source=src, kind="col_reduction", params=w.leaves + group.outputs,
                      outputs=list(group.outputs), grid=col_groups, block=block,
                      note=(f"{len(group.nodes)} ops, {rows} rows of {row_len} (stride {dom.inner}), "
                            f"{vec} rows a thread, a warp across {width} rows, {split} warps along each"
                            + (", held in registers" if held else "")))
