"""A row kernel's partial results: a pass's values packed into floats (a (count, mean, M2) triple, a (value,
position) pair or one value), stored for the next kernel of a split row, and folded back; and a cluster's blocks
exchanging theirs through distributed shared memory."""

from __future__ import annotations

from stitch_lsp.coders.template.rows.analysis import partial_offsets, partial_slots
from stitch_lsp.coders.template.rows.emit import ARG_MERGE, COMBINE, IDENTITY, NO_POS
from stitch_lsp.plan import op_table


class PartialResults:
    """``RowKernel``'s partial results (a mixin: it reads the kernel's ``a``, ``index``, ``em``, ``split`` and ``upto``)."""

    def ws(self, p: int) -> str:
        return f"{self.base}_ws{p}"

    def ws_slots(self, p: int) -> int:
        return sum(partial_slots(self.a, self.index, r) for r in self.a.passes[p])

    def reset(self, rpass, accs, moments, poss, indent: str = "") -> None:
        """The pass's values back to their identities, before folding partial results into them."""
        for r, _, form in partial_offsets(rpass, moments, poss):
            how = op_table.REDUCTION_OPS[self.index[r].op]
            if form == "moments":
                n_, mu, m2, _ = moments[r]
                self.em.emit(f"{indent}{n_} = 0.f; {mu} = 0.f; {m2} = 0.f;")
            elif form == "position":
                self.em.emit(f"{indent}{accs[r]} = {IDENTITY[how]}; {poss[r]} = {NO_POS};")
            else:
                self.em.emit(f"{indent}{accs[r]} = {IDENTITY[how]};")

    def merges(self, rpass, accs, moments, poss, at) -> list[str]:
        """Statements folding one set of partial results (``at(k)``: C for the k-th float) into the pass's values."""
        out = []
        for r, k, form in partial_offsets(rpass, moments, poss):
            how = op_table.REDUCTION_OPS[self.index[r].op]
            if form == "moments":
                n_, mu, m2, _ = moments[r]
                out.append(f"stitch_moments_merge({n_}, {mu}, {m2}, {at(k)}, {at(k + 1)}, {at(k + 2)});")
            elif form == "position":
                out.append(f"{ARG_MERGE[how]}({accs[r]}, {poss[r]}, {at(k)}, __float_as_int({at(k + 1)}));")
            else:
                out.append(f"{accs[r]} = {COMBINE[how].format(a=accs[r], b=at(k))};")
        return out

    def packed(self, rpass, accs, moments, poss, first: int = 0) -> list[tuple[str, int, bool]]:
        """The pass's values as partial results: (variable, offset of its float from ``first``, whether it is a
        position carried as the float's bits), in packing order."""
        out = []
        for r, k, form in partial_offsets(rpass, moments, poss, first):
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
