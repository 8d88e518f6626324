"""Running sums and products (``cumsum`` / ``cumprod``) with the pointwise work before and after them.

* Along the row (the scanned dimension is the last): a warp per row walks it in chunks, each lane
  holding a run of neighbouring elements. The arithmetic is eager PyTorch's own, to the last
  association: chunks as long as eager's CUDA scan takes (``eager_chunk``), the running value of
  the chunks before combined into a chunk's first element, then a Sklansky scan of the chunk (at
  each level the upper half of every group takes the last value of its lower half), in registers
  and through warp shuffles instead of shared memory and barriers. So the results equal eager's,
  bit for bit, with NaN / Inf / underflow landing where eager's do (a cumulative product of a row
  that underflows before an Inf is NaN from there in both). Each element is read and written once.
* Across columns (the scanned dimension is not the last): neighbouring threads take neighbouring
  rows, each walks its row in order with a running value (eager's order too), every load
  coalesced across the warp.

The prologue (a mask, a flip, a scale) is computed where the scan reads its source; the epilogue,
where each element's result is stored, from that element's running value. Where the scan's results
are placed in the output by a flip along the scanned dimension (a reverse scan:
``flip(cumsum(flip(x)))``) or a ``cat`` along it (an exclusive scan: zeros, then the scan of all but
the last element), the kernel stores each running value at its place in the output and writes the
cat's other parts itself: the tensor is read once and written once, the scan's association unchanged.
Where the cat places the scan a few elements along (less than a chunk, not a whole lane's run), each
lane stores the outputs at its own positions and takes their values through a shuffle from the lane
that many elements back (the chunk before's, for the first lanes), so a warp's stores cover whole lines.
An epilogue that reads the scan at another element in any other way runs as a separate kernel.
"""

from __future__ import annotations

import math
import re

from attrs import define

from stitch_lsp.plan import op_table
from stitch_lsp.plan.fusion import Group, domain, reduction_dims
from stitch_lsp.plan.reduction_domain import Domain, domain_of
from stitch_lsp.coders.template.cuda_common import PREAMBLE
from stitch_lsp.coders.template.emitter import Digit, Unsupported
from stitch_lsp.coders.template.kernels import KernelSpec, _c_type, _finish, _Writer
from stitch_lsp.op_graph import OpNode

SCAN_THREADS = 256  # a thread a row (scans of a middle dimension)
# Chunks of a row's loop the compiler unrolls, so later chunks' loads are in flight during a chunk's shuffles
# (on an H100, KernelBench's exclusive cumsum: 91% of the copy bandwidth, 89% without).
SCAN_UNROLL = 4
_IDENTITY = {"sum": "0.f", "prod": "1.f"}
_OP = {"sum": "+", "prod": "*"}


@define
class Placement:
    """Where the scan's running values land in the outputs: ``node`` (a flip or a cat along the scanned
    dimension, the scan's only reader) takes element ``p`` of a row from the scan at ``offset + p``, or at
    ``row_len - 1 - p`` when ``reverse``; ``fills``: the cat's other parts and where they start."""

    node: OpNode
    reverse: bool
    offset: int
    fills: list[tuple[OpNode, int]]
    dom: Domain  # the rows of ``node``

    def position(self, p: str, row_len: int) -> str:
        return f"({row_len - 1} - {p})" if self.reverse else (f"({p} + {self.offset})" if self.offset else p)


