"""The column kernel: rows that lie side by side (the innermost dimension kept), a warp across 32 x VEC of them."""

from __future__ import annotations

import math
import re

from stitch_lsp.coders.template import reduction_kernels as rk
from stitch_lsp.coders.template.cuda_common import PREAMBLE
from stitch_lsp.coders.template.emitter import Unsupported
from stitch_lsp.coders.template.kernels import KernelSpec, _finish, _vec_for, _Writer
from stitch_lsp.coders.template.rows.analysis import Analysis, analyse, partial_slots
from stitch_lsp.coders.template.rows.emit import (ARG_MERGE, COMBINE, IDENTITY, NO_POS, RowEmitter, reduction_emitter,
                                                  rounded, row_reciprocals)
from stitch_lsp.op_graph import OpNode
from stitch_lsp.plan import op_table
from stitch_lsp.plan.fusion import Group, reduction_dims


def column_kernel(group: Group, index: dict[str, OpNode], name: str, a: Analysis | None = None) -> KernelSpec:
    """Rows that lie side by side (the innermost dimension kept): a warp takes 32 x VEC neighbouring rows.

    A thread holds VEC neighbouring rows (one 16-byte load per element position, coalesced across the
    warp). Each row's elements are split over ``split`` warps (more when there are few rows, to fill the
    GPU); a pass accumulates the thread's share, writes it to shared memory, and every thread of the row
    folds the row's shares in the same order, so all hold the same value. Later passes and the outputs loop
    over the rows again: a block's rows (32 x VEC x row length) come back from L1 / L2; or, where a thread's
    share is at most MAX_ROW_ELEMS values (RMSNorm over 64 channels: 8 positions of 4 rows), the thread holds
    it in registers and reads it once.
    """
    return _ColumnKernel(group, index, name, a or analyse(group, index)).build()


