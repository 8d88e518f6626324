"""A reduction that reads a channels-last convolution output, written in the output's memory order.

In channels-last the channels are the innermost dimension: a minimum over the channels of NCHW (a column
reduction there) is a row reduction over contiguous channels, and a global average pool (rows of H x W
there) is a column reduction whose neighbouring rows are neighbouring channels. Both are coalesced as
they stand. So the group is rewritten in the convolution's physical order (N, spatial..., C): the
convolution's output becomes a contiguous tensor of that shape, the pointwise ops before the reduction
take the same permuted shape, the reduced dims are renumbered, and per-channel operands (a bias of
(C, 1, 1)) are reshaped to broadcast along the last dim, which they can be without moving a byte. The
reduction kernel writers then pick the layout from the rewritten shapes as for any other group.

Only groups whose outputs hold the same bytes in both orders are rewritten: values reduced over the
channels ((N, 1, H, W) is (N, H, W, 1)) or over every spatial dim ((N, C, 1, 1), (N, C)). A group that
writes a full-size output (a softmax over the channels, a norm) would write it transposed; it keeps the
convolution in NCHW.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from attrs import evolve

from stitch_lsp.plan import op_table
from stitch_lsp.plan.fusion import Group, normalise_dims
from stitch_lsp.coders.template.emitter import Unsupported
from stitch_lsp.coders.template.values.windows import SPATIAL_FROM
from stitch_lsp.op_graph import OpNode

# Reductions whose args are (input, dims, keepdim): the dims renumbered, the rest kept.
_DIMMED = {"aten.sum.dim_IntList", "aten.mean.dim", "aten.amax.default", "aten.amin.default", "aten.prod.dim_int",
           "aten.argmax.default", "aten.argmin.default", "aten.any.dim", "aten.any.dims", "aten.all.dim",
           "aten.all.dims"}
_WHOLE = {"aten.sum.default", "aten.mean.default", "aten.any.default", "aten.all.default"}
# Views that keep the elements' order (a new shape over the same bytes).
_RESHAPES = {"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default", "aten.alias.default",
             "aten.clone.default", "aten.detach.default", "aten.unsqueeze.default", "aten.squeeze.dim",
             "aten.squeeze.dims", "aten.squeeze.default", "aten.contiguous.default"}


CAT = "aten.cat.default"


def _order(rank: int) -> list[int]:
    """Channels-last order: physical dim i holds logical dim order[i]."""
    return [0, *range(2, rank), 1]


def _permuted(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(shape[d] for d in _order(len(shape)))


def moves(shape: tuple[int, ...], dropped: tuple[int, ...] = ()) -> bool:
    """Whether channels-last order reorders the elements of a contiguous tensor of this (logical, full-rank)
    shape, less the dims ``dropped``: whether its dims other than size-1 ones come in another order. Judged by
    dims, not sizes: (N, C, H, W) with C == H == W moves although its permuted sizes read the same."""
    kept = [d for d in range(len(shape)) if shape[d] != 1 and d not in dropped]
    return [d for d in _order(len(shape)) if d in kept] != kept


def _reshaped(node: OpNode, shape: tuple[int, ...]) -> OpNode:
    return evolve(node, op="aten.view.default", args_json=json.dumps([node.args[0], list(shape)]),
                  kwargs_json="{}", shape=shape, shape_expr=[])


def physical_index(group: Group, index: dict[str, OpNode], conv: str | Iterable[str],
                   writes: bool = False) -> dict[str, OpNode]:
    """``index`` with the convolution output and the group's members in channels-last order (see the module
    doc). ``conv``: the value (or values, all of one rank) read in that order; ``writes``: the group's outputs
    are written in that order too (they may move). Raises Unsupported where a member cannot be written in that
    order or, unless ``writes``, an output would move."""
    sources = [conv] if isinstance(conv, str) else sorted(conv)
    rank = len(index[sources[0]].shape)
    new = dict(index)
    for name in sources:
        if len(index[name].shape) != rank:
            raise Unsupported(f"{name} has rank {len(index[name].shape)} beside a rank-{rank} channels-last value")
        new[name] = evolve(index[name], shape=_permuted(index[name].shape), shape_expr=[])
    framed = set(sources)  # values in the physical order, of rank ``rank``
    members = set(group.nodes)
    fixed: dict[str, tuple[int, ...]] = {}  # value -> the shape a reader has already taken it at

    def take(name: str, shape: tuple[int, ...]) -> None:
        if fixed.setdefault(name, shape) != shape:
            raise Unsupported(f"{name} is read in both orders")

    def present(name: str, full: tuple[int, ...]) -> None:
        """Give the value ``name`` (of logical shape ``full``, padded to the full rank) its channels-last shape,
        where that is the same bytes and it is a leaf or a reshape."""
        node, want = new[name], _permuted(full)
        if node.numel <= 1:
            take(name, node.shape)
            return
        if name in sources or moves(full):
            raise Unsupported(f"{name} {list(index[name].shape)} would be read across the channels-last order")
        if node.shape == want:
            take(name, node.shape)
            return
        if name in members and node.op not in _RESHAPES:
            if name not in waiting:
                raise Unsupported(f"{name} ({op_table.short(node.op)}) broadcasts into a channels-last value")
            # A per-channel value computed here (BatchNorm's scale from its variance): computed in the
            # permuted shape, from its inputs given that shape too (none of them moves).
            waiting.discard(name)
            for r in node.refs():
                shape = index[r].shape
                if len(shape) > rank:
                    raise Unsupported(f"{name} ({op_table.short(node.op)}) broadcasts into a channels-last value")
                present(r, (1,) * (rank - len(shape)) + tuple(shape))
            take(name, want)
            new[name] = evolve(node, shape=want, shape_expr=[])
            return
        take(name, want)
        new[name] = _reshaped(node, want) if name in members else evolve(node, shape=want, shape_expr=[])

    waiting: set[str] = set()  # pointwise members that read no framed value, as yet unread by one
    for name in group.nodes:
        node = index[name]
        refs = node.refs()
        if not any(r in framed for r in refs):
            if op_table.classify(node.op, node.dtype) == "pointwise" and len(node.shape) <= rank:
                waiting.add(name)
                continue
            for r in refs:
                take(r, index[r].shape)
            continue
        kind = op_table.classify(node.op, node.dtype)
        if kind == "pointwise":
            if len(node.shape) != rank:
                raise Unsupported(f"{name} has rank {len(node.shape)} beside a rank-{rank} convolution output")
            for r in refs:
                if r in framed:
                    take(r, new[r].shape)
                    continue
                shape = index[r].shape
                present(r, (1,) * (rank - len(shape)) + tuple(shape))
            new[name] = evolve(node, shape=_permuted(node.shape), shape_expr=[])
            framed.add(name)
        elif kind == "reduction" and (node.op in _DIMMED or node.op in _WHOLE):
            (x,) = refs[:1]
            take(x, new[x].shape)
            args = node.args
            if node.op in _WHOLE:
                new[name] = node  # every element: the order does not matter
                continue
            dims = normalise_dims(args[1], rank)
            if node.op in ("aten.argmax.default", "aten.argmin.default") and (args[1] is None or len(dims) > 1):
                raise Unsupported("a position over several dims counts in the other order")
            where = _order(rank).index
            new_dims = sorted(where(d) for d in dims)
            keep = bool(args[2]) if len(args) > 2 else bool(node.kwargs.get("keepdim", False))
            shape = _permuted(node.shape) if keep else node.shape
            if not keep and moves(index[x].shape, tuple(dims)):
                raise Unsupported(f"{name} keeps dims in another order in channels-last")
            args[1] = new_dims if isinstance(args[1], list) else new_dims[0]
            new[name] = evolve(node, args_json=json.dumps(args), shape=shape, shape_expr=[])
            if keep:
                framed.add(name)
        elif kind == "window" and refs[0] in framed and len(node.shape) == rank:
            take(refs[0], new[refs[0]].shape)  # a pool over the spatial dims, which now start at dim 1
            kwargs = dict(node.kwargs, **{SPATIAL_FROM: 1})
            new[name] = evolve(node, shape=_permuted(node.shape), kwargs_json=json.dumps(kwargs), shape_expr=[])
            framed.add(name)
        elif node.op == CAT and len(node.shape) == rank:
            # A cat along any dim: along its place in the physical order (the channels: the last).
            for r in refs:
                if r in framed:
                    take(r, new[r].shape)
                elif len(index[r].shape) == rank:
                    present(r, tuple(index[r].shape))
                else:
                    raise Unsupported(f"{name} (cat) of a rank-{len(index[r].shape)} value")
            args = node.args
            dim = (args[1] if len(args) > 1 else 0) % rank
            args = [args[0], _order(rank).index(dim)]
            new[name] = evolve(node, args_json=json.dumps(args), kwargs_json="{}", shape=_permuted(node.shape),
                               shape_expr=[])
            framed.add(name)
        elif kind == "view" and node.op in _RESHAPES:
            (x,) = refs[:1]
            take(x, new[x].shape)
            if moves(index[x].shape):
                raise Unsupported(f"{name} ({op_table.short(node.op)}) reshapes a channels-last value")
            new[name] = _reshaped(node, node.shape)
        else:
            raise Unsupported(f"{op_table.short(node.op)} of a channels-last value")
    for name in [n for n in group.nodes if n in waiting]:  # computed as written: their inputs as they are
        for r in index[name].refs():
            take(r, index[r].shape)
    for o in group.outputs:
        if writes and o not in framed and moves(index[o].shape):
            raise Unsupported(f"{o} {list(index[o].shape)} is not computed in the channels-last order")
        if not writes and o in framed and moves(index[o].shape):
            raise Unsupported(f"{o} {list(index[o].shape)} would be written transposed")
    return new

