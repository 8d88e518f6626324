"""The row kernel: one kernel that walks rows along their elements, in any of its roles (whole rows in
registers or streamed, a split row's partial results or its finish, a cluster's block, a team's block)."""

from __future__ import annotations

import math
import re

from stitch_lsp.coders.template import reduction_kernels as rk
from stitch_lsp.coders.template.cuda_common import PREAMBLE
from stitch_lsp.coders.template.kernels import KernelSpec, _c_type, _finish, _Writer
from stitch_lsp.coders.template.rows.analysis import Analysis, row_vec
from stitch_lsp.coders.template.rows.emit import RowEmitter, reduction_emitter, retarget, row_reciprocals
from stitch_lsp.coders.template.rows.partials import PartialResults
from stitch_lsp.coders.template.rows.passes import RowPasses
from stitch_lsp.coders.template.rows.team import TeamRows
from stitch_lsp.op_graph import OpNode
from stitch_lsp.plan import op_table
from stitch_lsp.plan.fusion import Group


class RowKernel(RowPasses, PartialResults, TeamRows):
    """One kernel that walks rows along their elements.

    ``role``: ``whole`` (the group in one kernel), ``partials`` (split rows: pass ``upto`` over one part,
    its partial results written; earlier passes folded from their partials) or ``finish`` (split rows:
    every pass folded from its partials, then the outputs of one part).
    """

    def __init__(self, group: Group, index: dict[str, OpNode], name: str, a: Analysis,
                 config: rk.RowConfig | None = None, split: rk.Split | None = None, role: str = "whole",
                 upto: int = 0) -> None:
        self.group, self.index, self.name, self.a = group, index, name, a
        self.split, self.role, self.upto = split, role, upto
        self.interleaved = False  # see reduction_kernels.SPLIT_INTERLEAVE; decided in build()
        self.base = re.sub(r"_p\d+$", "", name)
        w = self.w = _Writer(group, index, name, emitter=RowEmitter)
        dom = a.dom
        w.domain = dom.numel
        w.vec = row_vec(a, index)
        self.vec = w.vec
        self.nch = dom.row_len // self.vec  # chunks of VEC per row (VEC divides the row)
        if split is not None:
            # A cluster's blocks hold their parts in registers; split kernels walk theirs.
            cfg = rk.RowConfig(split.threads, split.threads, role != "cluster")
        else:
            cfg = config or rk.row_config(dom.row_len, self.vec, dom.rows, len(a.full_leaves))
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

    def build(self) -> KernelSpec:
        a, w, block = self.a, self.w, self.cfg.block
        rows_per_block = block // self.cfg.threads
        partial = rows_per_block > 1 and a.dom.rows % rows_per_block != 0  # the last block has rows past the end
        self.em = reduction_emitter(w, a, self.group, self.index, indexed_rows=a.dom.layout != "rows")
        held = self.role == "cluster" and self.split.shared
        if held:
            w.held, w.held_threads = "stitch_held", block
        self.name_rows(rows_per_block, partial)
        self.plan_chunks()
        if not self.cfg.streamed:
            self.hold_chunks(rows_per_block)
        self.declare_shared()
        if self.role == "team":
            self.open_rows()
        for p, rpass in enumerate(a.passes):
            if p in self.folded:
                self.fold_pass(p, rpass)
            elif p in self.counted:
                self.count_pass(p, rpass, self.cfg.streamed)
        body, shared = self.frame(self.store_outputs(partial), held)
        params, outputs, scratch = self.parameters()
        team = self.role == "team"
        return KernelSpec(name=self.name, source=self.source(body, params, outputs), kind="row_reduction",
                          params=params + outputs, outputs=outputs, grid=self.grid(rows_per_block), block=block,
                          note=self.note(shared, held), scratch=scratch, shared=shared,
                          team=self.split.parts if team else 0, zeroed=[self.sync_name()] if team else [])

    def name_rows(self, rows_per_block: int, partial: bool) -> None:
        """The thread's lane in its row, its row and, for a part of a split row, the part's place in the row."""
        em, split, rt = self.em, self.split, self.cfg.threads
        rows, row_len = self.a.dom.rows, self.a.dom.row_len
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
            elif self.a.full_outs:
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
        if self.a.dom.layout == "rows" and self.role != "team":  # a team kernel names its rows in its loop
            em.emit(f"const long long rbase = row * {row_len}LL;")

    def plan_chunks(self) -> None:
        """The chunks of VEC a thread takes of its part (``items``), where the part ends (``jn``), and whether a
        split row's parts interleave."""
        a, index, split, rt, vec = self.a, self.index, self.split, self.cfg.threads, self.vec
        row_len = a.dom.row_len
        chunk = split.chunk if split else row_len
        items = math.ceil(math.ceil(chunk / vec) / rt)
        self.prefixes, self.guards, self.positions = [], [], []
        jn = "jn" if split else str(row_len)
        # Interleaved parts (rk.SPLIT_INTERLEAVE): only where the pass's partial results do not depend on which
        # elements a part holds beyond their values (sums, maxima: no counts, no positions, no outputs).
        self.interleaved = (rk.SPLIT_INTERLEAVE and split is not None and self.role == "partials" and self.cfg.streamed
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

    def hold_chunks(self, rows_per_block: int) -> None:
        """A row held in registers: the thread's chunks, loaded once (and, with ``prefetch``, the next wave's rows
        asked of L2)."""
        a, em, w, split, rt, vec, jn = self.a, self.em, self.w, self.split, self.cfg.threads, self.vec, self.jn
        rows, row_len = a.dom.rows, a.dom.row_len
        whole_parts = split is None or split.parts * split.chunk == row_len
        for k in range(self.items):
            if split is None:
                exact = (k + 1) * rt <= self.nch
            else:
                exact = whole_parts and (k + 1) * rt * vec <= split.chunk
            guard = "" if exact else f"j{k} < {jn}"
            em.emit(f"const int j{k} = ({k * rt} + lane) * {vec};")
            self.prefixes.append(w.declare_chunk(k, self.element(f"({guard} ? j{k} : 0)" if guard else f"j{k}")))
            self.guards.append(guard)
            self.positions.append(f"j{k}")
        if self.cfg.prefetch and a.full_leaves and a.dom.layout == "rows":
            em.emit(f"const int pf = stitch_nsm() * {rows_per_block};  // rows one wave ahead")
            em.emit(f"if (row + pf < {rows}LL) {{")
            for leaf in a.full_leaves:
                for k in range(self.items):
                    em.emit(f"  stitch_prefetch_l2({w.param_of[leaf]} + c{k} + (long long)pf * {row_len}LL);")
            em.emit("}")

    def declare_shared(self) -> None:
        """Shared memory for combining a row's values across its warps (and a cluster's blocks), and each thread's
        count of the row's elements it holds (the moments' weight)."""
        a, em, index, rt, block, vec = self.a, self.em, self.index, self.cfg.threads, self.cfg.block, self.vec
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
        if self.split is not None:
            em.emit(f"const int nchk = jn / {vec};")
            self.cnt = f"(float)(lane < nchk ? ((nchk - 1 - lane) / {rt} + 1) * {vec} : 0)"
        elif nch % rt == 0:
            self.cnt = f"{self.items * vec}.f"
        else:
            self.cnt = f"(float)(lane < {nch} ? (({nch - 1} - lane) / {rt} + 1) * {vec} : 0)"

    def store_outputs(self, partial: bool) -> list[str]:
        """The full outputs' stores (in the thread's chunks, or a loop that walks the row backwards), then the row
        outputs'; the statements left to close the body with."""
        a, em, w, group = self.a, self.em, self.w, self.group
        stores: list[str] = []
        if self.role == "partials":
            return stores
        if self.role == "team":
            self.hoist_row_values()
        looped = self.cfg.streamed
        if looped:
            self.open_loop(reverse=True)
            self.prefixes, self.guards = ["e0_"], [""]
        group_outputs = group.outputs
        group.outputs = a.full_outs
        for k, prefix in enumerate(self.prefixes):
            stores += w.store(k, prefix, self.guards[k])
        group.outputs = group_outputs
        # Full outputs keep their positions in the parameter list; re-map store targets.
        stores = [retarget(s, a.full_outs, group.outputs) for s in stores]
        if partial and stores:
            stores = ["if (live) {"] + ["  " + s for s in stores] + ["}"]
        if looped:
            em.lines += [em.indent + s for s in stores]
            stores = []
            self.close_loop()
        for o in a.row_outs:
            val = em.value(o, "row")
            o_idx = group.outputs.index(o)
            cond = "lane == 0" + (" && live" if partial else "") + (" && part == 0" if self.split else "")
            stores.append(f"if ({cond}) out{o_idx}[row] = stitch_from_float<{_c_type(self.index[o].dtype)}>({val});")
        return stores

    def frame(self, stores: list[str], held: bool) -> tuple[list[str], int]:
        """The kernel's body (the emitted lines, the stores, a cluster's or a team's closing barrier, the shared
        memory a cluster's or a team's block holds its part in) and those bytes of shared memory."""
        em, split = self.em, self.split
        if self.role == "cluster":
            stores.append("stitch_cluster_sync();  // no block leaves while another may read its shared memory")
        team = self.role == "team"
        if team:
            stores = ["  " + s for s in stores] + ["  __syncthreads();  // this buffer is free for the row after next",
                                                 "}"]
        body = row_reciprocals(em.lines, em.row_vars, "    " if team else "  ") + ["  " + s for s in stores]
        shared = 4 * self.w.held_slots * self.vec * self.cfg.block if held else 0
        if held:
            body.insert(0, f"  STITCH_HELD(stitch_held, {shared // 4});  // this block's part of the row")
        if team:
            shared = 4 * rk.TEAM_BUFFERS * len(self.staged) * rk.stage_floats(split.chunk)
            body[:0] = [f"  STITCH_HELD(stitch_stage, {shared // 4});  // this block's parts of two rows",
                        f"  __shared__ stitch_bar_t stitch_bars[{rk.TEAM_BUFFERS}];"]
        return body, shared

    def source(self, body: list[str], params: list[str], outputs: list[str]) -> str:
        block = self.cfg.block
        cluster = f"__cluster_dims__({self.split.parts}, 1, 1) " if self.role == "cluster" else ""
        # Blocks of a cluster hold their part in registers: more than one an SM lets one block's loads
        # run while another combines its totals or stores.
        fit = 65536 // (block * rk.CLUSTER_REGISTERS) if self.role == "cluster" else 1
        resident = f", {fit}" if fit > 1 else ""
        src = PREAMBLE + f"""
extern "C" __global__ void {cluster}__launch_bounds__({block}{resident}) {self.name}({self.signature(params, outputs)}) {{
{chr(10).join(body)}
}}
"""
        # exp's fast unit is within 2 ulp + |x| * 2^-24 relative: far inside the fp32 tolerance.
        src = re.sub(r"(?<![\w.])expf\(", "__expf(", src)
        return _finish(src, self.group, self.index)

    def grid(self, rows_per_block: int) -> int:
        rows, split = self.a.dom.rows, self.split
        if self.role == "team":
            return rows * split.parts  # at most: the launch takes as many teams as the GPU holds at once
        if split is not None:
            return rows * split.parts if self.role in ("partials", "cluster") or self.a.full_outs else rows
        return math.ceil(rows / rows_per_block)

    def note(self, shared: int, held: bool) -> str:
        a, split, rt, vec = self.a, self.split, self.cfg.threads, self.vec
        dom, ops = a.dom, len(self.group.nodes)
        rows, row_len = dom.rows, dom.row_len
        if self.role == "team":
            return (f"{ops} ops, {rows} rows of {row_len}, a team of {split.parts} blocks of {rt} "
                    f"threads per row ({split.chunk} elements a block, staged in shared memory by bulk copies a row "
                    f"ahead: {shared // 1024} KB a block), {vec}-wide, the team's totals combined through global "
                    f"memory")
        if self.role == "cluster":
            where = f"shared memory ({shared // 1024} KB a block)" if held else "registers"
            return (f"{ops} ops, {rows} rows of {row_len}" + (f" ({dom.layout})" if dom.layout != "rows" else "")
                    + f", a cluster of {split.parts} blocks of {rt} threads per row holding it in {where}, "
                    f"{vec}-wide, combined through distributed shared memory")
        if split is not None:
            what = {"partials": f"pass {self.upto + 1} of {len(a.passes)}: partial results of",
                    "finish": "the outputs of"}[self.role]
            return (f"{ops} ops, {rows} rows of {row_len} ({dom.layout}) split into {split.parts} "
                    f"parts of {split.chunk}, {rt} threads a part, {vec}-wide; {what} each part")
        how_rows = "a warp" if rt == 32 else f"{rt} threads"
        return (f"{ops} ops, {rows} rows of {row_len}"
                + (f" ({dom.layout})" if dom.layout != "rows" else "")
                + f", {how_rows} per row, {vec}-wide"
                + (", streamed (statistics in one pass, outputs in a second)" if self.cfg.streamed else ""))

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
