"""The epilogue walk: which ops after a GEMM its kernel computes before storing the tile.

The epilogue is the "front" of the consumer group: pointwise ops whose every value is one element of
an ``[M, N']`` tile at the GEMM's own row and column, reading the accumulator(s) — through views that
keep rows, and column slices of the output (a GEGLU's ``chunk``) — and tensors computed before the GEMM
that broadcast into it (biases, residuals, per-row scales, masks). Row reductions over the tile's columns
join when one tile holds a whole row. Two GEMMs of the same ``A`` that one epilogue reads together
(SwiGLU's gate and up projections), or two column halves of one GEMM, become two accumulators of one kernel.
"""

from __future__ import annotations

import math

from attrs import define, field

from stitch_lsp.plan import op_table
from stitch_lsp.plan.gemm_operands import MatchedGemm, broadcasts, pairs_with, ref
from stitch_lsp.plan.gemm_ops import TRITON_POINTWISE
from stitch_lsp.plan.gemm_spec import GEMM_DTYPES, LEAF_DTYPES, MAX_ACCUMULATORS, ROW_REDUCTIONS, ROW_TILE_MAX
from stitch_lsp.op_graph import OpGraph, OpNode

# Views that keep every element where it is (same linear index), and those that only read.
_SAME_INDEX = {"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.alias.default",
               "aten.clone.default", "aten.detach.default", "aten.unsqueeze.default", "aten.squeeze.dim",
               "aten.squeeze.dims", "aten.squeeze.default", "aten.contiguous.default", "aten.lift_fresh_copy.default"}


def has_rows(shape, m: int) -> bool:
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
    if not has_rows(node.shape, m):
        return None
    if node.op in _SAME_INDEX:
        return 0 if node.numel == src.numel and node.shape[-1] == src.shape[-1] else None
    if node.op == "aten.slice.Tensor":
        return _slice_columns(node, src)
    return None


@define
class EpilogueFront:
    """The epilogue being grown from one GEMM."""

    first: MatchedGemm
    accs: list[tuple[str, int]] = field(factory=list)  # (gemm, column offset)
    gemms: dict[str, MatchedGemm] = field(factory=dict)
    acc_views: dict[str, tuple[str, int]] = field(factory=dict)  # GEMM views: name -> (gemm, offset)
    nodes: dict[str, OpNode] = field(factory=dict)  # computed values of the epilogue, in graph order
    reads: dict[str, tuple[str, tuple[int, ...], str]] = field(factory=dict)  # leaf name -> (base, shape, dtype)
    aliases: dict[str, str] = field(factory=dict)  # views of leaves -> their base
    after: set[str] = field(factory=set)  # values that depend on the absorbed GEMMs (cannot be loaded)
    leaves_fixed: set[str] = field(factory=set)  # GEMMs read as plain inputs (not absorbed)
    constants: set[str] = field(factory=set)  # epilogue values that depend on no tensor (copied, not moved)
    rows: set[str] = field(factory=set)  # epilogue values with one element per row (row reductions and after)
    n: int | None = None


def grow_epilogue(first: MatchedGemm, graph: OpGraph, index: dict[str, OpNode], gemms: dict[str, MatchedGemm],
          taken: set[str]) -> EpilogueFront:
    front = EpilogueFront(first=first, gemms={first.name: first})
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
            elif src in front.nodes and node.op in _SAME_INDEX and has_rows(node.shape, first.m) \
                    and node.shape[-1] == index[src].shape[-1]:
                front.nodes[node.name] = node
            continue
        if klass == "reduction":
            _admit_reduction(node, front, index)
            continue
        if klass != "pointwise" or node.op not in TRITON_POINTWISE or not has_rows(node.shape, first.m):
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


def _admit_reduction(node: OpNode, front: EpilogueFront, index: dict[str, OpNode]) -> None:
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


def _width_ok(front: EpilogueFront, width: int) -> bool:
    return front.n is None or front.n == width


def _admit(node: OpNode, front: EpilogueFront, index: dict[str, OpNode], gemms: dict[str, MatchedGemm], taken: set[str]) -> bool:
    """Whether ``node`` joins the epilogue: each tensor it reads is an epilogue value, an accumulator, or a
    tensor computed before the GEMM that broadcasts into it."""
    wanted_accs: list[tuple[str, int]] = []
    new_gemms: list[MatchedGemm] = []
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
                and pairs_with(front.first, other) and other.n == node.shape[-1]:
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
        if leaf is None or not broadcasts(leaf[1], node.shape):
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


def _leaf(name: str, index: dict[str, OpNode], front: EpilogueFront) -> tuple[str, tuple[int, ...], str] | None:
    """(base tensor, shape to read it at, dtype) for a tensor the epilogue loads: the tensor itself, or a
    reshaping view of one (read at the view's shape from the base's memory)."""
    node = index[name]
    if node.dtype not in LEAF_DTYPES:
        return None
    base = name
    seen = 0
    while index[base].op in _SAME_INDEX and seen < 16:
        src = ref(index[base].args[0]) if index[base].args else None
        if src is None or index[src].numel != index[base].numel:
            break
        base, seen = src, seen + 1
    if index[base].op in op_table.VIEW_OPS and index[base].op not in _SAME_INDEX and base != name:
        base = name  # the chain starts at a view that moves elements: load the view's own tensor
    return base, tuple(node.shape), node.dtype
