"""Which GEMMs the GEMM kernel family takes, and which of the ops after them become its epilogue.

A graph rewrite, pure and fast (no torch): an ``mm`` / ``addmm`` and the pointwise ops that read its
output element by element become one ``stitch.gemm`` node, which the template Coder lowers to a Triton
kernel (``gemm_triton``). What the rest of the graph still reads from that region (the epilogue's
outputs, or the GEMM's own output when a reduction or an unsupported view needs it) are the new node's
outputs; everything after them is lowered as before (row kernels, pointwise kernels).

The epilogue is the "front" of the consumer group: pointwise ops whose every value is one element of
an ``[M, N']`` tile at the GEMM's own row and column, reading the accumulator(s) — through views that
keep rows, and column slices of the output (a GEGLU's ``chunk``) — and tensors computed before the GEMM
that broadcast into it (biases, residuals, per-row scales, masks). Two GEMMs of the same ``A`` that one
epilogue reads together (SwiGLU's gate and up projections), or two column halves of one GEMM, become
two accumulators of one kernel.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable

from attrs import define, evolve, field

from stitch_lsp.plan import op_table
from stitch_lsp.plan.gemm_ops import TRITON_POINTWISE, operand_count
from stitch_lsp.op_graph import OpGraph, OpNode
from stitch_lsp.serde import from_dict, to_dict

GEMM_OP = "stitch.gemm"
GEMM_DTYPES = ("float32", "bfloat16", "float16")
LEAF_DTYPES = ("float32", "bfloat16", "float16", "bool", "int32", "int64")
MAX_ACCUMULATORS = 2  # registers: two 128x128 fp32 accumulators already take 128 a thread
# Row reductions over the GEMM's N (softmax, logsumexp, sums, max) fuse when one tile holds a whole row.
ROW_TILE_MAX = 256
ROW_REDUCTIONS = {"aten.sum.dim_IntList", "aten.mean.dim", "aten.amax.default", "aten.amin.default"}
# Views that keep every element where it is (same linear index), and those that only read.
_SAME_INDEX = {"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.alias.default",
               "aten.clone.default", "aten.detach.default", "aten.unsqueeze.default", "aten.squeeze.dim",
               "aten.squeeze.dims", "aten.squeeze.default", "aten.contiguous.default", "aten.lift_fresh_copy.default"}
_TRANSPOSES = {"aten.permute.default", "aten.t.default", "aten.transpose.int"}


@define
class GemmAcc:
    """One accumulator: ``A @ B[:, offset : offset + N]`` (then ``alpha *`` it ``+ beta * bias``)."""

    gemm: str  # the mm / addmm node it computes
    b: str  # B's tensor
    b_trans: bool  # B is stored as [N_full, K] (a linear layer's weight) and read transposed
    b_shape: list[int]  # the stored tensor's shape
    offset: int = 0  # first output column of the GEMM this accumulator covers
    bias: str = ""  # addmm's bias, broadcast over [M, N_full]
    bias_shape: list[int] = field(factory=list)
    alpha: float = 1.0
    beta: float = 1.0
    n_full: int = 0  # the GEMM's own output width


@define
class EpilogueNode:
    """An op the kernel computes after the GEMM (a copy of the graph's node)."""

    name: str
    op: str
    args_json: str
    kwargs_json: str
    shape: list[int]
    dtype: str

    def node(self) -> OpNode:
        return OpNode(self.name, self.op, self.args_json, self.kwargs_json, tuple(self.shape), self.dtype)


@define
class LeafRead:
    """A tensor the epilogue loads: ``base`` read as a tensor of ``shape`` (a reshaped view of it, or itself)."""

    base: str
    shape: list[int]
    dtype: str


@define
class GemmSpec:
    """Everything the kernel writer needs; stored on the ``stitch.gemm`` node."""

    a: str
    a_trans: bool  # A is stored as [K, M]
    m: int
    n: int  # the tile domain's width: the epilogue's (or the GEMM's) output columns
    k: int
    dtype: str
    precision: str  # "tf32x3" | "tf32" for fp32 inputs; "" for bf16 / fp16 (one pass)
    accs: list[GemmAcc] = field(factory=list)
    acc_of: dict[str, int] = field(factory=dict)  # the GEMMs and their views -> accumulator
    epilogue: list[EpilogueNode] = field(factory=list)  # in graph order
    reads: dict[str, LeafRead] = field(factory=dict)  # name an epilogue op reads -> what to load
    outputs: list[str] = field(factory=list)
    output_shapes: list[list[int]] = field(factory=list)
    output_dtypes: list[str] = field(factory=list)
    tile: list[int] = field(factory=list)  # BM, BN, BK, GROUP_M, warps, stages (gemm_tiles.Tile)
    tile_source: str = ""  # "cache" (measured here) | "table" (measured on an H100, by shape class)
    constants: list[str] = field(factory=list)  # epilogue values made of constants (also left in the graph)
    rows: list[str] = field(factory=list)  # epilogue values with one element per row (after a row reduction)

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k * len(self.accs)

    @property
    def reduces_rows(self) -> bool:
        """The epilogue reduces over the tile's columns: one tile must hold a whole row."""
        return any(e.op in ROW_REDUCTIONS for e in self.epilogue)

    def leaves(self) -> list[str]:
        """The kernel's tensor parameters after A and the B's: biases and epilogue inputs, each once."""
        out: list[str] = []
        for acc in self.accs:
            if acc.bias and acc.bias not in out:
                out.append(acc.bias)
        for read in self.reads.values():
            if read.base not in out:
                out.append(read.base)
        return out

    def inputs(self) -> list[str]:
        return [self.a] + [acc.b for acc in self.accs] + self.leaves()

    def input_specs(self) -> list[tuple[list[int], str]]:
        """(shape, dtype) of each of ``kernel_inputs()`` (a leaf read through a reshape: the view's shape,
        which has the base's elements in the base's order)."""
        shapes: dict[str, tuple[list[int], str]] = {
            self.a: ([self.k, self.m] if self.a_trans else [self.m, self.k], self.dtype)}
        for acc in self.accs:
            shapes.setdefault(acc.b, (list(acc.b_shape), self.dtype))
            if acc.bias:
                shapes.setdefault(acc.bias, (list(acc.bias_shape), self.dtype))
        for read in self.reads.values():
            shapes.setdefault(read.base, (list(read.shape), read.dtype))
        return [shapes[name] for name in self.kernel_inputs()]

    def kernel_inputs(self) -> list[str]:
        """``inputs()`` without repeats (a GEGLU's two accumulators read one weight): the kernel's parameters."""
        return list(dict.fromkeys(self.inputs()))

    def describe(self) -> str:
        ops = [op_table.short(e.op) for e in self.epilogue
               if (e.op in TRITON_POINTWISE or e.op in ROW_REDUCTIONS) and e.op != "aten._to_copy.default"]
        kind = {"tf32x3": "3xTF32 (fp32 accuracy)", "tf32": "TF32, as the reference allows"}.get(
            self.precision, f"{self.dtype}, one pass")
        two = f", {len(self.accs)} accumulators" if len(self.accs) > 1 else ""
        tail = f" + epilogue {', '.join(ops)}" if ops else ""
        return f"Triton GEMM {self.m}x{self.n}x{self.k} {kind}{two}{tail}"


def spec_of(node: OpNode) -> GemmSpec:
    return from_dict(json.loads(node.kwargs_json)["spec"], GemmSpec)


# ----------------------------------------------------------------------------------------- matching


@define
class _Gemm:
    name: str
    a: str
    a_trans: bool
    b: str
    b_trans: bool
    b_shape: list[int]
    m: int
    n: int
    k: int
    dtype: str
    bias: str = ""
    bias_shape: list[int] = field(factory=list)
    alpha: float = 1.0
    beta: float = 1.0


def _ref(arg: Any) -> str | None:
    return arg["$"] if isinstance(arg, dict) and "$" in arg else None


def _through_transpose(name: str, index: dict[str, OpNode]) -> tuple[str, bool]:
    """(stored tensor, transposed) for a 2-D matrix that may be a transpose of a stored one."""
    node = index[name]
    if node.op in _TRANSPOSES and len(node.shape) == 2:
        src = _ref(node.args[0]) if node.args else None
        if src is not None and len(index[src].shape) == 2:
            if node.op == "aten.permute.default" and [d % 2 for d in node.args[1]] != [1, 0]:
                return name, False
            return src, True
    return name, False


def _as_gemm(node: OpNode, index: dict[str, OpNode]) -> _Gemm | None:
    args, kw = node.args, node.kwargs
    if node.op == "aten.mm.default" and len(args) == 2 and not kw:
        bias, a, b, alpha, beta = None, _ref(args[0]), _ref(args[1]), 1.0, 1.0
    elif node.op == "aten.addmm.default" and len(args) == 3:
        if set(kw) - {"alpha", "beta"} or not all(isinstance(kw.get(x, 1), (int, float)) for x in ("alpha", "beta")):
            return None
        bias, a, b = _ref(args[0]), _ref(args[1]), _ref(args[2])
        alpha, beta = float(kw.get("alpha", 1)), float(kw.get("beta", 1))
        if bias is None:
            return None
    else:
        return None
    if a is None or b is None or node.dtype not in GEMM_DTYPES or len(node.shape) != 2:
        return None
    A, B = index[a], index[b]
    if len(A.shape) != 2 or len(B.shape) != 2 or A.dtype != node.dtype or B.dtype != node.dtype:
        return None
    m, k = A.shape
    n = B.shape[1]
    if min(m, n, k) < 16:
        return None  # a tensor-core tile is 16 wide; smaller GEMMs gain nothing from a kernel of their own
    a_base, a_trans = _through_transpose(a, index)
    b_base, b_trans = _through_transpose(b, index)
    gemm = _Gemm(node.name, a_base, a_trans, b_base, b_trans, list(index[b_base].shape), m, n, k, node.dtype,
                 alpha=alpha, beta=beta)
    if bias is not None:
        bnode = index[bias]
        if bnode.dtype != node.dtype or not _broadcasts(bnode.shape, (m, n)):
            return None
        gemm.bias, gemm.bias_shape = bias, list(bnode.shape)
    return gemm


def _broadcasts(src, dst) -> bool:
    if len(src) > len(dst):
        return False
    return all(s in (1, d) for s, d in zip(reversed(tuple(src)), reversed(tuple(dst))))


def _rows(shape, m: int) -> bool:
    """``shape`` is ``[..., N']`` with its leading sizes multiplying to ``m``: rows of the GEMM's output."""
    return len(shape) >= 1 and math.prod(shape[:-1]) == m


def _slice_columns(node: OpNode, src: OpNode) -> int | None:
    """The first column of a slice of ``src``'s last dimension (step 1), or None for any other slice."""
    args = node.args
    dim = args[1] if len(args) > 1 else 0
    rank = len(src.shape)
    if rank == 0 or dim % rank != rank - 1 or (len(args) > 4 and args[4] != 1):
        return None if tuple(node.shape) != tuple(src.shape) else 0
    start = args[2] if len(args) > 2 and args[2] is not None else 0
    size = src.shape[-1]
    start = max(0, start + size if start < 0 else start)
    return min(start, size)


def _view_columns(node: OpNode, src: OpNode, m: int) -> int | None:
    """How far a view of a row-structured value moves its columns (0: not at all), or None if it moves rows."""
    if not _rows(node.shape, m):
        return None
    if node.op in _SAME_INDEX:
        return 0 if node.numel == src.numel and node.shape[-1] == src.shape[-1] else None
    if node.op == "aten.slice.Tensor":
        return _slice_columns(node, src)
    return None


@define
class _Front:
    """The epilogue being grown from one GEMM."""

    first: _Gemm
    accs: list[tuple[str, int]] = field(factory=list)  # (gemm, column offset)
    gemms: dict[str, _Gemm] = field(factory=dict)
    acc_views: dict[str, tuple[str, int]] = field(factory=dict)  # GEMM views: name -> (gemm, offset)
    nodes: dict[str, OpNode] = field(factory=dict)  # computed values of the epilogue, in graph order
    reads: dict[str, tuple[str, tuple[int, ...], str]] = field(factory=dict)  # leaf name -> (base, shape, dtype)
    aliases: dict[str, str] = field(factory=dict)  # views of leaves -> their base
    after: set[str] = field(factory=set)  # values that depend on the absorbed GEMMs (cannot be loaded)
    leaves_fixed: set[str] = field(factory=set)  # GEMMs read as plain inputs (not absorbed)
    constants: set[str] = field(factory=set)  # epilogue values that depend on no tensor (copied, not moved)
    rows: set[str] = field(factory=set)  # epilogue values with one element per row (row reductions and after)
    n: int | None = None


def _grow(first: _Gemm, graph: OpGraph, index: dict[str, OpNode], gemms: dict[str, _Gemm],
          taken: set[str]) -> _Front:
    front = _Front(first=first, gemms={first.name: first})
    front.acc_views[first.name] = (first.name, 0)
    front.after.add(first.name)
    started = False
    for node in graph.nodes:
        if node.name == first.name:
            started = True
            continue
        if not started:
            continue
        refs = node.refs()
        if not any(r in front.after for r in refs):
            continue  # computed without the GEMM: an input the epilogue may load
        front.after.add(node.name)
        klass = op_table.classify(node.op, node.dtype)
        if klass == "view":
            src = refs[0] if refs else None
            if src in front.acc_views:
                shift = _view_columns(node, index[src], first.m)
                gemm, offset = front.acc_views[src]
                if shift is not None and _width_ok(front, node.shape[-1]):
                    front.acc_views[node.name] = (gemm, offset + shift)
            elif src in front.rows and node.op in _SAME_INDEX and node.numel == first.m:
                front.nodes[node.name] = node  # a per-row value, reshaped ([M, 1] <-> [M])
                front.rows.add(node.name)
            elif src in front.nodes and node.op in _SAME_INDEX and _rows(node.shape, first.m) \
                    and node.shape[-1] == index[src].shape[-1]:
                front.nodes[node.name] = node
            continue
        if klass == "reduction":
            _admit_reduction(node, front, index)
            continue
        if klass != "pointwise" or node.op not in TRITON_POINTWISE or not _rows(node.shape, first.m):
            continue
        if node.dtype not in LEAF_DTYPES:
            continue
        per_row = node.numel == first.m and any(r in front.rows for r in refs)
        if not per_row and not _width_ok(front, node.shape[-1]):
            continue
        if _admit(node, front, index, gemms, taken):
            if per_row:
                front.rows.add(node.name)
            else:
                front.n = node.shape[-1]
            front.nodes[node.name] = node
    return front


def _admit_reduction(node: OpNode, front: _Front, index: dict[str, OpNode]) -> None:
    """A sum / mean / max / min over the last dimension of an epilogue value joins the epilogue when a
    whole row fits one tile (the kernel then reduces across the tile's columns)."""
    refs = node.refs()
    if node.op not in ROW_REDUCTIONS or len(refs) != 1 or node.dtype not in GEMM_DTYPES:
        return
    src = refs[0]
    if src not in front.nodes and src not in front.acc_views or src in front.rows:
        return
    shape = index[src].shape
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    dims = [dims] if isinstance(dims, int) else list(dims or [])
    if [d % len(shape) for d in dims] != [len(shape) - 1] or node.numel != front.first.m:
        return
    width = shape[-1]
    if width > ROW_TILE_MAX or not _width_ok(front, width):
        return
    if src in front.acc_views and src not in front.nodes:
        acc = front.acc_views[src]
        if acc not in front.accs:
            if len(front.accs) >= MAX_ACCUMULATORS:
                return
            front.accs.append(acc)
    front.n = width
    front.rows.add(node.name)
    front.nodes[node.name] = node


def _width_ok(front: _Front, width: int) -> bool:
    return front.n is None or front.n == width


def _admit(node: OpNode, front: _Front, index: dict[str, OpNode], gemms: dict[str, _Gemm], taken: set[str]) -> bool:
    """Whether ``node`` joins the epilogue: each tensor it reads is an epilogue value, an accumulator, or a
    tensor computed before the GEMM that broadcasts into it."""
    wanted_accs: list[tuple[str, int]] = []
    new_gemms: list[_Gemm] = []
    reads: dict[str, tuple[str, tuple[int, ...], str]] = {}
    for r in node.refs():
        if r in front.rows and node.numel != front.first.m and (
                len(index[r].shape) != len(node.shape) or index[r].shape[-1] != 1):
            return False  # a per-row value broadcast along the wrong dimension
        if r in front.nodes:
            continue
        if r in front.acc_views:
            if index[r].shape[-1] != node.shape[-1]:
                return False
            wanted_accs.append(front.acc_views[r])
            continue
        other = gemms.get(r)
        if other is not None and r not in taken and r not in front.leaves_fixed and r not in front.after \
                and _pairs_with(front.first, other) and other.n == node.shape[-1]:
            wanted_accs.append((r, 0))
            new_gemms.append(other)
            continue
        if r in front.after:
            return False  # a value after the GEMM that the epilogue cannot compute (a reduction, say)
        constants = _constant_chain(r, index)
        if constants is not None:  # zeros_like(y) - 1: computed in the kernel, not loaded
            for c in constants:
                front.nodes.setdefault(c, index[c])
                front.constants.add(c)
            continue
        leaf = _leaf(r, index, front)
        if leaf is None or not _broadcasts(leaf[1], node.shape):
            return False
        reads[r] = leaf
    accs = list(front.accs)
    for acc in wanted_accs:
        if acc not in accs:
            accs.append(acc)
    if len(accs) > MAX_ACCUMULATORS:
        return False
    front.accs = accs
    for g in new_gemms:
        front.gemms[g.name] = g
        front.acc_views[g.name] = (g.name, 0)
        front.after.add(g.name)
    front.reads.update(reads)
    return True


def _constant_chain(name: str, index: dict[str, OpNode]) -> list[str] | None:
    """The nodes (in dependency order) of a value computed from constants alone, or None."""
    node = index[name]
    if node.op in op_table.CREATION_OPS:
        return [name] if node.dtype in LEAF_DTYPES else None
    if node.op not in TRITON_POINTWISE or node.dtype not in LEAF_DTYPES or not node.refs():
        return None
    out: list[str] = []
    for r in node.refs():
        chain = _constant_chain(r, index)
        if chain is None:
            return None
        out += [c for c in chain if c not in out]
    return out + [name]


def _pairs_with(a: _Gemm, b: _Gemm) -> bool:
    return (a.a, a.a_trans, a.m, a.k, a.dtype) == (b.a, b.a_trans, b.m, b.k, b.dtype)


def _leaf(name: str, index: dict[str, OpNode], front: _Front) -> tuple[str, tuple[int, ...], str] | None:
    """(base tensor, shape to read it at, dtype) for a tensor the epilogue loads: the tensor itself, or a
    reshaping view of one (read at the view's shape from the base's memory)."""
    node = index[name]
    if node.dtype not in LEAF_DTYPES:
        return None
    base = name
    seen = 0
    while index[base].op in _SAME_INDEX and seen < 16:
        src = _ref(index[base].args[0]) if index[base].args else None
        if src is None or index[src].numel != index[base].numel:
            break
        base, seen = src, seen + 1
    if index[base].op in op_table.VIEW_OPS and index[base].op not in _SAME_INDEX and base != name:
        base = name  # the chain starts at a view that moves elements: load the view's own tensor
    return base, tuple(node.shape), node.dtype


# ----------------------------------------------------------------------------------------- the rewrite


def _needed(front: _Front, index: dict[str, OpNode], users: dict[str, list[str]], outputs: set[str]) -> list[str]:
    """Epilogue values (and accumulator views) the rest of the graph reads: the kernel's outputs."""
    inside = set(front.nodes) | set(front.acc_views)
    out = []
    for name in list(front.acc_views) + list(front.nodes):
        if name in front.constants:
            continue  # stays in the graph for whoever else reads it
        if name in outputs or any(u not in inside for u in users.get(name, [])):
            out.append(name)
    return out


def _consistent(front: _Front, needed: list[str], index: dict[str, OpNode]) -> bool:
    """Every output is one [M, N'] tile at the kernel's own positions."""
    width = front.n
    for name in needed:
        shape = index[name].shape
        if width is None:
            width = shape[-1]
        if name in front.rows:
            continue  # one value per row, stored by row
        if not _rows(shape, front.first.m) or shape[-1] != width:
            return False
        if name in front.acc_views:
            gemm, offset = front.acc_views[name]
            if (gemm, offset) not in front.accs:
                front.accs.append((gemm, offset))
    front.n = width
    return len(front.accs) <= MAX_ACCUMULATORS


def _live(front: _Front, needed: list[str], index: dict[str, OpNode]) -> list[str]:
    """The epilogue ops the outputs need, in graph order."""
    keep: set[str] = set()
    stack = list(needed)
    while stack:
        name = stack.pop()
        if name in keep or name not in front.nodes:
            continue
        keep.add(name)
        stack.extend(index[name].refs())
    return [n for n in front.nodes if n in keep]


def _spec(front: _Front, needed: list[str], index: dict[str, OpNode], allow_tf32: bool) -> GemmSpec:
    first = front.first
    precision = ("tf32" if allow_tf32 else "tf32x3") if first.dtype == "float32" else ""
    accs = []
    for gemm, offset in front.accs:
        g = front.gemms[gemm]
        accs.append(GemmAcc(gemm=gemm, b=g.b, b_trans=g.b_trans, b_shape=list(g.b_shape), offset=offset,
                            bias=g.bias, bias_shape=list(g.bias_shape), alpha=g.alpha, beta=g.beta, n_full=g.n))
    acc_of = {}
    for name, (gemm, offset) in front.acc_views.items():
        if (gemm, offset) in front.accs and index[name].shape[-1] == front.n:
            acc_of[name] = front.accs.index((gemm, offset))
    live = _live(front, needed, index)
    reads = {}
    for name in live:
        for r in index[name].refs():
            if r in front.reads:
                base, shape, dtype = front.reads[r]
                reads[r] = LeafRead(base, list(shape), dtype)
    return GemmSpec(
        a=first.a, a_trans=first.a_trans, m=first.m, n=int(front.n), k=first.k, dtype=first.dtype,
        precision=precision, accs=accs, acc_of=acc_of,
        epilogue=[EpilogueNode(n, index[n].op, index[n].args_json, index[n].kwargs_json, list(index[n].shape),
                               index[n].dtype) for n in live],
        reads=reads, outputs=list(needed), output_shapes=[list(index[o].shape) for o in needed],
        output_dtypes=[index[o].dtype for o in needed], constants=[c for c in live if c in front.constants],
        rows=[r for r in live if r in front.rows],
    )


def _gemm_only(g: _Gemm, index: dict[str, OpNode], allow_tf32: bool) -> GemmSpec:
    front = _Front(first=g, gemms={g.name: g}, accs=[(g.name, 0)], acc_views={g.name: (g.name, 0)}, n=g.n)
    return _spec(front, [g.name], index, allow_tf32)


def find_gemm_specs(graph: OpGraph) -> list[GemmSpec]:
    """Each GEMM the family could take, with the largest epilogue it can fuse (no policy applied)."""
    index = graph.index()
    users = graph.users()
    outputs = set(graph.outputs)
    gemms = {n.name: g for n in graph.nodes if (g := _as_gemm(n, index)) is not None}
    taken: set[str] = set()
    specs = []
    for node in graph.nodes:
        g = gemms.get(node.name)
        if g is None or node.name in taken or not users.get(node.name) and node.name not in outputs:
            continue
        front = _grow(g, graph, index, gemms, taken)
        needed = _needed(front, index, users, outputs)
        ok = bool(needed) and _consistent(front, needed, index)
        absorbed = {gemm for gemm, _ in front.accs} | {g.name}
        # A GEMM read outside the epilogue must be one of the outputs (stored whole).
        for gemm in absorbed:
            if any(u not in front.nodes and u not in front.acc_views for u in users.get(gemm, [])) \
                    and gemm not in needed:
                ok = False
        # What the kernel loads must exist before it runs: nothing computed from its own GEMMs.
        if ok and set(front.reads) & _descendants(graph, absorbed):
            ok = False
        spec = _spec(front, needed, index, graph.allow_tf32) if ok else _gemm_only(g, index, graph.allow_tf32)
        taken |= {acc.gemm for acc in spec.accs}
        specs.append(spec)
    return specs


def _descendants(graph: OpGraph, sources: set[str]) -> set[str]:
    out = set(sources)
    for node in graph.nodes:
        if any(r in out for r in node.refs()):
            out.add(node.name)
    return out


def rewrite(graph: OpGraph, specs: list[GemmSpec]) -> OpGraph:
    """The graph with each spec's GEMMs and epilogue replaced by one ``stitch.gemm`` node."""
    index = graph.index()
    removed: set[str] = set()
    added: list[OpNode] = []
    for k, spec in enumerate(specs):
        removed |= ({acc.gemm for acc in spec.accs} | {e.name for e in spec.epilogue} | set(spec.acc_of)) \
            - set(spec.constants)
        args = json.dumps([{"$": name} for name in spec.kernel_inputs()])
        kwargs = json.dumps({"spec": to_dict(spec)})
        if len(spec.outputs) == 1:
            out = index[spec.outputs[0]]
            added.append(OpNode(out.name, GEMM_OP, args, kwargs, out.shape, out.dtype, list(out.shape_expr)))
            continue
        tuple_name = f"stitch_gemm_{k}"
        added.append(OpNode(tuple_name, GEMM_OP, args, kwargs, (), "tuple"))
        for i, name in enumerate(spec.outputs):
            out = index[name]
            added.append(OpNode(name, "getitem", json.dumps([{"$": tuple_name}, i]), "{}", out.shape, out.dtype,
                                list(out.shape_expr)))
    nodes = [n for n in graph.nodes if n.name not in removed] + added
    nodes = _drop_dead_views(nodes, set(graph.outputs))
    return evolve(graph, nodes=_topological(nodes, [n.name for n in graph.nodes]))


def _drop_dead_views(nodes: list[OpNode], outputs: set[str]) -> list[OpNode]:
    """Views nothing reads any more (the transposed weights the GEMMs read in place)."""
    while True:
        used = {r for n in nodes for r in n.refs()} | outputs
        dead = [n for n in nodes if n.name not in used and op_table.classify(n.op, n.dtype) == "view"]
        if not dead:
            return nodes
        gone = {n.name for n in dead}
        nodes = [n for n in nodes if n.name not in gone]


def _topological(nodes: list[OpNode], order: list[str]) -> list[OpNode]:
    """Nodes in an order where each follows what it reads, as close to the original order as possible."""
    position = {name: i for i, name in enumerate(order)}
    by_name = {n.name: n for n in nodes}

    def rank(n: OpNode) -> float:
        if n.name in position:
            return position[n.name]
        return max((position.get(r, -1) for r in n.refs()), default=-1) + 0.5

    pending = sorted(nodes, key=rank)
    done: list[OpNode] = []
    placed: set[str] = set()
    while pending:
        for i, n in enumerate(pending):
            if all(r in placed or r not in by_name for r in n.refs()):
                done.append(n)
                placed.add(n.name)
                pending.pop(i)
                break
        else:  # a cycle cannot arise from a valid spec; keep the rest in order rather than loop
            done.extend(pending)
            break
    return done


def fuse_gemms(graph: OpGraph, choose: Callable[[GemmSpec], GemmSpec | None]) -> tuple[OpGraph, list[GemmSpec]]:
    """Rewrite the GEMMs that ``choose`` takes (it returns the spec with its tile, or None to leave the GEMM
    on cuBLAS). Returns the new graph and the specs taken."""
    chosen = [s for s in (choose(spec) for spec in find_gemm_specs(graph)) if s is not None]
    if not chosen:
        return graph, []
    return rewrite(graph, chosen), chosen