def placement(group: Group, index: dict[str, OpNode], scan: OpNode, dim: int, dom: Domain) -> Placement | None:
    """The flip or cat through which every output reads the scan (elementwise after it), or None."""
    readers = [n for n in group.nodes if scan.name in index[n].refs()]
    if scan.name in group.outputs or len(readers) != 1:
        return None
    node = index[readers[0]]
    rank = len(scan.shape)
    fills: list[tuple[OpNode, int]] = []
    offset = 0
    if node.op == "aten.flip.default":
        if {d % rank for d in node.args[1] if scan.shape[d % rank] > 1} != {dim}:
            return None
        reverse = True
    elif node.op == "aten.cat.default" and len(node.shape) == rank:
        if (node.args[1] if len(node.args) > 1 else 0) % rank != dim:
            return None
        reverse = False
        start = 0
        for arg in node.args[0]:
            part = index[arg["$"]]
            if len(part.shape) != rank:  # the legacy empty (0,) part of a cat
                continue
            if part.name == scan.name:
                offset = start
            else:
                fills.append((part, start))
            start += part.shape[dim]
    else:
        return None
    # Whatever reads the placed values reads them elementwise (same shape, same index).
    after = {node.name}
    for n in group.nodes[group.nodes.index(node.name) + 1:]:
        m = index[n]
        if any(r in after for r in m.refs()):
            if (op_table.classify(m.op, m.dtype) != "pointwise" or tuple(m.shape) != tuple(node.shape)
                    or any(tuple(index[r].shape) != tuple(node.shape) for r in m.refs() if r in after)):
                return None
            after.add(n)
    if not group.outputs or any(o not in after for o in group.outputs):
        return None
    out_dom = domain_of(tuple(node.shape), [dim])
    if (out_dom.layout != dom.layout or out_dom.row_len != node.shape[dim] or dom.row_len != scan.shape[dim]
            or out_dom.rows != dom.rows or _kept(out_dom) != _kept(dom)):
        return None
    for part, _ in fills:
        if domain_of(tuple(part.shape), [dim]).rows != dom.rows:
            return None
    return Placement(node, reverse, offset, fills, out_dom)


def _kept(dom: Domain) -> list[int]:
    return [s for s, r in zip(dom.shape, dom.reduced) if not r]


def scan_kernel(group: Group, index: dict[str, OpNode], name: str) -> KernelSpec:
    scans = [n for n in group.nodes if op_table.classify(index[n].op, index[n].dtype) == "scan"]
    if len(scans) != 1 or any(op_table.classify(index[n].op, index[n].dtype) == "reduction" for n in group.nodes):
        raise Unsupported("a scan shares its kernel with no other scan or reduction")
    scan = index[scans[0]]
    how = op_table.SCAN_OPS[scan.op]
    if scan.kwargs.get("dtype") not in (None, {"$dtype": scan.dtype}):
        raise Unsupported("a scan that changes the dtype")
    dims, src = reduction_dims(scan, index)
    dom = domain(scan, index)
    place = placement(group, index, scan, dims[0], dom) if len(dims) == 1 else None
    if place is None:
        for o in group.outputs:
            if index[o].numel != dom.numel:
                raise Unsupported(f"output {o} is not the size of the scan")
    return _ScanKernel(group, index, name, _Scan(scan, how, dims[0], src, dom), place).build()


@define
class _Scan:
    """The group's scan: its node, its kind (``op_table.SCAN_OPS``), the dimension it runs along, the node whose
    elements it scans and its rows."""

    node: OpNode
    how: str
    dim: int
    src: OpNode
    dom: Domain


