"""``cat`` as a value of the Emitter: a branch per input, chosen by the element's coordinate along the cat's
dimension; where a whole chunk takes one branch, one test for the chunk, its loads kept as vectors."""

from __future__ import annotations

import math

from stitch_lsp.coders.template.values.index_maps import _in_branch, contiguous_strides
from stitch_lsp.op_graph import OpNode


class CatValues:
    """``Emitter``'s cats (a mixin: it uses the Emitter's ``value``, ``emit``, ``fresh``, ``_coords``,
    ``_index``, the loads it saves and restores, and its memo)."""

    def _cat(self, node: OpNode, ix: str) -> str:
        tensors = [self.index[a["$"]] for a in node.args[0]]
        rank = len(node.shape)
        dim = (node.args[1] if len(node.args) > 1 else 0) % rank
        lanes = self.chunk_lanes(ix) if self.depth == self.uniform_depth else None
        if lanes and _chunk_stays_in_one_input(node.shape, dim, [t.shape for t in tensors], len(lanes)):
            return self._cat_chunk(node, ix, lanes, tensors, dim)
        c = self._coords(ix, node.shape)
        out = self.fresh()
        self.emit(f"float {out};")
        start = 0
        saved_memo = dict(self.memo)
        held = node.dtype in ("bfloat16", "float16")
        for k, t in enumerate(tensors):
            size = t.shape[dim] if len(t.shape) == rank else 0
            if size == 0:
                continue
            end = start + size
            cond = f"{c[dim].expr} < {end}LL" if k < len(tensors) - 1 else ""
            self.emit(("if (" + cond + ") {") if k == 0 else ("} else if (" + cond + ") {" if cond else "} else {"))
            old = self.indent
            self.indent += "  "
            self.depth += 1
            sstr = contiguous_strides(t.shape)
            sub_ix = self._index([(_in_branch(c[d], start, size) if d == dim else c[d], sstr[d]) for d in range(rank)])
            val = self.value(t.name, sub_ix)
            held = held and self.exact_in.get(val) == node.dtype
            self.emit(f"{out} = {val};")
            self.indent = old
            self.depth -= 1
            self.memo = dict(saved_memo)
            start = end
        self.emit("}")
        if held:
            self.exact_in[out] = node.dtype
        return out

    def _cat_chunk(self, node: OpNode, ix: str, lanes: list[str], tensors: list[OpNode], dim: int) -> str:
        """A cat where a whole chunk takes one branch: one test per chunk, and the branch's loads stay vectors."""
        rank = len(node.shape)
        c0 = self._coords(lanes[0], node.shape)
        outs = [self.fresh() for _ in lanes]
        self.emit(f"float {', '.join(outs)};")
        saved_memo, saved_loads = dict(self.memo), self.save_loads()
        held = node.dtype in ("bfloat16", "float16")  # every branch gives values of the cat's own dtype
        start = 0
        live = [t for t in tensors if len(t.shape) == rank and t.shape[dim]]
        for k, t in enumerate(live):
            end = start + t.shape[dim]
            cond = f"{c0[dim].expr} < {end}LL" if k < len(live) - 1 else ""
            self.emit(("if (" + cond + ") {") if k == 0 else ("} else if (" + cond + ") {" if cond else "} else {"))
            old = self.indent
            self.indent += "  "
            self.depth += 1
            self.uniform_depth += 1
            sstr = contiguous_strides(t.shape)
            for out, lane in zip(outs, lanes):
                c = self._coords(lane, node.shape)
                size = t.shape[dim]
                val = self.value(t.name, self._index(
                    [(_in_branch(c[d], start, size) if d == dim else c[d], sstr[d]) for d in range(rank)]))
                held = held and self.exact_in.get(val) == node.dtype
                self.emit(f"{out} = {val};")
            self.indent = old
            self.depth -= 1
            self.uniform_depth -= 1
            self.memo = dict(saved_memo)
            self.restore_loads(saved_loads)
            start = end
        self.emit("}")
        for out, lane in zip(outs, lanes):
            self.memo[(node.name, lane)] = out
            if held:
                self.exact_in[out] = node.dtype
        return outs[lanes.index(ix)]


def _chunk_stays_in_one_input(shape: tuple[int, ...], dim: int, parts: list[tuple[int, ...]], vec: int) -> bool:
    """Every aligned run of ``vec`` elements of the cat lies inside one input, at consecutive positions there."""
    inner = math.prod(shape[dim + 1:])
    if (shape[dim] * inner) % vec:
        return False
    start = 0
    for p in parts:
        size = p[dim] if len(p) == len(shape) else 0
        if (start * inner) % vec:
            return False
        start += size
    return True
