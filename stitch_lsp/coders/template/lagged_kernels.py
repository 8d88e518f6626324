"""Lagged kernels: rows too long for a block, a cluster or a team to hold (GroupNorm over groups of megabytes)
whose outputs need the whole row's statistics, with each element read from DRAM once.

The blocks (one an SM, all resident: a cooperative launch) stream the rows as one sequence of tiles, block b taking
tiles b, b + blocks, ... Each step a block takes the statistics of its newest tile and the outputs of the tile it
took ``lag`` steps before, which is still in its shared memory: a ring of tiles that a producer warp fills by bulk
copies (Hopper's TMA) as slots come free. A row's statistics are complete once every block that holds part of it
has written its sums (a count in global memory); ``lag`` is the steps a row spans, plus slack, so the outputs'
warps seldom wait. Four kinds of warps, none waiting on a block-wide barrier:

* the consumers reduce their tile into per-thread sums, hand the warp's sums on at a row's end (shared memory), and
  write the outputs of the lagged tile;
* the producer copies tiles into the ring;
* the publisher adds the warps' sums in warp order, writes the block's to global memory and counts them in;
* the gatherer waits for each of the block's rows to be counted complete, adds the blocks' sums in block order
  (every block gets the same bits) and hands the row's values to the consumers through shared memory.

Measured on an H100 (bench/results/memory_bound_h100/lag_stream_h100.md): KernelBench's GroupNorm (896 groups of
8 MB) at 90% of the copy bandwidth in `stitch bench` (1.33x torch.compile), against 65% for the streamed kernel
that reads every group twice. In hand-written probes, waiting at a block-wide barrier, or a fence behind the
warp's own output stores, cost 25-35 points; the slack between a row's last tile and its first outputs must cover
about 8 MB of traffic, and at least two tiles must be in flight ahead of the statistics.
"""

from __future__ import annotations

import math
import re

from attrs import define

from stitch_lsp.plan import op_table
from stitch_lsp.plan.fusion import Group, reduction_dims
from stitch_lsp.coders.template import reduction_kernels as rk
from stitch_lsp.coders.template.cuda_common import PREAMBLE
from stitch_lsp.coders.template.kernels import KernelSpec, _c_type, _finish
from stitch_lsp.coders.template.rows.analysis import Analysis, partial_offsets, partial_slots, pass_sources
from stitch_lsp.coders.template.rows.emit import IDENTITY, fold_element, reduction_emitter, retarget
from stitch_lsp.coders.template.rows.row_kernel import RowKernel
from stitch_lsp.op_graph import OpNode

# The consumer warps' threads (the block has three more warps). On an H100, KernelBench's GroupNorm ran at 94% of
# the copy bandwidth with 896, 91% with 768 (bench/results/memory_bound_h100/lag_stream_h100.md).
LAG_THREADS = 896
LAG_UNROLL = 2  # VEC-wide chunks a consumer thread takes of a tile (a tile: 28 KB of fp32)
LAG_EXTRA = 4  # steps of slack beyond those a row spans: 8-12 MB of traffic on an H100
LAG_PREFETCH = 2  # tiles in flight ahead of the statistics, at the fewest (one ran 10-15 points slower)
LAG_SHARED_BYTES = 227 * 1024  # an H100 block's shared memory: the ring and the warps' hand-overs
LAG_MIN_STEPS = 8  # tiles each block takes, at the fewest
_HELPERS = 3  # producer, publisher, gatherer
_LAGGED_OPS = ("sum", "mean", "max", "min", "prod")


@define
class Lag:
    """A lagged kernel's shape: rows of ``tiles`` tiles of ``tile`` elements, a ring of ``ring`` slots."""

    tile: int
    tiles: int
    ring: int
    least: int  # blocks resident at once, at the fewest: each block's share of a row fits its ring


def _static_bytes(ring: int, slots: int, values: int) -> int:
    """Shared memory besides the ring: its mbarriers, the warps' sums and the rows' values (``ring + 2`` rows)."""
    rows = ring + 2
    warps = LAG_THREADS // 32
    return 16 * ring + 16 * rows + 4 * rows * slots * warps + 4 * rows * values


