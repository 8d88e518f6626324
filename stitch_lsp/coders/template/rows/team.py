"""A team kernel's rows (``reduction_kernels.team_for``): a team of blocks takes one row after another, each block
a part, the part of the team's next row arriving in shared memory by bulk copies while this one is reduced; the
blocks' totals meet in global memory."""

from __future__ import annotations

from stitch_lsp.coders.template import reduction_kernels as rk


class TeamRows:
    """``RowKernel``'s ``team`` role (a mixin: it reads the kernel's ``a``, ``w``, ``em``, ``split`` and ``group``)."""

    def sync_name(self) -> str:
        return f"{self.base}_sync"

    def open_rows(self) -> None:
        """A team kernel's loop over its rows: each block reads its part of this row where it lies in shared memory
        while the part of the team's next row arrives in the other buffer (bulk copies)."""
        em, w, a, split = self.em, self.w, self.a, self.split
        row_len, rows, parts = a.dom.row_len, a.dom.rows, split.parts
        self.staged = list(a.full_leaves)
        width = self.stage_width = rk.stage_floats(split.chunk)
        n = len(self.staged)
        em.emit(f"const long long teams = gridDim.x / {parts};")
        em.emit(f"if (threadIdx.x == 0) {{ stitch_stage_init(stitch_bars, {rk.TEAM_BUFFERS}, {n}); "
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
        products with a reciprocal (``row_reciprocals``)."""
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