class _ScanKernel:
    """``scan_kernel``'s state: the scan, where its values land, and the kernel's writer."""

    def __init__(self, group: Group, index: dict[str, OpNode], name: str, scan: _Scan,
                 place: Placement | None) -> None:
        self.group, self.index, self.name, self.scan, self.place = group, index, name, scan.node, place
        self.how, self.op, self.dim, self.src, self.dom = scan.how, _OP[scan.how], scan.dim, scan.src, scan.dom
        w = self.w = _Writer(group, index, name)
        w.domain = self.dom.numel
        em = self.em = w.em
        em.fast_math = True
        em.half_outputs = all(index[o].dtype in ("bfloat16", "float16") for o in group.outputs)
        em.mark_exact()
        em.indent = "  "

    def build(self) -> KernelSpec:
        block, grid, note = self.along_rows() if self.dom.layout == "rows" else self.across_columns()
        place, w = self.place, self.w
        if place is not None:
            note += (", stored in reverse" if place.reverse else f", stored from position {place.offset}"
                     + (f" after {sum(p.shape[self.dim] for p, _ in place.fills)} filled" if place.fills else ""))
        src_text = PREAMBLE + f"""
extern "C" __global__ void __launch_bounds__({block}) {self.name}({w.signature()}) {{
{chr(10).join(self.em.lines)}
}}
"""
        src_text = re.sub(r"(?<![\w.])expf\(", "__expf(", src_text)
        src_text = _finish(src_text, self.group, self.index)
        return KernelSpec(name=self.name, source=src_text, kind="scan", params=w.leaves + self.group.outputs,
                          outputs=list(self.group.outputs), grid=grid, block=block, note=note)

    def along_rows(self) -> tuple[int, int, str]:
        """A warp a row, in chunks as eager takes them: (block, grid, note)."""
        em, w, how, place = self.em, self.w, self.how, self.place
        rows, row_len = self.dom.rows, self.dom.row_len
        # The association of eager's own scan (see the module's docstring), so the two agree to the last bit.
        chunk = eager_chunk(rows, row_len)
        k = chunk // 32  # consecutive elements a lane holds
        vec = k if row_len % k == 0 else 1
        w.vec = vec
        em.vector_hint = w.hint if vec > 1 else (lambda leaf, ix: None)
        block = 256
        em.emit(f"const long long row = (long long)blockIdx.x * {block // 32} + (threadIdx.x >> 5);")
        em.emit("const int lane = threadIdx.x & 31;")
        em.emit(f"if (row >= {rows}LL) return;")
        if place is not None:
            _fill_rows(em, self.group.outputs, place, self.dim, "row", "lane", 32)
        # A cat that places the scan a few elements along (an exclusive scan): each lane stores the value of
        # the lane ``offset`` below it (the chunk before's, for the first lanes), so a warp's stores start
        # where a row's memory does instead of straddling two lines; one more chunk stores the last values.
        shift = 0
        if place is not None and not place.reverse and 0 < place.offset < chunk and (k == 1 or place.offset % k):
            shift = place.offset
        em.emit(f"float carry = {_IDENTITY[how]};")
        if shift:
            em.emit(f"float before[{k}] = {{{', '.join([_IDENTITY[how]] * k)}}};")
        if SCAN_UNROLL > 1:
            em.emit(f"#pragma unroll {SCAN_UNROLL}")
        em.emit(f"for (int cb = 0; cb < {row_len + shift}; cb += {chunk}) {{")
        em.indent += "  "
        ixs, oks, ps = self.load_run(k, vec)
        x = self.scan_chunk(chunk, k, ixs, oks)
        if place is None:
            self.store_run(k, vec, ixs, oks, x)
        elif shift:
            self.store_shifted(k, shift, x)
        else:
            self.store_placed(k, vec, oks, ps, x)
        em.indent = em.indent[:-2]
        em.emit("}")
        grid = math.ceil(rows / (block // 32))
        note = (f"{len(self.group.nodes)} ops, {rows} rows of {row_len}, a warp a row, chunks of {chunk} "
                f"({k} a lane) scanned as eager scans them"
                + (f", each stored from {shift} element{'s' if shift > 1 else ''} back through the warp" if shift else ""))
        return block, grid, note

    def load_run(self, k: int, vec: int) -> tuple[list[str], list[str], list[str]]:
        """This lane's run of ``k`` elements of the chunk: their indices, whether each lies in the row, and their
        positions in it."""
        em, w = self.em, self.w
        rows, row_len = self.dom.rows, self.dom.row_len
        em.emit(f"const int j = cb + lane * {k};")
        em.memo = {}
        w.vec_loaded = {}
        if vec > 1:
            em.emit(f"const bool ok = j < {row_len};")
            em.emit("const int p = ok ? j : 0;")
            prefix = w.declare_chunk(0, f"row * {row_len}LL + p")
            ixs = [f"{prefix}{e}" for e in range(k)]
            oks = ["ok"] * k
            ps = ["p" if e == 0 else f"(p + {e})" for e in range(k)]
        else:
            ixs, oks, ps = [], [], []
            for e in range(k):
                em.emit(f"const bool ok{e} = j + {e} < {row_len};")
                em.emit(f"const int p{e} = ok{e} ? j + {e} : 0;")
                em.emit(f"[[maybe_unused]] const long long e{e}_0 = row * {row_len}LL + p{e};")
                ixs.append(f"e{e}_0")
                oks.append(f"ok{e}")
                ps.append(f"p{e}")
        if vec == 1:  # the row and the position are the index's digits: views of the source need no division
            for ix, pe in zip(ixs, ps):
                em.forms[ix] = (((Digit("row", rows), row_len), (Digit(pe, row_len), 1)), 0)
        return ixs, oks, ps

    def scan_chunk(self, chunk: int, k: int, ixs: list[str], oks: list[str]) -> list[str]:
        """The chunk's running values, one variable for each element of the lane's run, as eager associates them;
        the running value of the chunks before is carried in ``carry``."""
        em, how, op = self.em, self.how, self.op
        x = [em.fresh("x") for _ in range(k)]
        for e in range(k):
            em.emit(f"float {x[e]} = {oks[e]} ? {em.value(self.src.name, ixs[e])} : {_IDENTITY[how]};")
        # The chunk's first element takes the running value of the chunks before.
        em.emit(f"if (lane == 0) {x[0]} = {x[0]} {op} carry;")
        level = 0
        while (1 << level) < chunk:  # Sklansky: the upper half of each 2s-group takes the lower half's last
            step = 1 << level
            if step < k:  # both halves in this lane's registers
                for e in range(k):
                    if e & step:
                        em.emit(f"{x[e]} = {x[e]} {op} {x[((e >> (level + 1)) << (level + 1)) + step - 1]};")
            else:
                lanes = step // k
                em.emit(f"{{ const float t = __shfl_sync(0xffffffffu, {x[k - 1]}, "
                        f"((lane / {2 * lanes}) * {2 * lanes}) + {lanes - 1});")
                em.emit(f"  if (lane & {lanes}) {{ {' '.join(f'{v} = {v} {op} t;' for v in x)} }} }}")
            level += 1
        em.emit(f"carry = __shfl_sync(0xffffffffu, {x[k - 1]}, 31);")
        return x

    def store_run(self, k: int, vec: int, ixs: list[str], oks: list[str], x: list[str]) -> None:
        """The outputs at the scan's own elements (no flip or cat places them)."""
        em, index, scan = self.em, self.index, self.scan
        for e in range(k):
            em.memo[(scan.name, ixs[e])] = _rounded(em, x[e], scan.dtype)
        for o_idx, o in enumerate(self.group.outputs):
            vals = [em.value(o, ix) for ix in ixs]
            ctype = _c_type(index[o].dtype)
            if vec > 1:
                arr = em.fresh("st")
                em.emit(f"if (ok) {{ const float {arr}[{k}] = {{{', '.join(vals)}}}; "
                        f"stitch_stv<{k}>(out{o_idx} + c0, {arr}); }}")
            else:
                for e in range(k):
                    em.emit(f"if ({oks[e]}) out{o_idx}[e{e}_0] = stitch_from_float<{ctype}>({vals[e]});")

    def store_shifted(self, k: int, shift: int, x: list[str]) -> None:
        """The outputs of a cat that places the scan ``shift`` elements along: each lane stores at its own
        positions the values of the lanes ``shift`` elements back."""
        em, index, scan, place = self.em, self.index, self.scan, self.place
        rows, row_len = self.dom.rows, self.dom.row_len
        # Output element e of a lane's run is the scan's at d = e - shift of the run: in the run of the
        # lane floor(d / k) along (the chunk before's, past the first lane), element d mod k.
        out_len = place.dom.row_len
        ys = []
        for e in range(k):
            d = e - shift
            along, m = d // k, d % k
            if along == 0:
                ys.append(x[m])
                continue
            src_lane = f"((lane + {32 + along}) & 31)"
            now, then, y = em.fresh("t"), em.fresh("t"), em.fresh("y")
            em.emit(f"const float {now} = __shfl_sync(0xffffffffu, {x[m]}, {src_lane});")
            em.emit(f"const float {then} = __shfl_sync(0xffffffffu, before[{m}], {src_lane});")
            em.emit(f"const float {y} = lane >= {-along} ? {now} : {then};")
            ys.append(y)
        em.emit(" ".join(f"before[{m}] = {x[m]};" for m in range(k)))
        oixs = []
        for e in range(k):
            oix = em.fresh("o")
            q = "j" if e == 0 else f"(j + {e})"
            em.emit(f"const long long {oix} = row * {out_len}LL + {q};")
            em.forms[oix] = (((Digit("row", rows), out_len), (Digit(q, out_len), 1)), 0)
            em.memo[(place.node.name, oix)] = _rounded(em, ys[e], scan.dtype)
            oixs.append(oix)
        for o_idx, o in enumerate(self.group.outputs):
            vals = [em.value(o, ix) for ix in oixs]
            ctype = _c_type(index[o].dtype)
            singles = " ".join(f"if (j + {e} >= {shift} && j + {e} < {shift + row_len}) "
                               f"out{o_idx}[{oixs[e]}] = stitch_from_float<{ctype}>({vals[e]});" for e in range(k))
            if k > 1 and out_len % k == 0:
                arr = em.fresh("st")
                em.emit(f"if (j >= {shift} && j + {k} <= {shift + row_len}) {{ const float {arr}[{k}] = "
                        f"{{{', '.join(vals)}}}; stitch_stv<{k}>(out{o_idx} + {oixs[0]}, {arr}); }}")
                em.emit(f"else {{ {singles} }}")
            else:
                em.emit(singles)

    def store_placed(self, k: int, vec: int, oks: list[str], ps: list[str], x: list[str]) -> None:
        """The outputs of a flip or of a cat that places the scan a whole run along: each running value at its
        place."""
        em, index, scan, place = self.em, self.index, self.scan, self.place
        rows, row_len = self.dom.rows, self.dom.row_len
        out_len = place.dom.row_len
        oixs = []
        for e in range(k):
            q = em.fresh("q")
            em.emit(f"const int {q} = {place.position(ps[e], row_len)};")
            oix = em.fresh("o")
            em.emit(f"const long long {oix} = row * {out_len}LL + {q};")
            em.forms[oix] = (((Digit("row", rows), out_len), (Digit(q, out_len), 1)), 0)
            em.memo[(place.node.name, oix)] = _rounded(em, x[e], scan.dtype)
            oixs.append(oix)
        # A lane's run lands as one vector: reversed where the placement flips it, aligned where a cat
        # shifts it by a multiple of the run.
        whole = vec > 1 and out_len % k == 0 and place.offset % k == 0
        for o_idx, o in enumerate(self.group.outputs):
            vals = [em.value(o, ix) for ix in oixs]
            ctype = _c_type(index[o].dtype)
            if whole:
                arr = em.fresh("st")
                first = oixs[-1] if place.reverse else oixs[0]
                em.emit(f"if (ok) {{ const float {arr}[{k}] = {{{', '.join(vals[::-1] if place.reverse else vals)}}}; "
                        f"stitch_stv<{k}>(out{o_idx} + {first}, {arr}); }}")
            else:
                for e in range(k):
                    em.emit(f"if ({oks[e]}) out{o_idx}[{oixs[e]}] = stitch_from_float<{ctype}>({vals[e]});")

    def across_columns(self) -> tuple[int, int, str]:
        """A thread a row, walking it in order: (block, grid, note)."""
        em, w, how, place, dom, scan = self.em, self.w, self.how, self.place, self.dom, self.scan
        rows, row_len = dom.rows, dom.row_len
        w.vec = 1
        em.emit(f"const long long r = (long long)blockIdx.x * {SCAN_THREADS} + threadIdx.x;")
        em.emit(f"if (r >= {rows}LL) return;")
        if place is not None:
            _fill_rows(em, self.group.outputs, place, self.dim, "r", "0", 1)
        em.emit(f"float carry = {_IDENTITY[how]};")
        em.emit(f"for (int j = 0; j < {row_len}; ++j) {{")
        em.indent += "  "
        em.memo = {}
        w.vec_loaded = {}
        w.declare_chunk(0, dom.element("r", "j"))
        em.emit(f"carry = carry {self.op} {em.value(self.src.name, 'e0_0')};")
        at = "e0_0"
        if place is not None:
            at = em.fresh("o")
            em.emit(f"const long long {at} = {place.dom.element('r', place.position('j', row_len))};")
            em.memo[(place.node.name, at)] = _rounded(em, "carry", scan.dtype, copy=True)
        else:
            em.memo[(scan.name, "e0_0")] = _rounded(em, "carry", scan.dtype, copy=True)
        for o_idx, o in enumerate(self.group.outputs):
            em.emit(f"out{o_idx}[{at}] = stitch_from_float<{_c_type(self.index[o].dtype)}>({em.value(o, at)});")
        em.indent = em.indent[:-2]
        em.emit("}")
        block, grid = SCAN_THREADS, math.ceil(rows / SCAN_THREADS)
        note = f"{len(self.group.nodes)} ops, {rows} rows of {row_len} (stride {dom.inner}), a thread a row, in order"
        return block, grid, note


def _fill_rows(em, outputs: list[str], place: Placement, dim: int, row: str, first: str, step: int) -> None:
    """The cat's other parts, written by the row's own threads (``first``, ``first + step``, ...) before the scan."""
    for part, start in place.fills:
        size = part.shape[dim]
        em.emit(f"for (int t = {first}; t < {size}; t += {step}) {{")
        em.indent += "  "
        em.memo = {}
        pix = em.fresh("i")
        em.emit(f"[[maybe_unused]] const long long {pix} = {domain_of(tuple(part.shape), [dim]).element(row, 't')};")
        oix = em.fresh("o")
        em.emit(f"const long long {oix} = {place.dom.element(row, f'(t + {start})')};")
        em.memo[(place.node.name, oix)] = em.value(part.name, pix)
        for o_idx, o in enumerate(outputs):
            em.emit(f"out{o_idx}[{oix}] = stitch_from_float<{_c_type(em.index[o].dtype)}>({em.value(o, oix)});")
        em.indent = em.indent[:-2]
        em.emit("}")
    em.memo = {}


def eager_chunk(rows: int, row_len: int) -> int:
    """The elements eager PyTorch's CUDA scan of the last dimension takes at a time: twice its threads per row,
    a power of two from 32 to 1024 set by the ratio of row length to row count (in 32-bit unsigned
    arithmetic, whose wrap-around it keeps)."""
    lx = ly = 0
    while (1 << lx) < row_len:
        lx += 1
    while (1 << ly) < rows:
        ly += 1
    log_x = ((9 + ((lx - ly) & 0xFFFFFFFF)) & 0xFFFFFFFF) // 2
    return 2 << min(max(4, log_x), 9)


def _rounded(em, var: str, dtype: str, copy: bool = False) -> str:
    """The running value as eager stores it (rounded to a half dtype); ``copy``: into a fresh variable."""
    if dtype in ("bfloat16", "float16"):
        out = em.fresh("r")
        fn = "__bfloat162float(__float2bfloat16_rn" if dtype == "bfloat16" else "__half2float(__float2half_rn"
        em.emit(f"const float {out} = {fn}({var}));")
        return out
    if copy:
        out = em.fresh("r")
        em.emit(f"const float {out} = {var};")
        return out
    return var