def lagged_for(a: Analysis, index: dict[str, OpNode], vec: int, *, streamed: bool,
               sms: int | None = None) -> Lag | None:
    """A lagged kernel where a row is too long for a block's registers, its one pass of sums, maxima, minima,
    products or moments feeds full-size outputs, and the slack and a row's share of each of ``sms`` blocks fit
    the ring of fp32 tiles."""
    sms = sms or rk.SMS
    if not streamed or not a.full_outs or not a.full_leaves or len(a.passes) != 1:
        return None
    if any(op_table.REDUCTION_OPS[index[r].op] not in _LAGGED_OPS for r in a.reductions):
        return None
    if any(index[l].dtype != "float32" for l in a.full_leaves):
        return None
    tile = LAG_THREADS * vec * LAG_UNROLL
    tiles = math.ceil(a.dom.row_len / tile)
    if a.dom.rows * tiles < LAG_MIN_STEPS * sms:
        return None
    slot_bytes = 4 * len(a.full_leaves) * rk.stage_floats(tile)
    slots = sum(partial_slots(a, index, r) for r in a.passes[0])
    ring = LAG_SHARED_BYTES // slot_bytes
    while ring and ring * slot_bytes + _static_bytes(ring, slots, len(a.row_nodes) + len(a.reductions) + 1) \
            > LAG_SHARED_BYTES:
        ring -= 1
    span = math.ceil(tiles / sms)
    if ring < span + 1 + LAG_PREFETCH:
        return None
    return Lag(tile, tiles, ring, math.ceil(tiles / (ring - 1)))