class _ColumnKernel:
    """``column_kernel``'s state: the shape it chose, and the row values of each of a thread's VEC rows."""

    def __init__(self, group: Group, index: dict[str, OpNode], name: str, a: Analysis) -> None:
        self.group, self.index, self.name, self.a = group, index, name, a
        dom = a.dom
        w = self.w = _Writer(group, index, name, emitter=RowEmitter)
        w.domain = dom.numel
        identity = [index[l].dtype for l in a.full_leaves] + [index[o].dtype for o in a.full_outs]
        vec = _vec_for(identity or ["float32"], dom.inner)
        self.nslots = sum(partial_slots(a, index, r) for p in a.passes for r in p)
        while vec > 1 and 4 * self.nslots * 32 * vec > 32 * 1024:
            vec //= 2
        w.vec = vec
        self.em = reduction_emitter(w, a, group, index, indexed_rows=True)
        col_groups, split = self.shape(vec)
        # Fewer rows a thread where that is what fills the GPU (a GEMM's 8192 columns): wide loads matter less
        # than idle SMs.
        while vec > 1 and col_groups * 32 * split < rk.COL_THREADS // 2:
            vec //= 2
            col_groups, split = self.shape(vec)
        w.vec = self.vec = vec
        self.col_groups, self.split = col_groups, split
        # A thread's elements held in registers: the passes and the outputs read them from there, not from L1 / L2
        # (which let half of RMSNorm's second reads through to DRAM on an H100).
        self.held = rk.COL_HOLD and dom.row_len % split == 0 and dom.row_len // split * vec <= rk.MAX_ROW_ELEMS
        self.declared: set[int] = set()
        self.lanes: list[dict[str, str]] = [dict() for _ in range(vec)]  # row values of each of the thread's rows

    def shape(self, vec: int) -> tuple[int, int]:
        """(blocks, warps a block): at least 8 warps (256 threads) where the rows are long enough, more while
        the GPU is not full, as many as the shared memory for the partial results allows."""
        groups = math.ceil(self.a.dom.rows / (32 * vec))
        split = 1
        while split < rk.COL_SPLIT_MAX and split * 2 <= self.a.dom.row_len and (
                split < rk.COL_SPLIT_MIN or groups * 32 * split < rk.COL_THREADS):
            split *= 2
        while split > 1 and 4 * self.nslots * split * 32 * vec > 40 * 1024:
            split //= 2
        return groups, split

    def build(self) -> KernelSpec:
        a, em, w, group, vec, split = self.a, self.em, self.w, self.group, self.vec, self.split
        rows, row_len = a.dom.rows, a.dom.row_len
        block, width = 32 * split, 32 * vec
        em.emit(f"const long long r0 = ((long long)blockIdx.x * 32 + (threadIdx.x & 31)) * {vec};")
        em.emit("const int ty = threadIdx.x >> 5;")
        em.emit(f"const bool live = r0 < {rows}LL;")
        em.emit(f"const long long row = live ? r0 : {rows - vec}LL;")
        em.emit(f"__shared__ float part[{max(self.nslots, 1)}][{split}][{width}];")
        slot = 0
        for rpass in a.passes:
            values = self.init_pass(rpass)
            # The compiler's unrolling keeps several loads in flight, argmax / argmin's selecting merges included
            # (four loads a thread issued by hand before the merges ran at 81% of the copy bandwidth on an H100
            # where this loop runs at 87%: bench/results/memory_bound_h100).
            for k in self.elements():
                self.accumulate(k, rpass, *values)
            self.share(slot, rpass, *values)
            em.emit("__syncthreads();")
            self.fold(slot, rpass, *values)
            slot += sum(partial_slots(a, self.index, r) for r in rpass)
        self.store_outputs()
        body = row_reciprocals(em.lines, em.row_vars)
        src = PREAMBLE + f"""
extern "C" __global__ void __launch_bounds__({block}) {self.name}({w.signature()}) {{
{chr(10).join(body)}
}}
"""
        src = re.sub(r"(?<![\w.])expf\(", "__expf(", src)
        src = _finish(src, group, self.index)
        return KernelSpec(name=self.name, source=src, kind="col_reduction", params=w.leaves + group.outputs,
                          outputs=list(group.outputs), grid=self.col_groups, block=block,
                          note=(f"{len(group.nodes)} ops, {rows} rows of {row_len} (stride {a.dom.inner}), "
                                f"{vec} rows a thread, a warp across {width} rows, {split} warps along each"
                                + (", held in registers" if self.held else "")))

    def on_lane(self, v: int) -> None:
        """Values from here on are those of the thread's row ``v``."""
        self.em.row_values = self.lanes[v]
        self.em.memo = {}

    def elements(self):
        """Each element position of the thread, as k (its chunk e{k}_ and position j{k} or j): a loop, or
        (``held``) the thread's positions one after another, loaded the first time."""
        em, w, dom, split = self.em, self.w, self.a.dom, self.split
        if not self.held:
            em.emit("#pragma unroll 4")
            em.emit(f"for (int j = ty; j < {dom.row_len}; j += {split}) {{")
            em.indent += "  "
            em.memo = {}
            w.vec_loaded = {}
            w.declare_chunk(0, dom.element("row", "j"))
            yield 0
            em.indent = em.indent[:-2]
            em.emit("}")
            em.memo = {}
            w.vec_loaded = {}
            return
        for k in range(dom.row_len // split):
            if k not in self.declared:
                em.emit(f"const int j{k} = ty + {k * split};")
                w.declare_chunk(k, dom.element("row", f"j{k}"))
                self.declared.add(k)
            yield k

    def init_pass(self, rpass: list[str]) -> tuple[dict, dict, dict]:
        """Each reduction's accumulators, one a row of the thread: (values, (origin, s1, s2, count) of a mean and
        the variance around it, positions of an argmax / argmin)."""
        em, index, a, vec = self.em, self.index, self.a, self.vec
        accs: dict[str, list[str]] = {}
        moments: dict[str, list[tuple[str, ...]]] = {}
        poss: dict[str, list[str]] = {}
        for r in rpass:
            how = op_table.REDUCTION_OPS[index[r].op]
            if how == "gather":
                raise Unsupported("gather along a dimension that is not the last")
            accs[r] = [em.fresh("acc") for _ in range(vec)]
            em.emit(f"float {', '.join(f'{x} = {IDENTITY[how]}' for x in accs[r])};")
            if how in op_table.INDEX_REDUCTIONS:
                poss[r] = [em.fresh("pos") for _ in range(vec)]
                em.emit(f"int {', '.join(f'{x} = {NO_POS}' for x in poss[r])};")
            if r in a.var_of:
                _, src = reduction_dims(index[r], index)
                moments[r] = []
                for v in range(vec):
                    self.on_lane(v)
                    origin, s1, s2, n_ = em.fresh("origin"), em.fresh("s1_"), em.fresh("s2_"), em.fresh("cnt")
                    first = a.dom.element("row", "0")
                    em.emit(f"const float {origin} = {em.value(src.name, f'({first} + {v})')};")
                    em.emit(f"float {s1} = 0.f, {s2} = 0.f, {n_} = 0.f;")
                    moments[r].append((origin, s1, s2, n_))
        return accs, moments, poss

    def accumulate(self, k: int, rpass: list[str], accs: dict, moments: dict, poss: dict) -> None:
        """Element position ``k`` of each of the thread's rows into the pass's accumulators."""
        em, index = self.em, self.index
        for v in range(self.vec):
            self.on_lane(v)
            for r in rpass:
                val = em.value(reduction_dims(index[r], index)[1].name, f"e{k}_{v}")
                how = op_table.REDUCTION_OPS[index[r].op]
                if r in moments:
                    origin, s1, s2, n_ = moments[r][v]
                    d = em.fresh("d")
                    em.emit(f"const float {d} = {val} - {origin}; {s1} += {d}; {s2} = fmaf({d}, {d}, {s2}); "
                            f"{n_} += 1.f;")
                elif r in poss:
                    em.emit(f"{ARG_MERGE[how]}({accs[r][v]}, {poss[r][v]}, {val}, {f'j{k}' if self.held else 'j'});")
                else:
                    em.emit(f"{accs[r][v]} = {COMBINE[how].format(a=accs[r][v], b=val)};")

    def share(self, slot: int, rpass: list[str], accs: dict, moments: dict, poss: dict) -> None:
        """The thread's share of each row's values to shared memory, from partial-result slot ``slot``."""
        em = self.em
        at = "[ty][{v} * 32 + (threadIdx.x & 31)]"
        for r in rpass:
            for v in range(self.vec):
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
            slot += partial_slots(self.a, self.index, r)

    def fold(self, s: int, rpass: list[str], accs: dict, moments: dict, poss: dict) -> None:
        """Every thread folds the warps' shares of its rows, in the same order, into the rows' values."""
        em, index, a, split = self.em, self.index, self.a, self.split
        row_len = a.dom.row_len
        for r in rpass:
            how = op_table.REDUCTION_OPS[index[r].op]
            for v in range(self.vec):
                self.on_lane(v)
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
                    self.lanes[v][r2] = rounded(em, acc2, index[r2].dtype)
                    em.row_vars.add(acc2)
                elif r in poss:
                    em.emit(f"{acc} = {IDENTITY[how]}; {poss[r][v]} = {NO_POS};")
                    em.emit(f"for (int q = 0; q < {split}; ++q) {ARG_MERGE[how]}({acc}, {poss[r][v]}, "
                            f"part[{s}]{cell}, __float_as_int(part[{s + 1}]{cell}));")
                    em.emit(f"{acc} = (float){poss[r][v]};")
                    self.lanes[v][r] = acc
                    em.row_vars.add(acc)
                    continue
                else:
                    em.emit(f"{acc} = {IDENTITY[how]};")
                    em.emit(f"for (int q = 0; q < {split}; ++q) {acc} = {COMBINE[how].format(a=acc, b=f'part[{s}]{cell}')};")
                    if how == "mean":
                        em.emit(f"{acc} *= {op_table.c_float(1.0 / row_len)};")
                self.lanes[v][r] = rounded(em, acc, index[r].dtype)
                em.row_vars.add(acc)
            s += partial_slots(a, index, r)

    def store_outputs(self) -> None:
        """The full outputs, VEC rows a store at each element position, then the row outputs."""
        a, em, vec, outputs = self.a, self.em, self.vec, self.group.outputs
        for k in (self.elements() if a.full_outs else ()):
            vals: dict[str, list[str]] = {o: [] for o in a.full_outs}
            for v in range(vec):
                self.on_lane(v)
                for o in a.full_outs:
                    vals[o].append(em.value(o, f"e{k}_{v}"))
            em.emit("if (live) {")
            for o in a.full_outs:
                arr = em.fresh("st")
                em.emit(f"  const float {arr}[{vec}] = {{{', '.join(vals[o])}}}; "
                        f"stitch_stv<{vec}>(out{outputs.index(o)} + c{k}, {arr});")
            em.emit("}")
        for o in a.row_outs:
            outs = []
            for v in range(vec):
                self.on_lane(v)
                outs.append(em.value(o, "row"))
            arr = em.fresh("st")
            em.emit(f"if (ty == 0 && live) {{ const float {arr}[{vec}] = {{{', '.join(outs)}}}; "
                    f"stitch_stv<{vec}>(out{outputs.index(o)} + row, {arr}); }}")
