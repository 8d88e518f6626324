"""Split an operator graph into fusion groups: what becomes one kernel, what stays PyTorch.

Pure and fast (no torch). Used by the Planner (figures) and the template Coder
(lowering). A group is a connected set of pointwise / view / reduction nodes
with no library or PyTorch op between them; a GEMM between two such sets puts
them in different stages, so the groups can always run in order.
"""

from __future__ import annotations

from attrs import define, field

from stitch_lsp.agents import op_table
from stitch_lsp.op_graph import OpGraph, OpNode


@define
class Group:
    index: int
    kind: str  # pointwise | row_reduction | col_reduction | view | library | torch
    nodes: list[str] = field(factory=list)  # in graph order
    inputs: list[str] = field(factory=list)  # values read from outside the group
    outputs: list[str] = field(factory=list)  # values used after the group (or returned)
    note: str = ""


def normalise_dims(dims, rank: int) -> list[int]:
    if dims is None or dims == []:
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return sorted(d % rank if rank else 0 for d in dims)


def reduction_dims(node: OpNode, graph_index: dict[str, OpNode]) -> tuple[list[int], OpNode]:
    args = node.args
    src = graph_index[args[0]["$"]]
    dims = args[1] if len(args) > 1 and not isinstance(args[1], bool) else node.kwargs.get("dim")
    if node.op in ("aten.sum.default", "aten.mean.default"):
        dims = None
    if node.op in ("aten.prod.dim_int", "aten.gather.default"):
        dims = [args[1]]
    return normalise_dims(dims, len(src.shape)), src


def split(graph: OpGraph) -> list[Group]:
    index = graph.index()
    klass = {n.name: op_table.classify(n.op, n.dtype) for n in graph.nodes}
    fusible = {name for name, k in klass.items() if k in ("pointwise", "view", "reduction", "creation")}
    # Stage: how many non-fusible ops lie on the longest path from the inputs.
    stage: dict[str, int] = {i.name: 0 for i in graph.inputs}
    for n in graph.nodes:
        s = 0
        for r in n.refs():
            s = max(s, stage.get(r, 0) + (0 if r in fusible or r not in klass else 1))
        stage[n.name] = s
    # Union-find over fusible edges within a stage.
    parent = {n: n for n in fusible}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for n in graph.nodes:
        if n.name not in fusible:
            continue
        for r in n.refs():
            if r in fusible and stage[r] == stage[n.name]:
                parent[find(r)] = find(n.name)

    users = graph.users()
    outputs = set(graph.outputs)
    groups: list[Group] = []
    by_root: dict[str, Group] = {}
    for n in graph.nodes:
        if n.name in fusible:
            root = find(n.name)
            group = by_root.get(root)
            if group is None:
                group = Group(index=len(groups), kind="pointwise")
                by_root[root] = group
                groups.append(group)
            group.nodes.append(n.name)
        else:
            kind = klass[n.name]
            groups.append(Group(index=len(groups), kind=kind, nodes=[n.name]))
    for group in groups:
        members = set(group.nodes)
        seen: set[str] = set()
        for name in group.nodes:
            for r in index[name].refs():
                if r not in members and r not in seen:
                    seen.add(r)
                    group.inputs.append(r)
        for name in group.nodes:
            if name in outputs or any(u not in members for u in users.get(name, [])):
                group.outputs.append(name)
        if group.kind == "pointwise":
            group.kind = _fused_kind(group, index, klass)
    # Groups in an order that respects dependencies (a group may start after a later-numbered one's node).
    order = _topo(groups, index)
    for i, g in enumerate(order):
        g.index = i
    return order


def _fused_kind(group: Group, index: dict[str, OpNode], klass: dict[str, str]) -> str:
    kinds = {klass[n] for n in group.nodes}
    if kinds <= {"view"}:
        return "view"
    if "reduction" not in kinds:
        return "pointwise"
    for name in group.nodes:
        node = index[name]
        if klass[name] != "reduction":
            continue
        dims, src = reduction_dims(node, index)
        rank = len(src.shape)
        if dims != list(range(rank - len(dims), rank)):
            return "col_reduction"
    return "row_reduction"


def _topo(groups: list[Group], index: dict[str, OpNode]) -> list[Group]:
    owner = {n: g.index for g in groups for n in g.nodes}
    deps = {g.index: {owner[i] for i in g.inputs if i in owner} for g in groups}
    done: list[Group] = []
    placed: set[int] = set()
    pending = list(groups)
    while pending:
        for g in pending:
            if deps[g.index] <= placed:
                done.append(g)
                placed.add(g.index)
                pending.remove(g)
                break
        else:  # a cycle cannot happen with stages; keep graph order rather than loop forever
            done.extend(pending)
            break
    return done