class LaggedKernel(RowKernel):
    """The kernel of ``lagged_for``'s shape (see the module's docstring)."""

    def __init__(self, group: Group, index: dict[str, OpNode], name: str, a: Analysis, lag: Lag) -> None:
        # Combined across a warp only (the warps hand their sums on through shared memory).
        super().__init__(group, index, name, a, config=rk.RowConfig(32, 32, True))
        self.lag = lag

    def build(self) -> KernelSpec:
        a, index, w, group, lag = self.a, self.index, self.w, self.group, self.lag
        rows, row_len, vec = a.dom.rows, a.dom.row_len, self.vec
        em = self.em = reduction_emitter(w, a, group, index, indexed_rows=False)
        self.warps_per_row = 1
        self.slot = 0
        rpass = a.passes[0]
        slots = self.ws_slots(0)
        warps = LAG_THREADS // 32
        leaves = list(a.full_leaves)
        sf = rk.stage_floats(lag.tile)
        ring, tile, tp = lag.ring, lag.tile, lag.tiles
        qn = ring + 2
        for i, leaf in enumerate(leaves):
            w.team_stage[leaf] = f"lgs{i}"
        hold = self.hold = [n for n in group.nodes if n in a.row_nodes or n in a.reductions]
        em.emit(f"__shared__ stitch_bar_t lg_full[{ring}], lg_empty[{ring}], lg_flushed[{qn}], lg_ready[{qn}];")
        em.emit(f"__shared__ float lg_red[{qn}][{slots}][{warps}];  // each warp's sums of a row")
        em.emit(f"__shared__ float lg_row[{qn}][{len(hold)}];  // a row's values, for the outputs")
        em.emit("const int lg_nb = gridDim.x, lg_b = blockIdx.x, lg_warp = threadIdx.x >> 5, lane = threadIdx.x & 31;")
        em.emit(f"const long long lg_tiles = {rows}LL * {tp}LL;")
        em.emit("const long long lg_steps = (lg_tiles - lg_b + lg_nb - 1) / lg_nb;")
        em.emit(f"const int lg_span = ({tp} + lg_nb - 1) / lg_nb;  // steps a row spans")
        em.emit(f"const int lag = lg_span + max(0, min({LAG_EXTRA}, {ring - LAG_PREFETCH} - lg_span));")
        em.emit(f"const int lg_need = min({tp}, lg_nb);  // blocks that hold part of a row")
        em.emit("if (threadIdx.x == 0) {")
        em.emit(f"  stitch_ring_init(lg_full, {ring}, {len(leaves)}); stitch_ring_init(lg_empty, {ring}, {warps});")
        em.emit(f"  stitch_ring_init(lg_flushed, {qn}, {warps}); stitch_ring_init(lg_ready, {qn}, 1);")
        em.emit("}")
        em.emit("__syncthreads();")
        self.producer(leaves, sf)
        self.publisher(rpass, slots, warps, qn)
        self.gatherer(rpass, slots, qn)
        self.consumers(rpass, leaves, sf, qn)
        body = em.lines
        shared = 4 * ring * len(leaves) * sf
        body.insert(0, f"  STITCH_HELD(stitch_ring, {shared // 4});  // the ring of tiles")
        params, outputs, scratch = self.parameters()
        block = LAG_THREADS + 32 * _HELPERS
        src = PREAMBLE + f"""
extern "C" __global__ void __launch_bounds__({block}, 1) {self.name}({self.signature(params, outputs)}) {{
{chr(10).join(body)}
}}
"""
        src = re.sub(r"(?<![\w.])expf\(", "__expf(", src)
        src = _finish(src, group, index)
        note = (f"{len(group.nodes)} ops, {rows} rows of {row_len} streamed as tiles of {tile} by every SM, "
                f"{vec}-wide; a tile's outputs written a few steps after its statistics, from a ring of {ring} "
                f"tiles in shared memory ({shared // 1024} KB a block, filled by bulk copies): one read of each "
                f"element; the rows' sums combined through global memory")
        return KernelSpec(name=self.name, source=src, kind="row_reduction", params=params + outputs,
                          outputs=outputs, grid=rk.SMS, block=block, note=note, scratch=scratch, shared=shared,
                          team=1, zeroed=[self.sync_name()], least_blocks=lag.least)

    # -- the warps ---------------------------------------------------------------------------------

    def row_ends(self, rpass: list[str], qn: int) -> tuple[dict, dict, dict]:
        """A helper warp's values for the pass, then its loop over this block's tiles, skipping all but each row's
        last (where the block's sums of the row are complete): ``row`` and ``rbase`` name the row, ``qb`` its slot
        in the hand-overs (``q`` counts the rows)."""
        tp, em = self.lag.tiles, self.em
        values = self.declare(rpass)
        em.emit("int q = 0;")
        em.emit("for (long long k = 0; k < lg_steps; ++k) {")
        em.emit(f"  const long long t = lg_b + k * lg_nb, row = t / {tp}LL;")
        em.emit(f"  if (t + lg_nb < lg_tiles && (t + lg_nb) / {tp}LL == row) continue;")
        em.emit(f"  const long long rbase = row * {self.a.dom.row_len}LL;")
        em.emit(f"  const int qb = q % {qn};")
        em.indent += "  "
        return values

    def close_row_ends(self, lane_zero: bool) -> None:
        """Closes ``row_ends``' loop (and the lane-0 branch around it), and the helper warp's branch: it returns."""
        em = self.em
        for _ in range(2 if lane_zero else 1):
            em.indent = em.indent[:-2]
            em.emit("}")
        em.emit("return;")
        em.indent = em.indent[:-2]
        em.emit("}")

    def producer(self, leaves: list[str], sf: int) -> None:
        em, w, ring, tile, tp = self.em, self.w, self.lag.ring, self.lag.tile, self.lag.tiles
        row_len = self.a.dom.row_len
        em.emit(f"if (lg_warp == {LAG_THREADS // 32}) {{  // the producer: tiles into the ring as slots come free")
        em.emit("  if (lane == 0)")
        em.emit("    for (long long k = 0; k < lg_steps; ++k) {")
        em.emit(f"      const int sl = (int)(k % {ring});")
        em.emit(f"      if (k >= {ring}) stitch_ring_wait(&lg_empty[sl], (unsigned)((k / {ring} - 1) & 1));")
        em.emit(f"      const long long t = lg_b + k * lg_nb, row = t / {tp}LL;")
        em.emit(f"      const int off = (int)(t - row * {tp}LL) * {tile};")
        em.emit(f"      const int n = min({tile}, {row_len} - off);")
        for i, leaf in enumerate(leaves):
            em.emit(f"      stitch_ring_copy(stitch_ring + (sl * {len(leaves)} + {i}) * {sf}, "
                    f"{w.param_of[leaf]} + row * {row_len}LL + off, n, &lg_full[sl]);")
        em.emit("    }")
        em.emit("  return;")
        em.emit("}")

    def declare(self, rpass: list[str]) -> tuple[dict, dict, dict]:
        """Fresh variables for a pass's values: (accumulators, moments as (n, mean, M2, origin), positions)."""
        em, a = self.em, self.a
        accs, moments = {}, {}
        for r in rpass:
            accs[r] = em.fresh("acc")
            em.emit(f"float {accs[r]} = 0.f;")
            if r in a.var_of:
                n_, mu, m2, origin = em.fresh("n"), em.fresh("mu"), em.fresh("m2_"), em.fresh("origin")
                em.emit(f"float {n_} = 0.f, {mu} = 0.f, {m2} = 0.f, {origin} = 0.f;")
                moments[r] = (n_, mu, m2, origin)
        return accs, moments, {}

    def publisher(self, rpass: list[str], slots: int, warps: int, qn: int) -> None:
        em = self.em
        em.emit(f"if (lg_warp == {warps + 1}) {{  // the publisher: the block's sums of each row, in warp order")
        em.indent += "  "
        em.emit("if (lane == 0) {")
        em.indent += "  "
        accs, moments, poss = self.row_ends(rpass, qn)
        em.emit(f"stitch_ring_wait(&lg_flushed[qb], (unsigned)((q / {qn}) & 1));")
        em.emit("++q;")
        self.reset(rpass, accs, moments, poss)
        em.emit(f"for (int wq = 0; wq < {warps}; ++wq) {{ "
                + " ".join(self.merges(rpass, accs, moments, poss, lambda k: f"lg_red[qb][{k}][wq]")) + " }")
        em.emit(f"float* po = ws0 + (row * lg_nb + lg_b) * {slots};")
        em.emit(self.stores_of(rpass, accs, moments, poss, lambda k: f"po[{k}]"))
        em.emit("stitch_count_release(lag_sync + row);")
        self.close_row_ends(lane_zero=True)

    def gatherer(self, rpass: list[str], slots: int, qn: int) -> None:
        """Each of the block's rows once counted complete: the blocks' sums added in block order (each lane a
        stride of blocks, then the warp's shuffles), the row's values into shared memory for the consumers."""
        em, a, index, tp = self.em, self.a, self.index, self.lag.tiles
        warps = LAG_THREADS // 32
        em.emit(f"if (lg_warp == {warps + 2}) {{  // the gatherer: each row's values, once its blocks are counted in")
        em.indent += "  "
        accs, moments, poss = self.row_ends(rpass, qn)
        em.emit("++q;")
        em.emit("if (lane == 0) stitch_count_wait(lag_sync + row, lg_need);")
        em.emit("__syncwarp();")
        for r in moments:  # issued first: its latency runs under the sums' loads
            _, src = reduction_dims(index[r], index)
            em.emit(f"{moments[r][3]} = {em.value(src.name, 'rbase')};")
        self.reset(rpass, accs, moments, poss)
        em.emit(f"const int first = (int)((row * {tp}LL) % lg_nb);  // the block that holds the row's first tile")
        # Every block's sums loaded at once (a lane takes blocks lane, lane + 32, ...; the grid is SMS blocks at
        # most), then merged: the row's values are ready one L2 round trip after its count is.
        identity = [("0.f" if form == "moments" else IDENTITY[op_table.REDUCTION_OPS[index[r].op]])
                    for r, _, form in partial_offsets(rpass, moments, poss) for _ in range(partial_slots(a, index, r))]
        for i in range(math.ceil(rk.SMS / 32)):
            em.emit(f"const int wq{i} = lane + {32 * i};")
            em.emit(f"const bool has{i} = wq{i} < lg_nb && (wq{i} - first + lg_nb) % lg_nb < {tp};  // holds a tile")
            em.emit(f"const float* pq{i} = ws0 + (row * lg_nb + (has{i} ? wq{i} : 0)) * {slots};")
            em.emit(" ".join(f"const float p{i}_{k} = has{i} ? __ldcg(pq{i} + {k}) : {identity[k]};"
                             for k in range(slots)))
        for i in range(math.ceil(rk.SMS / 32)):
            em.emit(" ".join(self.merges(rpass, accs, moments, poss, lambda k, i=i: f"p{i}_{k}")))
        self.combine(rpass, accs, moments, poss)
        self.finalize(rpass, accs, moments, poss)
        self.hoist_row_values()
        held = [em.row_values[n] if n in em.row_values else em.value(n, "row") for n in self.hold]
        em.emit("if (lane == 0) {")
        for i, v in enumerate(held):
            em.emit(f"  lg_row[qb][{i}] = {v};")
        for o in a.row_outs:
            val = em.value(o, "row")
            em.emit(f"  if (first == lg_b) out{self.group.outputs.index(o)}[row] = "
                    f"stitch_from_float<{_c_type(index[o].dtype)}>({val});")
        em.emit("  stitch_ring_arrive(&lg_ready[qb]);")
        em.emit("}")
        self.close_row_ends(lane_zero=False)
        em.memo = {}

    def consumers(self, rpass: list[str], leaves: list[str], sf: int, qn: int) -> None:
        em, a, index, w = self.em, self.a, self.index, self.w
        ring, tile, tp, vec = self.lag.ring, self.lag.tile, self.lag.tiles, self.vec
        row_len = a.dom.row_len
        em.row_values = {}
        accs: dict[str, str] = {}
        sums: dict[str, tuple[str, str, str, str]] = {}  # moments: (origin, s1, s2, count)
        for r in rpass:
            how = op_table.REDUCTION_OPS[index[r].op]
            accs[r] = em.fresh("acc")
            em.emit(f"float {accs[r]} = {IDENTITY[how]};")
            if r in a.var_of:
                names = (em.fresh("origin"), em.fresh("s1_"), em.fresh("s2_"), em.fresh("cnt"))
                em.emit(f"float {', '.join(f'{v} = 0.f' for v in names)};")
                sums[r] = names
        values = [em.fresh("lgv") for _ in self.hold]
        if values:
            em.emit(f"float {', '.join(f'{v} = 0.f' for v in values)};")
        em.emit("long long lg_srow = -1, lg_orow = -1;")
        em.emit("int lg_sq = 0, lg_oq = 0;")
        em.emit("for (long long k = 0; k < lg_steps + lag; ++k) {")
        em.indent += "  "
        # The statistics of this step's tile.
        em.emit("if (k < lg_steps) {")
        em.indent += "  "
        self.open_tile("k", leaves, sf)
        em.emit("if (row != lg_srow) {  // the block's first tile of a row")
        em.emit("  lg_srow = row;")
        for r in rpass:
            how = op_table.REDUCTION_OPS[index[r].op]
            em.emit(f"  {accs[r]} = {IDENTITY[how]};")
        for r, (origin, s1, s2, cnt) in sums.items():
            _, src = reduction_dims(index[r], index)
            em.indent += "  "
            em.emit(f"{origin} = {em.value(src.name, 'rbase')}; {s1} = 0.f; {s2} = 0.f; {cnt} = 0.f;")
            em.indent = em.indent[:-2]
        em.emit("}")
        em.memo = {}
        w.vec_loaded = {}
        em.emit(f"stitch_ring_wait(&lg_full[sl], (unsigned)((k / {ring}) & 1));")
        for u, (prefix, guard) in enumerate(self.chunks()):
            self.accumulate(u, prefix, guard, rpass, accs, sums)
        em.memo = {}
        w.vec_loaded = {}
        em.emit(f"if (t + lg_nb >= lg_tiles || (t + lg_nb) / {tp}LL != row) {{  // the block's last tile of the row")
        em.indent += "  "
        moments = {}
        for r, (origin, s1, s2, cnt) in sums.items():
            n_, mu, m2 = em.fresh("n"), em.fresh("mu"), em.fresh("m2_")
            em.emit(f"float {n_}, {mu}, {m2};")
            em.emit(f"stitch_moments_local({cnt}, {s1}, {s2}, 0.f, {n_}, {mu}, {m2});")
            moments[r] = (n_, mu, m2, origin)
        self.combine(rpass, accs, moments, {})
        em.emit(f"const int qb = lg_sq % {qn};")
        em.emit("++lg_sq;")
        em.emit("if (lane == 0) { " + self.stores_of(rpass, accs, moments, {}, lambda k: f"lg_red[qb][{k}][lg_warp]")
                + " stitch_ring_arrive(&lg_flushed[qb]); }")
        em.indent = em.indent[:-2]
        em.emit("}")
        em.indent = em.indent[:-2]
        em.emit("}")
        # The outputs of the tile taken ``lag`` steps ago, still in the ring.
        em.emit("if (k >= lag && k - lag < lg_steps) {")
        em.indent += "  "
        self.open_tile("k - lag", leaves, sf)
        em.emit("if (row != lg_orow) {  // the row's values, from the gatherer")
        em.emit("  lg_orow = row;")
        em.emit(f"  const int qb = lg_oq % {qn};")
        em.emit(f"  stitch_ring_wait(&lg_ready[qb], (unsigned)((lg_oq / {qn}) & 1));")
        em.emit("  ++lg_oq;")
        em.emit("  " + " ".join(f"{v} = lg_row[qb][{i}];" for i, v in enumerate(values)))
        em.emit("}")
        em.row_values = dict(zip(self.hold, values))
        em.memo = {}
        w.vec_loaded = {}
        group_outputs = self.group.outputs
        self.group.outputs = a.full_outs
        stores: list[str] = []
        for u, (prefix, guard) in enumerate(self.chunks()):
            stores += w.store(u, prefix, guard)
        self.group.outputs = group_outputs
        for s in stores:
            em.emit(retarget(s, a.full_outs, group_outputs))
        em.emit("__syncwarp();")
        em.emit("if (lane == 0) stitch_ring_arrive(&lg_empty[sl]);  // this warp is done with the slot")
        em.indent = em.indent[:-2]
        em.emit("}")
        em.indent = em.indent[:-2]
        em.emit("}")

    def open_tile(self, step: str, leaves: list[str], sf: int) -> None:
        """A consumer's tile of step ``step``: its slot, row, offset in the row, and where each staged input's part
        of it lies in the ring."""
        em, w, ring, tile, tp = self.em, self.w, self.lag.ring, self.lag.tile, self.lag.tiles
        em.emit(f"const int sl = (int)(({step}) % {ring});")
        em.emit(f"const long long t = lg_b + ({step}) * lg_nb, row = t / {tp}LL;")
        em.emit(f"const int off = (int)(t - row * {tp}LL) * {tile};")
        em.emit(f"const long long rbase = row * {self.a.dom.row_len}LL, pbase = rbase + off;")
        for i, leaf in enumerate(leaves):
            em.emit(f"const float* lgs{i} = stitch_ring + (sl * {len(leaves)} + {i}) * {sf} + "
                    f"stitch_stage_shift({w.param_of[leaf]} + pbase);")

    def chunks(self) -> list[tuple[str, str]]:
        """This thread's VEC-wide chunks of the tile: (element prefix, guard against the row's end)."""
        em, w, vec, row_len = self.em, self.w, self.vec, self.a.dom.row_len
        whole = row_len % self.lag.tile == 0
        out = []
        for u in range(LAG_UNROLL):
            em.emit(f"const int j{u} = off + ({u * LAG_THREADS} + (int)threadIdx.x) * {vec};")
            guard = "" if whole else f"j{u} < {row_len}"
            # Past the row's end a chunk stands at the tile's first element (read, never used): inside the slot.
            out.append((w.declare_chunk(u, f"rbase + ({guard} ? j{u} : off)" if guard else f"rbase + j{u}"), guard))
        return out

    def accumulate(self, u: int, prefix: str, guard: str, rpass: list[str], accs: dict, sums: dict) -> None:
        em = self.em
        for r, how, src in pass_sources(rpass, self.index):
            for v in range(self.vec):
                fold_element(em, how, accs[r], em.value(src.name, f"{prefix}{v}"), guard,
                                sums[r][:3] if r in sums else None)
            if r in sums:
                cnt = sums[r][3]
                em.emit(f"{cnt} += {f'{guard} ? {self.vec}.f : 0.f' if guard else f'{self.vec}.f'};")

    # -- the kernel's buffers ----------------------------------------------------------------------

    def parameters(self) -> tuple[list[str], list[str], dict]:
        rows, slots = self.a.dom.rows, self.ws_slots(0)
        scratch = {self.ws(0): ([rows * rk.SMS * slots], "float32"),  # a block's sums of a row: the grid is SMS at most
                   self.sync_name(): ([rows], "int32")}  # blocks counted in a row, zeroed each launch
        return list(self.w.leaves), list(scratch) + list(self.group.outputs), scratch

    def signature(self, params: list[str], outputs: list[str]) -> str:
        w, index = self.w, self.index
        out = [f"const {_c_type(index[l].dtype)}* __restrict__ {w.param_of[l]}" for l in w.leaves]
        out += ["float* ws0", "int* lag_sync"]  # written by every block and read by all: no read-only loads
        out += [f"{_c_type(index[o].dtype)}* __restrict__ out{k}" for k, o in enumerate(self.group.outputs)]
        return ", ".join(out)
