"""Where a view's elements lie in the value it views: a base value, an element offset and strides.

A kernel that takes q, k and v of attention reads them as row-major tensors, so the binding copies a
transposed or sliced view first (``.contiguous()``): three copies for the heads split from one QKV
projection. Reading through the view instead needs only where its elements lie in the value it was taken
from. That value is read row-major (the binding makes a kernel's argument contiguous, a no-op for a GEMM's
or a kernel's output), or, for forward's own input, at the strides it was traced with
(``GraphInput.strides``). The walk follows only ops that never copy (views, transposes, slices, splits);
anything else ends it, and where no base is found the view itself is the argument, as before.
"""

from __future__ import annotations

import math
from typing import Any

from stitch_lsp.coders.template.values.index_maps import contiguous_strides as _row_major
from stitch_lsp.op_graph import OpGraph, OpNode

_SAME = {"aten.alias.default", "aten.detach.default"}
_RESHAPES = {"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default"}
_SPLITS = {"aten.split.Tensor", "aten.split_with_sizes.default"}
_WALKED = _SAME | _RESHAPES | {"aten.permute.default", "aten.transpose.int", "aten.t.default",
                               "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims",
                               "aten.squeeze.default", "aten.slice.Tensor", "aten.select.int", "getitem"}

Layout = tuple[str, int, tuple[int, ...]]  # (base value, element offset, strides)


def hint(v: Any) -> Any:
    """A traced argument's number: a symbolic size's value at the traced shape, else the argument."""
    return v.get("hint") if isinstance(v, dict) and "hint" in v else v


def view_strides(old: tuple[int, ...], strides: list[int], new: tuple[int, ...]) -> list[int] | None:
    """The strides of ``view(new)`` of a tensor of shape ``old`` at ``strides``; None where PyTorch's view
    would refuse (``reshape`` copies there). PyTorch's own rule (``computeStride``): dimensions merge only
    where they are contiguous with one another."""
    if math.prod(old) == 0:
        return _row_major(new)
    out = [0] * len(new)
    view_d = len(new) - 1
    chunk = strides[-1] if strides else 1
    tensor_numel = view_numel = 1
    for d in range(len(old) - 1, -1, -1):
        tensor_numel *= old[d]
        if d == 0 or (old[d - 1] != 1 and strides[d - 1] != tensor_numel * chunk):
            while view_d >= 0 and (view_numel < tensor_numel or new[view_d] == 1):
                out[view_d] = view_numel * chunk
                view_numel *= new[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                chunk, tensor_numel, view_numel = strides[d - 1], 1, 1
    return out if view_d == -1 else None


def _dim(d: Any, rank: int) -> int:
    d = hint(d)
    return d + rank if d < 0 else d


def _step(node: OpNode, index: dict[str, OpNode], shape: tuple[int, ...], strides: list[int],
          offset: int) -> tuple[list[int], int] | None:
    """``node``'s strides and offset from its input's; None where it is no view this walk follows."""
    op, args, rank = node.op, node.args, len(shape)
    if op in _SAME:
        return strides, offset
    if op in _RESHAPES:
        got = view_strides(shape, strides, tuple(node.shape))
        return (got, offset) if got is not None else None
    if op == "aten.permute.default":
        return [strides[_dim(d, rank)] for d in args[1]], offset
    if op in ("aten.transpose.int", "aten.t.default"):
        a, b = (_dim(args[1], rank), _dim(args[2], rank)) if op == "aten.transpose.int" else (0, 1)
        out = list(strides)
        if rank > 1:
            out[a], out[b] = out[b], out[a]
        return out, offset
    if op == "aten.unsqueeze.default":
        d = _dim(args[1], rank + 1)
        return strides[:d] + [strides[d] * shape[d] if d < rank else 1] + strides[d:], offset
    if op.startswith("aten.squeeze."):
        return [s for s, n in zip(strides, _squeeze_keeps(shape, tuple(node.shape))) if n], offset
    if op == "aten.slice.Tensor":
        d = _dim(args[1] if len(args) > 1 else 0, rank)
        start = hint(args[2]) if len(args) > 2 and args[2] is not None else 0
        step = hint(args[4]) if len(args) > 4 else 1
        start = max(0, start + shape[d] if start < 0 else min(start, shape[d]))
        out = list(strides)
        out[d] *= step
        return out, offset + start * strides[d]
    if op == "aten.select.int":
        d = _dim(args[1], rank)
        i = hint(args[2])
        i = i + shape[d] if i < 0 else i
        return strides[:d] + strides[d + 1:], offset + i * strides[d]
    if op == "getitem":
        split = index.get(args[0].get("$")) if isinstance(args[0], dict) else None
        if split is None or split.op not in _SPLITS:
            return None
        sargs = split.args
        d = _dim(sargs[2] if len(sargs) > 2 else 0, rank)
        if split.op == "aten.split.Tensor":
            size = hint(sargs[1])
            sizes = [min(size, shape[d] - s) for s in range(0, shape[d], size)]
        else:
            sizes = [hint(s) for s in sargs[1]]
        return list(strides), offset + sum(sizes[: hint(args[1])]) * strides[d]
    return None


def _squeeze_keeps(old: tuple[int, ...], new: tuple[int, ...]) -> list[bool]:
    """Which of ``old``'s dimensions a squeeze to ``new`` keeps (the size-1 ones it drops, left to right)."""
    keep, j = [], 0
    for size in old:
        if j < len(new) and new[j] == size:
            keep.append(True)
            j += 1
        else:
            keep.append(False)
    return keep


def _source(node: OpNode) -> str | None:
    first = node.args[0] if node.args else None
    return first.get("$") if isinstance(first, dict) else None


def in_place_layout(name: str, index: dict[str, OpNode], graph: OpGraph) -> Layout:
    """Where ``name``'s elements lie: the furthest value the view ops lead back to, with the offset and
    strides that read ``name`` in it (the base read row-major, or a forward input at its traced strides).
    ``(name, 0, row-major strides)`` when ``name`` is no view."""
    chain: list[OpNode] = []
    node = index[name]
    while node.op in _WALKED:
        src = _source(node)
        if node.op == "getitem":
            split = index.get(src or "")
            src = _source(split) if split is not None and split.op in _SPLITS else None
        if src is None or src not in index:
            break
        chain.append(node)
        node = index[src]
    traced = {i.name: list(i.strides) for i in graph.inputs if i.strides}
    base = node
    shape = tuple(base.shape)
    strides, offset = traced.get(base.name) or _row_major(shape), 0
    for step in reversed(chain):
        got = _step(step, index, shape, strides, offset)
        shape = tuple(step.shape)
        if got is None:  # a step the walk cannot read through: the value it makes is the base instead
            base, strides, offset = step, traced.get(step.name) or _row_major(shape), 0
            continue
        strides, offset = got
    return base.name, offset, tuple(strides)
