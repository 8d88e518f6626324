"""Max and average pooling as values of the Emitter: a loop over the output element's window, as aten's CUDA
kernels walk it (rows before columns, padding skipped), or a read of the window from an input span its block
staged in shared memory."""

from __future__ import annotations

from attrs import define

from stitch_lsp.coders.template.cuda_common import _round_to
from stitch_lsp.coders.template.values.index_maps import Unsupported, contiguous_strides, linear
from stitch_lsp.op_graph import OpNode
from stitch_lsp.plan import op_table, pooling


# A pooling node's kwarg, set where its group is rewritten in channels-last order (``conv_reduction``): the dim
# its pooled dims start from (1: N, spatial..., C), where aten's pools pool the last ones.
SPATIAL_FROM = "stitch_spatial_from"


@define
class Staged:
    """A pool's input span staged by its block: ``array[i]`` holds the input at position ``first * stride -
    padding + i`` of the block's row (-inf or 0 outside the input); ``coords``: the output element's coordinates
    as the thread holds them (``pos``: its position along the pooled dimension)."""

    array: str
    first: str
    pos: str
    coords: list[str]
    length: int  # the input's size along the pooled dimension
    exact: bool = False  # the staged values are already of the pool's dtype (a max returns one of them)


class WindowValues:
    """``Emitter``'s pooling windows (a mixin: it uses the Emitter's ``value``, ``emit``, ``fresh``, ``_coords``,
    ``_as_var`` and its memo)."""

    def _window(self, node: OpNode, ix: str) -> str:
        """Max / average pooling at output element ``ix``: a loop over its window (unrolled: the window is a
        constant), as aten's CUDA kernels walk it (rows before columns, padding skipped)."""
        if ix == "row":
            raise Unsupported("pooling as a per-row value")
        win = pooling.window_of(node.op, node.args, node.kwargs)
        if node.name in self.staged:
            return self._staged_window(node, win, ix)
        src = self.index[node.args[0]["$"]]
        rank, nd = len(node.shape), win.dims
        if len(src.shape) != rank or rank < nd:
            raise Unsupported(f"{op_table.short(node.op)} of a {len(src.shape)}-d input")
        # The pooled dims: the last ``nd``, or from dim 1 in channels-last order (N, spatial..., C).
        first = int(node.kwargs.get(SPATIAL_FROM, rank - nd))
        sp = list(range(first, first + nd))
        c = self._coords(ix, node.shape)
        sstr = contiguous_strides(src.shape)
        base = self._as_var(linear([(c[d].expr, sstr[d]) for d in range(rank) if d not in sp]))
        starts = []
        for j in range(nd):
            o = c[sp[j]].expr
            s, p = win.stride[j], win.padding[j]
            # Coordinates fit an int whatever the tensor's size: only the element index needs 64 bits.
            start = self.fresh("s")
            self.emit(f"const int {start} = (int){o}{f' * {s}' if s != 1 else ''}{f' - {p}' if p else ''};")
            starts.append(start)
        acc = self.fresh("w")
        self.emit(f"float {acc} = {op_table.c_float('-inf') if win.how == 'max' else '0.f'};")
        sizes = [src.shape[d] for d in sp]
        outs = tuple(node.shape[d] for d in sp)
        checked = [j for j in range(nd) if win.padding[j] or win.kernel[j] > 1]
        edge_dims = _rare_edges(win, sizes, outs)
        split = " && ".join(f"{starts[j]} >= 0 && {starts[j]} + {(win.kernel[j] - 1) * win.dilation[j]} < {sizes[j]}"
                            for j in edge_dims)
        if split:
            # Most warps hold only windows wholly inside the input: for them the same loop runs unchecked (the
            # same elements in the same order), behind one test of the window's ends.
            self.emit(f"if ({split}) {{")
            self.indent += "  "
            self._window_loop(win, src, base, starts, sstr, sp, acc, checked=())
            self.indent = self.indent[:-2]
            self.emit("} else {")
            self.indent += "  "
        value = self._window_loop(win, src, base, starts, sstr, sp, acc, checked=checked)
        if split:
            self.indent = self.indent[:-2]
            self.emit("}")
        if win.how == "avg":
            acc = self._window_mean(acc, win, starts, sizes, outs)
        if node.dtype in ("bfloat16", "float16") and win.how == "avg" and node.name not in self.stored_only:
            var = self.fresh()
            self.emit(f"const float {var} = {_round_to(acc, node.dtype)};")
            acc = var
        if win.how == "max" and self.exact_in.get(value) == node.dtype:
            self.exact_in[acc] = node.dtype  # one of the inputs' values (or -inf): already of the output's dtype
        return acc

    def _staged_window(self, node: OpNode, win: pooling.Window, ix: str) -> str:
        """The window of the output the thread holds, read from the block's stage: the same elements in the
        same order as ``_window_loop``, padding as -inf (max) or 0 (sum), which leaves the result as skipping it."""
        st = self.staged[node.name]
        c = self._coords(ix, node.shape)
        if [g.expr for g in c] != st.coords:
            raise Unsupported("a staged pool read at another element than the one its thread holds")
        k, s, d, p = win.kernel[-1], win.stride[-1], win.dilation[-1], win.padding[-1]
        acc = self.fresh("w")
        self.emit(f"float {acc} = {op_table.c_float('-inf') if win.how == 'max' else '0.f'};")
        kv = self.fresh("k")
        local = f"({st.pos} - {st.first})" + (f" * {s}" if s != 1 else "")
        self.emit("#pragma unroll")
        self.emit(f"for (int {kv} = 0; {kv} < {k}; ++{kv}) {{")
        value = f"{st.array}[{local} + {kv}{f' * {d}' if d != 1 else ''}]"
        self.emit(f"  {acc} = stitch_max_nan({acc}, {value});" if win.how == "max" else f"  {acc} += {value};")
        self.emit("}")
        if win.how == "avg":
            start = self.fresh("s")
            self.emit(f"const int {start} = {st.pos}{f' * {s}' if s != 1 else ''}{f' - {p}' if p else ''};")
            trivial = pooling.Window(how="avg", kernel=(k,), stride=(s,), padding=(p,), dilation=(d,),
                                     count_include_pad=win.count_include_pad, divisor_override=win.divisor_override)
            acc = self._window_mean(acc, trivial, [start], [st.length], node.shape[-1:])
        if node.dtype in ("bfloat16", "float16") and win.how == "avg" and node.name not in self.stored_only:
            var = self.fresh()
            self.emit(f"const float {var} = {_round_to(acc, node.dtype)};")
            acc = var
        if win.how == "max" and st.exact:
            self.exact_in[acc] = node.dtype  # one of the inputs' values (or -inf): already of the output's dtype
        return acc

    def _window_loop(self, win: pooling.Window, src: OpNode, base: str, starts: list[str], sstr, sp: list[int],
                     acc: str, checked) -> str:
        """The window's elements folded into ``acc``, rows before columns; along the dims in ``checked``,
        elements outside the input skipped. Returns the loaded value's expression (its dtype tells whether a
        max stays exact)."""
        nd = win.dims
        saved_memo, saved_loads = dict(self.memo), self.save_loads()
        old_indent = self.indent
        self.depth += 1
        terms = []
        closing = 0
        for j in range(nd):
            size, k, dil = src.shape[sp[j]], win.kernel[j], win.dilation[j]
            pos = self.fresh("h")
            if k == 1:
                self.emit(f"{{ const int {pos} = {starts[j]};")
            else:
                kv = self.fresh("k")
                self.emit("#pragma unroll")
                self.emit(f"for (int {kv} = 0; {kv} < {k}; ++{kv}) {{")
                self.emit(f"  const int {pos} = {starts[j]} + {kv}{f' * {dil}' if dil != 1 else ''};")
            self.indent += "  "
            closing += 1
            if j in checked:
                self.emit(f"if ({pos} >= 0 && {pos} < {size}) {{")
                self.indent += "  "
                closing += 1
            terms.append((pos, sstr[sp[j]]))
        element = self._as_var(linear([(base, 1)] + terms))
        value = self.value(src.name, element)
        if win.how == "max":
            self.emit(f"{acc} = stitch_max_nan({acc}, {value});")
        else:
            self.emit(f"{acc} += {value};")
        self.indent = old_indent
        self.emit("}" * closing)
        self.depth -= 1
        self.memo = saved_memo
        self.restore_loads(saved_loads)
        return value

    def _window_mean(self, total: str, win: pooling.Window, starts: list[str], sizes: list[int],
                     outs: tuple[int, ...]) -> str:
        """``total`` divided as aten divides: by the override, else by the window's elements inside the padded
        input (``count_include_pad``) or inside the input. A dimension whose every window lies inside (the
        padded input) counts its kernel size, a constant."""
        if win.divisor_override:
            divisor = str(win.divisor_override)
        else:
            fixed, counts = 1, []
            for start, size, out, k, s, p in zip(starts, sizes, outs, win.kernel, win.stride, win.padding):
                last_end = (out - 1) * s - p + k  # where the last window ends
                if last_end <= size + p and (win.count_include_pad or (p == 0 and last_end <= size)):
                    fixed *= k
                    continue
                end = self.fresh("t")
                self.emit(f"const int {end} = {start} + {k} < {size + p} ? {start} + {k} : {size + p};")
                if win.count_include_pad:
                    counts.append(f"({end} - {start})")
                else:
                    counts.append(f"(({end} < {size} ? {end} : {size}) - ({start} > 0 ? {start} : 0))")
            divisor = " * ".join(([str(fixed)] if fixed != 1 or not counts else []) + counts)
        var = self.fresh()
        self.emit(f"const float {var} = {total} / (float)({divisor});")
        return var


