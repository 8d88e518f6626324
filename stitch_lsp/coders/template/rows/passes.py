"""A row kernel's passes: each pass's reductions counted from the row's elements (this thread's share) or folded
from the partial results a split row's earlier kernels wrote, combined across the row's threads, and finished
into row values."""

from __future__ import annotations

from stitch_lsp.coders.template.rows.analysis import pass_sources
from stitch_lsp.coders.template.rows.emit import ARG_MERGE, COMBINE, IDENTITY, NO_POS, fold_element, rounded
from stitch_lsp.plan import op_table
from stitch_lsp.plan.fusion import reduction_dims


class RowPasses:
    """``RowKernel``'s passes (a mixin: it reads the kernel's ``a``, ``index``, ``em``, ``cfg`` and ``split``)."""

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
            em.emit(f"float {acc} = {IDENTITY[how]};")
            if how in op_table.INDEX_REDUCTIONS:
                poss[r] = em.fresh("pos")
                em.emit(f"int {poss[r]} = {NO_POS};")
            if r in a.var_of:
                moments[r] = ()
        return accs, moments, picks, poss

    def count_pass(self, p: int, rpass: list[str], looped: bool) -> None:
        """Pass ``p`` from the row's elements (this thread's share), combined across the row's threads."""
        em, index = self.em, self.index
        accs, moments, picks, poss = self.init_pass(rpass)
        slot = self.slot
        self.open_moments(moments, slot, looped)

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
                        call = f"{ARG_MERGE[how]}({acc}, {poss[r]}, {val}, (int)({pos}));"
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
        self.close_moments(moments, slot)
        self.combine(rpass, accs, moments, poss)
        if self.role == "partials":
            self.write_partials(rpass, accs, moments, poss)
        else:
            if self.role == "team":
                self.team_exchange(p, rpass, accs, moments, poss)
            self.finalize(rpass, accs, moments, poss)

    def open_moments(self, moments: dict, slot: int, looped: bool) -> None:
        """Before a pass: each mean-and-variance pair's shift (the thread's first value) and, for a team, the row's
        origin; its sums around the shift start at zero."""
        em, index = self.em, self.index
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

    def close_moments(self, moments: dict, slot: int) -> None:
        """After a pass: each pair's sums as the thread's (count, mean, M2), the mean taken from the row's origin."""
        em, index = self.em, self.index
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
        em = self.em
        first_slot = self.slot
        slot = first_slot
        top = min(16, self.cfg.threads // 2)  # rows that share a warp exchange within their lanes only
        for r in rpass:
            acc = accs[r]
            em.emit("#pragma unroll")
            em.emit(f"for (int o = {top}; o > 0; o >>= 1) {self.shuffle_merge(r, accs, moments, poss)}")
            if r in moments:
                n_, mu, m2, _ = moments[r]
                if self.warps_per_row > 1:
                    em.emit(f"if ((threadIdx.x & 31) == 0) {{ red[{slot}][threadIdx.x >> 5] = {n_}; "
                            f"red[{slot + 1}][threadIdx.x >> 5] = {mu}; red[{slot + 2}][threadIdx.x >> 5] = {m2}; }}")
                slot += 3
                continue
            if r in poss:
                if self.warps_per_row > 1:
                    em.emit(f"if ((threadIdx.x & 31) == 0) {{ red[{slot}][threadIdx.x >> 5] = {acc}; "
                            f"redi[{slot}][threadIdx.x >> 5] = {poss[r]}; }}")
                slot += 1
                continue
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
                acc = accs[r]
                if r in moments:
                    n_, mu, m2, _ = moments[r]
                    em.emit(f"{n_} = red[{s}][{part}]; {mu} = red[{s + 1}][{part}]; {m2} = red[{s + 2}][{part}];")
                    s += 3
                elif r in poss:
                    em.emit(f"{acc} = red[{s}][{part}]; {poss[r]} = redi[{s}][{part}];")
                    s += 1
                else:
                    em.emit(f"{acc} = red[{s}][{part}];")
                    s += 1
                em.emit("#pragma unroll")
                em.emit(f"for (int o = {wpr // 2}; o > 0; o >>= 1) {self.shuffle_merge(r, accs, moments, poss)}")
        if self.role == "cluster":
            self.cluster_exchange(rpass, accs, moments, poss, first_slot)
        self.slot = slot

    def shuffle_merge(self, r: str, accs, moments, poss) -> str:
        """The statement folding reduction ``r``'s values of the lane ``o`` away (``__shfl_xor_sync``) into this
        lane's: the same at every step of a warp's shuffles and of the row's warps'."""
        how = op_table.REDUCTION_OPS[self.index[r].op]
        shfl = "__shfl_xor_sync(0xffffffffu, {v}, o)"
        if r in moments:
            n_, mu, m2, _ = moments[r]
            return (f"stitch_moments_merge({n_}, {mu}, {m2}, "
                    f"{shfl.format(v=n_)}, {shfl.format(v=mu)}, {shfl.format(v=m2)});")
        acc = accs[r]
        if r in poss:
            return f"{ARG_MERGE[how]}({acc}, {poss[r]}, {shfl.format(v=acc)}, {shfl.format(v=poss[r])});"
        return f"{acc} = {COMBINE[how].format(a=acc, b=shfl.format(v=acc))};"

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
                em.row_values[r2] = rounded(em, acc2, index[r2].dtype)
                em.row_vars.add(em.row_values[r2])
            elif r in poss:
                em.emit(f"{acc} = (float){poss[r]};")
                em.row_values[r] = acc
                em.row_vars.add(acc)
                continue
            elif how == "mean":
                em.emit(f"{acc} *= {op_table.c_float(1.0 / row_len)};")
            em.row_values[r] = rounded(em, acc, node.dtype)
            em.row_vars.add(em.row_values[r])
