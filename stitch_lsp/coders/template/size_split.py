"""A pointwise group whose outputs have different sizes, as one group per size.

One pointwise kernel walks one index space: its outputs must have the same number of elements. A
group can end with outputs of several sizes: an RNN's step, unrolled by tracing, computes the new
hidden state ``tanh(...)`` (batch x hidden) and the next step's ``cat((x[t + 1], hidden))`` (batch x
(input + hidden)) from the same values. Each size gets a group of its own, which recomputes from
the group's inputs what it needs (pointwise work, cheaper than a round trip through memory), so
the pieces are independent and each is one kernel.
"""

from __future__ import annotations

from stitch_lsp.plan.fusion import Group
from stitch_lsp.op_graph import OpNode


def split_by_size(group: Group, index: dict[str, OpNode]) -> list[Group] | None:
    """``group`` as one pointwise group per output size (None when its outputs have one size)."""
    sizes: dict[int, list[str]] = {}
    for o in group.outputs:
        sizes.setdefault(index[o].numel, []).append(o)
    if len(sizes) < 2:
        return None
    members = set(group.nodes)
    owner = {o: size for size, outs in sizes.items() for o in outs}
    pieces = []
    for size, outs in sizes.items():
        need: set[str] = set(outs)
        todo = list(outs)
        while todo:
            for r in index[todo.pop()].refs():
                if r in members and r not in need:
                    need.add(r)
                    todo.append(r)
        nodes = [n for n in group.nodes if n in need]
        pieces.append(Group(
            index=group.index, kind="pointwise", nodes=nodes,
            recomputed=[n for n in nodes if n in group.recomputed or owner.get(n, size) != size],
            inputs=list(dict.fromkeys(r for n in nodes for r in index[n].refs() if r not in members)),
            outputs=list(outs)))
    return pieces