EDGE_WARPS = 0.15  # the share of warps with an edge window up to which a pool's interior windows skip the checks


def _rare_edges(win, sizes: list[int], outs: tuple[int, ...]) -> list[int]:
    """The dims along which some window leaves the input, where few warps hold such a window (a warp whose
    windows straddle the test runs both loops); else none. A warp takes 32 neighbouring outputs along the
    last dim; an edge along another dim takes whole rows. Measured on an H100 (bench/results/memory_bound_h100):
    max pool 2-D of stride 1 and padding 1 (13% of warps at an edge) 1.26x faster; 3-D pools of stride 2 (25%
    and more) 7-8% slower."""
    nd = win.dims
    reach = [(win.kernel[j] - 1) * win.dilation[j] for j in range(nd)]
    edges = [sum(1 for o in range(outs[j]) if o * win.stride[j] - win.padding[j] < 0
                 or o * win.stride[j] - win.padding[j] + reach[j] >= sizes[j]) for j in range(nd)]
    inside = max(0.0, 1.0 - edges[-1] * 32 / max(1, outs[-1]))
    for j in range(nd - 1):
        inside *= 1.0 - edges[j] / max(1, outs[j])
    if not any(edges) or 1.0 - inside > EDGE_WARPS:
        return []
    return [j for j in range(nd) if edges[j]]
