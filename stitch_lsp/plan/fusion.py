"""Split an operator graph into fusion groups: what becomes one kernel, what stays PyTorch.

Pure and fast (no torch). Used by the Planner (figures) and the template Coder
(lowering). A group is a connected set of pointwise / view / reduction / scan
nodes with no library or PyTorch op between them; a GEMM between two such sets
puts them in different stages, so the groups can always run in order.

A connected set whose reductions lie over different rows (a GroupNorm and then a
mean over the channels, a cross-entropy's per-row logsumexp and then the mean
over the batch) is cut into one group per domain (``reduction_domain``), in
order: a later group takes the earlier reductions' results as inputs and
recomputes whatever else it needs from the original inputs, so no full-size
intermediate is written only to be read back.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from attrs import define, evolve, field

from stitch_lsp.plan import op_table, pooling
from stitch_lsp.plan.gemm_spec import GEMM_OP
from stitch_lsp.plan.reduction_domain import Domain, contiguous_strides, domain_of
from stitch_lsp.op_graph import OpGraph, OpNode

FUSIBLE = ("pointwise", "view", "reduction", "creation", "scan", "window")


@define
class Group:
    index: int
    kind: str  # pointwise | row_reduction | col_reduction | scan | window | view | library | update | torch
    nodes: list[str] = field(factory=list)  # in graph order
    # Members another group owns, computed here again from its inputs rather than read back from memory.
    recomputed: list[str] = field(factory=list)
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
    if node.op in ("aten.prod.dim_int", "aten.gather.default", "aten.cumsum.default", "aten.cumprod.default"):
        dims = [args[1]]
    return normalise_dims(dims, len(src.shape)), src


def simplify(graph: OpGraph) -> OpGraph:
    """The graph with reductions over size-1 dimensions only (a sum over a dim of 1) as the views they are,
    in-place ops on a value nothing else reads (a decomposition's ``clone().clamp_min_()``) as their functional
    forms, and a max pool traced with its indices whose indices nobody reads as the values-only op."""
    index = graph.index()
    users = graph.users()
    inputs = {i.name for i in graph.inputs}
    values_only = _values_only_pools(graph, users, index)
    nodes = []
    changed = bool(values_only)
    for n in graph.nodes:
        if n.name in values_only:
            continue
        pool = values_only.get(n.refs()[0]) if n.op == "getitem" and n.refs() else None
        if pool is not None:
            nodes.append(evolve(n, op=pooling.VALUES_ONLY[pool.op], args_json=pool.args_json,
                                kwargs_json=pool.kwargs_json))
            continue
        name, _, overload = n.op.rpartition(".")
        if name.endswith("_") and not name.endswith("__") and n.refs():
            functional = f"{name[:-1]}.{overload}"
            target = n.refs()[0]
            if (op_table.classify(functional, n.dtype) != "torch" and target not in inputs
                    and users.get(target) == [n.name]):
                n = evolve(n, op=functional)
                changed = True
        if _keeps_elements_in_place(n, index, users):
            n = evolve(n, op="aten.alias.default", args_json=json.dumps([{"$": n.refs()[0]}]), kwargs_json="{}")
            changed = True
        how = op_table.REDUCTION_OPS.get(n.op)
        if how in ("sum", "mean", "max", "min", "prod") and n.dtype == index[n.refs()[0]].dtype:
            dims, src = reduction_dims(n, index)
            if src.numel == n.numel and all(src.shape[d] == 1 for d in dims):
                shape = [{"sym": e, "hint": d} if not e.isdigit() else d
                         for e, d in zip(n.shape_expr or [str(d) for d in n.shape], n.shape)]
                n = evolve(n, op="aten.view.default", args_json=json.dumps([{"$": src.name}, shape]),
                           kwargs_json="{}")
                changed = True
        nodes.append(n)
    return evolve(graph, nodes=nodes) if changed else graph


def _keeps_elements_in_place(n: OpNode, index: dict[str, OpNode], users: dict[str, list[str]]) -> bool:
    """An ``as_strided`` that only restates a computed value's layout: the same sizes, no offset, and the strides
    of a contiguous tensor wherever a size is over 1 (an adaptive pool's decomposition restrides its
    ``[n, c, 1, 1]`` result that way). Every element stays where it is, so it is an alias; the in-place form only
    where nothing else reads the value it restrides."""
    if n.op not in ("aten.as_strided.default", "aten.as_strided_.default") or not n.refs():
        return False
    src = index.get(n.refs()[0])
    args = json.loads(n.args_json)
    if src is None or len(args) < 3 or (len(args) > 3 and args[3] not in (None, 0)):
        return False
    if n.op == "aten.as_strided_.default" and users.get(src.name) != [n.name]:
        return False

    def hint(v: Any) -> Any:
        return v.get("hint") if isinstance(v, dict) else v

    size, stride = [hint(v) for v in args[1]], [hint(v) for v in args[2]]
    if tuple(size) != tuple(src.shape) or len(stride) != len(size):
        return False
    return all(d == 1 or st == w for d, st, w in zip(size, stride, contiguous_strides(tuple(src.shape))))


def _values_only_pools(graph: OpGraph, users: dict[str, list[str]], index: dict[str, OpNode]) -> dict[str, OpNode]:
    """The ``max_pool*_with_indices`` nodes read only through one ``getitem(0)`` of float values, by name."""
    out = {}
    outputs = set(graph.outputs)
    for n in graph.nodes:
        if n.op not in pooling.VALUES_ONLY or n.name in outputs:
            continue
        readers = users.get(n.name, [])
        if len(readers) != 1:
            continue
        item = index[readers[0]]
        if item.op == "getitem" and item.args[1:] == [0] and item.dtype in op_table.FLOAT_DTYPES:
            out[n.name] = n
    return out


def split(graph: OpGraph) -> list[Group]:
    index = graph.index()
    klass = {n.name: op_table.classify(n.op, n.dtype) for n in graph.nodes}
    fusible = {name for name, k in klass.items() if k in FUSIBLE}
    users = graph.users()
    stage = _stages(graph, klass, fusible, users)
    find = _unite(graph, klass, fusible, stage, users)
    groups = _collect(graph, klass, fusible, find)
    groups = [part for g in groups for part in (_by_domain(g, index, klass) if g.kind == "pointwise" else [g])]
    _connect(groups, index, klass, set(graph.outputs))
    # Groups in an order that respects dependencies (a group may start after a later-numbered one's node).
    order = _topo(groups, index)
    for i, g in enumerate(order):
        g.index = i
    return order


def _stages(graph: OpGraph, klass: dict[str, str], fusible: set[str],
            users: dict[str, list[str]]) -> dict[str, int]:
    """Each value's stage: how many non-fusible ops lie on the longest path from the inputs."""
    stage: dict[str, int] = {i.name: 0 for i in graph.inputs}
    for n in graph.nodes:
        s = 0
        for r in n.refs():
            s = max(s, stage.get(r, 0) + (0 if r in fusible or r not in klass else 1))
        stage[n.name] = s
    # A fusible node read only by fusible nodes of a later stage (a buffer scaled for BatchNorm's running-statistics
    # update, read after the GEMM) moves up to them, so it joins their kernel instead of launching its own.
    for n in reversed(graph.nodes):
        readers = users.get(n.name, [])
        if n.name in fusible and readers and all(u in fusible for u in readers):
            stage[n.name] = max(stage[n.name], min(stage[u] for u in readers))
    return stage


def _unite(graph: OpGraph, klass: dict[str, str], fusible: set[str], stage: dict[str, int],
           users: dict[str, list[str]]) -> Callable[[str], str]:
    """Union-find over fusible edges within a stage; returns each fusible node's root."""
    parent = {n: n for n in fusible}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    windows = [n for n in graph.nodes if klass[n.name] == "window"]
    for n in graph.nodes:
        if n.name not in fusible:
            continue
        for r in n.refs():
            if r in fusible and stage[r] == stage[n.name] and "window" not in (klass[r], klass[n.name]):
                parent[find(r)] = find(n.name)
    _join_windows(graph, windows, klass, stage, users, find, parent)
    return find


def _collect(graph: OpGraph, klass: dict[str, str], fusible: set[str], find: Callable[[str], str]) -> list[Group]:
    """The groups in graph order: one per union-find root, one per other op (a library call with its getitems)."""
    groups: list[Group] = []
    by_root: dict[str, Group] = {}
    group_of: dict[str, Group] = {}  # library nodes (and their getitems) -> their group
    for n in graph.nodes:
        if n.name in fusible:
            root = find(n.name)
            group = by_root.get(root)
            if group is None:
                group = Group(index=len(groups), kind="pointwise")
                by_root[root] = group
                groups.append(group)
            group.nodes.append(n.name)
        elif n.op == "getitem" and group_of.get(n.refs()[0]) is not None:
            # A part of a library call's tuple (pooling's values, say) belongs to the call.
            group = group_of[n.refs()[0]]
            group.nodes.append(n.name)
            group_of[n.name] = group
        else:
            kind = klass[n.name]
            groups.append(Group(index=len(groups), kind=kind, nodes=[n.name]))
            if kind == "library" and n.op.startswith("aten."):
                # (The GEMM family's node keeps its getitems as steps of their own: its kernel's outputs.)
                group_of[n.name] = groups[-1]
    return groups


def _connect(groups: list[Group], index: dict[str, OpNode], klass: dict[str, str], outputs: set[str]) -> None:
    """Each group's inputs (read from outside it) and outputs (read elsewhere or returned), and its fused kind."""
    read_elsewhere: set[str] = set()  # values some group reads from memory
    for group in groups:
        members = set(group.nodes)
        seen: set[str] = set()
        for name in group.nodes:
            for r in index[name].refs():
                if r not in members and r not in seen:
                    seen.add(r)
                    group.inputs.append(r)
        read_elsewhere.update(group.inputs)
    for group in groups:
        owned = set(group.nodes) - set(group.recomputed)
        for name in group.nodes:
            if name in owned and (name in outputs or name in read_elsewhere):
                group.outputs.append(name)
        if group.kind == "pointwise":
            group.kind = _fused_kind(group, index, klass)


def _join_windows(graph: OpGraph, windows: list[OpNode], klass: dict[str, str], stage: dict[str, int],
                  users: dict[str, list[str]], find, parent: dict[str, str]) -> None:
    """Pooling ops join the pointwise work around them: before (recomputed for every window element it
    reaches) where nothing else reads it, after where it is no larger than the pool's output. Never a
    reduction or a scan, so a pooling group is one pass over its outputs (a pool feeding a sum is two
    kernels, the pool's output read back once)."""
    outputs = set(graph.outputs)

    def members(name: str) -> list[str]:
        root = find(name)
        return [m for m in parent if find(m) == root]

    def plain(names: list[str]) -> bool:
        return not any(klass[m] in ("reduction", "scan") for m in names)

    index = graph.index()
    for p in windows:
        src = p.refs()[0]
        if src not in parent or stage[src] != stage[p.name]:
            continue
        before = members(src)
        private = all(u in before or u == p.name for m in before for u in users.get(m, []))
        if plain(before) and private and not outputs.intersection(before):
            parent[find(src)] = find(p.name)
    for p in windows:
        for u in users.get(p.name, []):
            if u not in parent or stage[u] != stage[p.name] or find(u) == find(p.name):
                continue
            after = members(u)
            if plain(after) and all(index[m].numel <= p.numel for m in after):
                parent[find(u)] = find(p.name)


def split_windows(group: Group, index: dict[str, OpNode]) -> list[Group] | None:
    """A pooling group whose kernel cannot be written (outputs of several sizes) as each pooling op alone
    and the pointwise parts between them, in order; None when the group is one pooling op already."""
    klass = {n: op_table.classify(index[n].op, index[n].dtype) for n in group.nodes}
    windows = [n for n in group.nodes if klass[n] == "window"]
    rest = [n for n in group.nodes if klass[n] != "window"]
    if not rest:
        return None
    parent = {n: n for n in rest}

    def find(x: str) -> str:
        while parent[x] != x:
            x = parent[x]
        return x

    for n in rest:
        for r in index[n].refs():
            if r in parent:
                parent[find(r)] = find(n)
    parts: dict[str, list[str]] = {}
    for n in group.nodes:
        parts.setdefault(n if n in windows else "part " + find(n), []).append(n)
    pieces = [Group(index=group.index, kind="pointwise", nodes=nodes) for nodes in parts.values()]
    read: set[str] = set()
    for piece in pieces:
        inside = set(piece.nodes)
        piece.inputs = list(dict.fromkeys(r for n in piece.nodes for r in index[n].refs() if r not in inside))
        read.update(piece.inputs)
    for piece in pieces:
        piece.outputs = [n for n in piece.nodes if n in group.outputs or n in read]
        piece.kind = _fused_kind(piece, index, klass)
    ordered = _topo(pieces, index)
    for piece in ordered:
        piece.index = group.index
    return ordered


def domain(node: OpNode, index: dict[str, OpNode]) -> Domain:
    """The rows a reduction or scan node runs over."""
    dims, src = reduction_dims(node, index)
    return domain_of(tuple(src.shape), dims)


def _by_domain(group: Group, index: dict[str, OpNode], klass: dict[str, str]) -> list[Group]:
    """``group`` cut into one group per reduction domain (a scan is a domain of its own), in order.

    A node's home is the first part where all it reads is ready: a reduction joins the part of the
    values it reads when that part reduces over the same rows (or nothing yet), else a later one. A
    later part recomputes the non-reduction members it reads (from the original inputs and the
    earlier parts' reductions), so only reductions pass between parts.
    """
    reducers = [n for n in group.nodes if klass[n] in ("reduction", "scan")]
    if len(reducers) <= 1 or len({(klass[n] == "scan" and n) or domain(index[n], index).key()
                                  for n in reducers}) <= 1:
        return [group]
    members = set(group.nodes)
    home: dict[str, int] = {}
    part_key: dict[int, object] = {}
    for n in group.nodes:
        s = max((home[r] for r in index[n].refs() if r in members), default=0)
        if klass[n] in ("reduction", "scan"):
            key = n if klass[n] == "scan" else domain(index[n], index).key()
            while part_key.get(s) not in (None, key) or (klass[n] == "scan" and s in part_key):
                s += 1
            part_key[s] = key
        home[n] = s
    # Members that depend on no reduction go where they are first needed (they are recomputed anyway).
    pure: set[str] = set()
    for n in group.nodes:
        if klass[n] not in ("reduction", "scan") and all(r not in members or r in pure for r in index[n].refs()):
            pure.add(n)
    users: dict[str, list[str]] = {n: [] for n in group.nodes}
    for n in group.nodes:
        for r in index[n].refs():
            if r in members:
                users[r].append(n)
    for n in reversed(group.nodes):
        if n in pure and users[n]:
            home[n] = min(home[u] for u in users[n])
    parts: list[Group] = []
    for s in sorted(set(home.values())):
        owned = [n for n in group.nodes if home[n] == s]
        need = _recomputed_with(owned, members, index, klass)
        nodes = [n for n in group.nodes if n in need]
        parts.append(Group(index=group.index, kind="pointwise", nodes=nodes,
                           recomputed=[n for n in nodes if home[n] != s]))
    return parts


def _recomputed_with(nodes: list[str], members: set[str], index: dict[str, OpNode],
                     klass: dict[str, str]) -> set[str]:
    """``nodes`` and the members they read that are recomputed with them: everything up to the reductions
    (and scans), whose results are read from memory instead."""
    need = set(nodes)
    todo = list(nodes)
    while todo:
        n = todo.pop()
        for r in index[n].refs():
            if r in members and r not in need and klass[r] not in ("reduction", "scan"):
                need.add(r)
                todo.append(r)
    return need


def split_tail(group: Group, index: dict[str, OpNode], rows: int | None = None) -> list[Group] | None:
    """``group`` as its reductions (with what they read) and, after them, a pointwise tail.

    For a tail the reduction kernel cannot write per row (row values broadcast into a tensor laid out
    unlike the rows, say), or should not (few long rows: a pointwise kernel writes the outputs faster
    than blocks walking a row): the tail reads the reductions' results and recomputes the rest from the
    group's inputs. ``rows``: values of that many elements computed from the reductions (a running
    statistic, a per-row result) stay with them. None when there is no such tail.
    """
    members = set(group.nodes)
    klass = {n: op_table.classify(index[n].op, index[n].dtype) for n in group.nodes}
    core: set[str] = set()
    todo = [n for n in group.nodes if klass[n] in ("reduction", "scan")]
    if rows is not None:
        reduced: set[str] = set()
        for n in group.nodes:
            if klass[n] in ("reduction", "scan") or any(r in reduced for r in index[n].refs()):
                reduced.add(n)
        todo += [n for n in group.nodes if n in reduced and index[n].numel == rows and rows != group_numel(group, index)]
    while todo:
        n = todo.pop()
        if n in core:
            continue
        core.add(n)
        todo += [r for r in index[n].refs() if r in members]
    owned = set(group.nodes) - set(group.recomputed)
    rest = [n for n in group.nodes if n not in core and n in owned]
    if not rest or not core:
        return None
    need = _recomputed_with(rest, members, index, klass)
    head_nodes = [n for n in group.nodes if n in core]
    tail_nodes = [n for n in group.nodes if n in need]
    tail = Group(index=group.index, kind="pointwise", nodes=tail_nodes,
                 recomputed=[n for n in tail_nodes if n not in rest])
    tail_set = set(tail_nodes)
    tail.inputs = list(dict.fromkeys(r for n in tail_nodes for r in index[n].refs() if r not in tail_set))
    tail.outputs = [o for o in group.outputs if o in tail_set and o not in tail.recomputed]
    head = Group(index=group.index, kind=group.kind, nodes=head_nodes,
                 recomputed=[n for n in head_nodes if n in group.recomputed])
    head_set = set(head_nodes)
    head.inputs = list(dict.fromkeys(r for n in head_nodes for r in index[n].refs() if r not in head_set))
    head.outputs = [n for n in head_nodes if n not in head.recomputed and (n in group.outputs or n in tail.inputs)]
    return [head, tail]


def group_numel(group: Group, index: dict[str, OpNode]) -> int:
    return max((index[n].numel for n in group.outputs), default=0)


def _fused_kind(group: Group, index: dict[str, OpNode], klass: dict[str, str]) -> str:
    kinds = {klass[n] for n in group.nodes}
    if kinds <= {"view"}:
        copies = any(index[n].op in op_table.COPYING_VIEW_OPS for n in group.nodes)
        if copies and all(index[n].op == "aten.clone.default" for n in group.nodes
                          if index[n].op in op_table.COPYING_VIEW_OPS):
            # Only of values whose layout is known row-major (a kernel's, a GEMM's). A kernel reads its inputs
            # row-major, so of forward's own strided inputs (split heads) or of an attention call's output (whose
            # transpose back is often contiguous already) the binding would copy first and the kernel copy again:
            # the nanoGPT attention selection went from 0.92x to 0.76x torch.compile that way on an H200.
            if not all(_row_major(index[i], klass) for i in group.inputs):
                return "view"
        return "pointwise" if copies else "view"
    if "window" in kinds:
        return "window"
    if "scan" in kinds:
        return "scan"
    if "reduction" not in kinds:
        return "pointwise"
    for name in group.nodes:
        if klass[name] == "reduction" and domain(index[name], index).layout != "rows":
            return "col_reduction"
    return "row_reduction"


def _row_major(node: OpNode, klass: dict[str, str]) -> bool:
    """A value written row-major: a GEMM's result, or a kernel's output."""
    return (node.op in op_table.ROW_MAJOR_RESULTS or node.op == GEMM_OP
            or klass.get(node.name) in ("pointwise", "reduction", "scan"))


def _topo(groups: list[Group], index: dict[str, OpNode]) -> list[Group]:
    for i, g in enumerate(groups):
        g.index = i
    owner = {n: g.index for g in groups for n in g.nodes if n not in g.recomputed}
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
